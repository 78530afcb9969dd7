"""One run of the fault suite: a workload over every gateway, a seeded series of fault
cycles, every fault healed, every key read back, the history checked, fsck run.

`run_suite` returns what the run saw; the tests assert on it and print its table.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY
from tests.netns.checker import OK, PUT, Finding, Op, check
from tests.netns.cluster import ACK_QUORUM, BOOKIE_PORT, ENTRY_SIZE_BYTES, NetnsCluster
from tests.netns.nemesis import PROBE_BUCKET, CycleRecord, Nemesis, Topology, plan
from tests.netns.network import Network
from tests.netns.workload import BackgroundLoad, History, Workload, final_reads
from tests.waiting import wait_until

BUCKET = "history"
LOAD_BUCKET = "load"
WORKERS = 4
OPS_PER_QUIET_SPELL = 20
FINAL_READ_TIMEOUT_S = 60.0
LEDGERS_CLOSED_TIMEOUT_S = 90.0


@dataclass
class SuiteResult:
    seed: int
    records: list[CycleRecord]
    history_counts: Counter[str]
    findings: list[Finding]
    fsck: dict[str, Any]
    keys: int
    seconds: float
    check_s: float
    fsck_s: float
    after_repair: dict[str, Any] = field(default_factory=dict)  # fsck once repair has run
    repair_s: float = 0.0
    faults_planned: list[str] = field(default_factory=list)
    background: str = "off"
    bookie_names: dict[str, str] = field(default_factory=dict)  # bookie id -> host name

    def lost(self) -> list[dict[str, Any]]:
        """fsck's dangling references: bytes the catalog names that no bookie holds."""
        return list(self.fsck["dangling"])

    def below_ack_quorum(self) -> list[dict[str, Any]]:
        return [e for e in self.fsck["under_replicated"] if e["good_copies"] < ACK_QUORUM]

    def table(self) -> str:
        ops = sum(self.history_counts.values())
        faults = Counter(record.fault.kind for record in self.records)
        recovery = sorted(record.recovery_s for record in self.records) or [0.0]
        rows = [
            ("seed", str(self.seed)),
            ("cycles", str(len(self.records))),
            (
                "operations",
                f"{ops} ({', '.join(f'{k} {v}' for k, v in sorted(self.history_counts.items()))})",
            ),
            ("keys", str(self.keys)),
            ("faults by kind", ", ".join(f"{k} {v}" for k, v in sorted(faults.items()))),
            ("lost", str(len(self.lost()))),
            ("checker findings", str(len(self.findings))),
            ("under-replicated entries", self._under_replicated()),
            ("below AQ copies", str(len(self.below_ack_quorum()))),
            ("corrupt copies", str(self.fsck["summary"]["corrupt_copies"])),
            ("under-replicated after repair", str(len(self.after_repair["under_replicated"]))),
            ("repair (s)", f"{self.repair_s:.1f}"),
            (
                "recovery after heal (s)",
                f"median {recovery[len(recovery) // 2]:.1f}, max {recovery[-1]:.1f}",
            ),
            ("benchmark generator", self.background),
            ("check, fsck (s)", f"{self.check_s:.1f}, {self.fsck_s:.1f}"),
            ("run (s)", f"{self.seconds:.0f}"),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)

    def _under_replicated(self) -> str:
        """How many, and their bad copies by what fsck found (missing, corrupt, ...) and
        on which bookie."""
        entries = self.fsck["under_replicated"]
        bad = Counter(
            f"{outcome} on {self.bookie_names.get(bookie, bookie)}"
            for entry in entries
            for bookie, outcome in entry["copies"].items()
            if outcome != "ok"
        )
        by_outcome = ", ".join(f"{outcome} {count}" for outcome, count in sorted(bad.items()))
        return f"{len(entries)} ({by_outcome})" if entries else "0"

    def cycle_lines(self) -> str:
        return "\n".join(
            f"cycle {r.cycle:3d} {r.fault.kind:<15} {','.join(r.targets):<24} "
            f"hold {r.fault.hold_s:4.1f}s recovered in {r.recovery_s:5.1f}s {r.detail[:80]}"
            for r in self.records
        )


def save_history(ops: list[Op], path: Path) -> None:
    """One JSON object per operation, to check a failed run's history again offline."""
    with open(path, "w") as file:
        for op in ops:
            record = {**asdict(op), "listed": None if op.listed is None else sorted(op.listed)}
            file.write(json.dumps(record) + "\n")


def load_history(path: Path) -> list[Op]:
    ops = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        listed = record.pop("listed")
        ops.append(Op(**record, listed=None if listed is None else frozenset(listed)))
    return ops


def create_buckets(cluster: NetnsCluster) -> None:
    s3 = cluster.s3(cluster.gateways[0])
    for bucket in (BUCKET, PROBE_BUCKET, LOAD_BUCKET):
        wait_until(
            functools.partial(_created, s3, bucket),
            60,
            message=f"bucket {bucket} created",
            interval_s=0.5,
        )


def _created(s3: Any, bucket: str) -> bool:
    try:
        s3.create_bucket(Bucket=bucket)
    except Exception as e:  # noqa: BLE001 - retried; an earlier attempt may have made it
        return "BucketAlreadyOwnedByYou" in repr(e)
    return True


def wait_for_ops(history: History, count: int, timeout_s: float = 120.0) -> None:
    """Until `count` more operations succeeded: the workload made progress."""
    target = _ok_ops(history) + count
    wait_until(
        lambda: _ok_ops(history) >= target,
        timeout_s,
        message=f"{count} operations succeeded",
        interval_s=0.1,
    )


def _ok_ops(history: History) -> int:
    return sum(1 for op in history.snapshot() if op.outcome == OK)


def run_suite(
    cluster: NetnsCluster, network: Network, seed: int, cycles: int, background: bool = False
) -> SuiteResult:
    started = time.monotonic()
    rng = random.Random(seed)
    topology = Topology(
        tuple(n.name for n in cluster.zookeepers),
        tuple(n.name for n in cluster.bookies),
        tuple(n.name for n in cluster.gateways),
    )
    corruptible = rng.choice(topology.bookies)
    faults = plan(rng, cycles, topology, corruptible)
    create_buckets(cluster)
    history = History()
    clients = [[cluster.s3(gateway) for gateway in cluster.gateways] for _ in range(WORKERS)]
    workload = Workload(clients, BUCKET, history, seed, ENTRY_SIZE_BYTES)
    nemesis = Nemesis(cluster, network, random.Random(f"{seed}:nemesis"))
    load = BackgroundLoad(
        [cluster.endpoint(g) for g in cluster.gateways], LOAD_BUCKET, ACCESS_KEY, SECRET_KEY, seed
    )
    workload.start()
    if background:
        load.start()
    try:
        wait_for_ops(history, OPS_PER_QUIET_SPELL)
        for cycle, fault in enumerate(faults):
            workload.cycle = cycle
            print(f"cycle {cycle}: {fault}", flush=True)
            nemesis.run_cycle(cycle, fault)
        workload.cycle = len(faults)
        wait_for_ops(history, OPS_PER_QUIET_SPELL)
    finally:
        workload.stop.set()
        load.stop.set()
        nemesis.heal_all()
    workload.finish()
    load.finish()
    result = _verify(cluster, history, nemesis, seed, started, faults=[f.kind for f in faults])
    if background:
        result.background = (
            f"{load.ops} PUTs, {load.errors} errors, {load.phases_failed} phases cut short"
        )
    return result


def _repaired(cluster: NetnsCluster) -> dict[str, Any]:
    """fsck after the writer ledgers are closed and one repair pass has run
    (`fsck --queue-repairs`, then the replication worker). The replication worker
    repairs closed ledgers only, as BookKeeper's does: an open ledger's tail is its
    writer's to settle."""
    _close_writer_ledgers(cluster)
    repaired = cluster.repair()
    print(f"repair: exit {repaired.returncode}, {repaired.stderr[-300:]}")
    return cluster.fsck()


def _close_writer_ledgers(cluster: NetnsCluster) -> None:
    """Stop every gateway (each closes its writer ledgers), then start one again: its
    sweeper closes the ledgers of the gateways killed during the run."""
    for gateway in cluster.gateways:
        gateway.managed.stop()
    cluster.gateways[0].start()
    open_ledgers: list[Any] = []

    def all_closed() -> bool:
        open_ledgers[:] = cluster.fsck()["open_ledgers"]
        return not open_ledgers

    wait_until(
        all_closed,
        LEDGERS_CLOSED_TIMEOUT_S,
        message=lambda: f"ledgers still open: {open_ledgers[:5]}",
        interval_s=1.0,
    )


def _verify(
    cluster: NetnsCluster,
    history: History,
    nemesis: Nemesis,
    seed: int,
    started: float,
    faults: list[str],
) -> SuiteResult:
    keys = sorted({op.key for op in history.snapshot() if op.kind == PUT})
    final_clients = [cluster.s3(gateway) for gateway in cluster.gateways]
    try:
        final_reads(final_clients, BUCKET, keys, history, FINAL_READ_TIMEOUT_S)
    finally:
        path = cluster.root / "history.jsonl"
        ops = history.snapshot()  # the history checked is the one saved
        save_history(ops, path)
        print(f"history: {path}")
    check_started = time.monotonic()
    findings = check(ops)
    fsck_started = time.monotonic()
    fsck = cluster.fsck()
    (cluster.root / "fsck.json").write_text(json.dumps(fsck, indent=1))
    repair_started = time.monotonic()
    after_repair = _repaired(cluster)
    (cluster.root / "fsck-after-repair.json").write_text(json.dumps(after_repair, indent=1))
    return SuiteResult(
        after_repair=after_repair,
        repair_s=time.monotonic() - repair_started,
        seed=seed,
        records=nemesis.records,
        history_counts=history.counts(),
        findings=findings,
        fsck=fsck,
        keys=len(keys),
        seconds=time.monotonic() - started,
        check_s=fsck_started - check_started,
        fsck_s=repair_started - fsck_started,
        faults_planned=faults,
        bookie_names={f"{b.address}:{BOOKIE_PORT}": b.name for b in cluster.bookies},
    )
