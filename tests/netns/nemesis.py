"""Faults, planned from a seed (`plan`, pure) and carried out on a NetnsCluster (`Nemesis`).

One fault at a time: a cycle starts it, holds it while the workload runs, heals it, then
waits until the cluster serves again (every ZooKeeper member in the quorum, every bookie
and gateway up, a PUT and a GET through each gateway): that wait is the cycle's recovery
time.

Kinds:
- `kill`: kill -9 of any process (a ZooKeeper member, a bookie, a gateway), restarted at
  the heal;
- `pause`: SIGSTOP of any process for a moment, then SIGCONT;
- `zk-leader`: kill -9 of whichever member leads the ensemble now;
- `session-expiry`: SIGSTOP of a bookie or a gateway for longer than its ZooKeeper
  session timeout, so the session expires while it sleeps;
- `link-down`: one host's link down, then up;
- `split`: a minority of the hosts on a bridge of their own, then joined again;
- `slow-link`: one host's link throttled to a trickle with a short queue (tbf: delays,
  and drops what overflows), then restored;
- `corrupt`: bytes flipped in the entry logs of the one bookie the seed picked for it
  (one bookie only, so every entry keeps good copies), then that bookie is restarted
  by kill -9 so no cache of it hides the damage;
- `disk-full`: a bookie's disk filled to the last byte (a ballast file written until
  ENOSPC): its journal and entry log writes fail and it turns read-only; the heal
  deletes the ballast (and starts the bookie again should it have stopped). A bookie
  whose index write failed stops on its storage errors, and may still be stopping when
  the heal looks: the heal waits for it to exit, and a target that exits while the
  cycle waits for the cluster to serve is started again.

No clock jump: a network namespace has no clock of its own, and CLOCK_REALTIME is the
whole machine's (time namespaces offset only the monotonic and boot clocks), so a jump
could not be confined to one host.
"""

from __future__ import annotations

import errno
import functools
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.netns.cluster import SESSION_TIMEOUT_S, NetnsCluster, NodeExitedError
from tests.netns.network import Network
from tests.waiting import wait_until

KILL = "kill"
PAUSE = "pause"
ZK_LEADER = "zk-leader"
SESSION_EXPIRY = "session-expiry"
LINK_DOWN = "link-down"
SPLIT = "split"
SLOW_LINK = "slow-link"
CORRUPT = "corrupt"
DISK_FULL = "disk-full"
KINDS = (KILL, PAUSE, ZK_LEADER, SESSION_EXPIRY, LINK_DOWN, SPLIT, SLOW_LINK, CORRUPT, DISK_FULL)

ENTRY_LOG_HEADER_BYTES = 16
FLIPS_PER_FAULT = 8
BALLAST = "ballast"
BALLAST_CHUNK_BYTES = 1 << 20
RECOVERY_TIMEOUT_S = 120.0
LOST_STATE = "LOST"  # as a process logs a ZooKeeper session found expired
# As a bookie logs that it stops on storage errors (an index write failed), and how long
# it takes at most to exit after that.
STOPPING_EVENT = "bookie_stopping_on_storage_errors"
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Topology:
    zookeepers: tuple[str, ...]
    bookies: tuple[str, ...]
    gateways: tuple[str, ...]

    @property
    def hosts(self) -> tuple[str, ...]:
        return (*self.zookeepers, *self.bookies, *self.gateways)


@dataclass(frozen=True)
class Fault:
    kind: str
    targets: tuple[str, ...]  # host names; empty for `zk-leader` (found when it starts)
    hold_s: float


def plan(rng: random.Random, cycles: int, topology: Topology, corruptible: str) -> list[Fault]:
    """`cycles` faults: the kinds in shuffled rounds (each round holds every kind once),
    targets and durations drawn from `rng`."""
    kinds: list[str] = []
    while len(kinds) < cycles:
        kinds.extend(rng.sample(KINDS, len(KINDS)))
    return [_fault(rng, kind, topology, corruptible) for kind in kinds[:cycles]]


def _fault(rng: random.Random, kind: str, topology: Topology, corruptible: str) -> Fault:
    if kind in (KILL, PAUSE):
        return Fault(kind, (rng.choice(topology.hosts),), rng.uniform(1.0, 3.0))
    if kind == ZK_LEADER:
        return Fault(kind, (), rng.uniform(1.0, 3.0))
    if kind == SESSION_EXPIRY:
        target = rng.choice((*topology.bookies, *topology.gateways))
        return Fault(kind, (target,), SESSION_TIMEOUT_S * rng.uniform(1.5, 2.5))
    if kind in (LINK_DOWN, SLOW_LINK):
        return Fault(kind, (rng.choice(topology.hosts),), rng.uniform(2.0, 5.0))
    if kind == DISK_FULL:
        return Fault(kind, (rng.choice(topology.bookies),), rng.uniform(2.0, 5.0))
    if kind == SPLIT:
        minority = rng.randrange(1, len(topology.hosts) // 2 + 1)
        return Fault(
            kind, tuple(sorted(rng.sample(topology.hosts, minority))), rng.uniform(2.0, 5.0)
        )
    assert kind == CORRUPT, kind
    return Fault(kind, (corruptible,), 0.0)


def flip_bytes(paths: list[Path], rng: random.Random, count: int) -> list[tuple[str, int]]:
    """Flip one bit in each of `count` bytes at random places past the logs' headers;
    where (file name, offset)."""
    sized = [(path, path.stat().st_size) for path in paths]
    sized = [(path, size) for path, size in sized if size > ENTRY_LOG_HEADER_BYTES]
    flipped: list[tuple[str, int]] = []
    for _ in range(count if sized else 0):
        path, size = rng.choice(sized)
        offset = rng.randrange(ENTRY_LOG_HEADER_BYTES, size)
        fd = os.open(path, os.O_RDWR)
        try:
            byte = os.pread(fd, 1, offset)
            if byte:
                os.pwrite(fd, bytes([byte[0] ^ 1 << rng.randrange(8)]), offset)
                flipped.append((path.name, offset))
        finally:
            os.close(fd)
    return flipped


def fill_disk(disk: Path) -> int:
    """Write a ballast file on `disk` until it is full (ENOSPC); its size."""
    chunk = bytes(BALLAST_CHUNK_BYTES)
    written = 0
    with open(disk / BALLAST, "wb", buffering=0) as ballast:
        while True:
            try:
                written += ballast.write(chunk) or 0
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
            if written > 1 << 40:  # a disk that never fills: not a tmpfs of a set size
                raise AssertionError(f"{disk} took a TiB without filling")
    return written


def free_disk(disk: Path) -> None:
    (disk / BALLAST).unlink(missing_ok=True)


@dataclass
class CycleRecord:
    cycle: int
    fault: Fault
    targets: tuple[str, ...]
    recovery_s: float
    detail: str = ""


@dataclass
class Nemesis:
    cluster: NetnsCluster
    network: Network
    rng: random.Random
    records: list[CycleRecord] = field(default_factory=list)

    def run_cycle(self, cycle: int, fault: Fault) -> CycleRecord:
        expirations = self._logged(fault.targets, f"session state={LOST_STATE}")
        stops = self._logged(fault.targets, STOPPING_EVENT)
        targets, detail = self.start(fault)
        # The fault's duration, while the workload runs (not a wait for a condition).
        time.sleep(fault.hold_s)
        self.heal(fault, targets, stops)
        started = time.monotonic()
        self.wait_serving(targets if fault.kind == DISK_FULL else ())
        if fault.kind == SESSION_EXPIRY:
            expired = self._logged(targets, f"session state={LOST_STATE}") > expirations
            detail = f"session {'expired' if expired else 'survived'}"
        record = CycleRecord(cycle, fault, targets, time.monotonic() - started, detail)
        self.records.append(record)
        return record

    def _logged(self, targets: tuple[str, ...], text: str) -> int:
        """How many times the targets' logs hold `text`."""
        logs = [self.cluster.node(name).managed.log_path for name in targets]
        return sum(path.read_text(errors="replace").count(text) for path in logs if path.exists())

    def start(self, fault: Fault) -> tuple[tuple[str, ...], str]:
        """Start the fault; the hosts it hit and what it did."""
        kind, targets = fault.kind, fault.targets
        if kind == ZK_LEADER:
            leader = self.cluster.zk_leader()
            assert leader is not None, "no ZooKeeper leader before the fault"
            targets = (leader.name,)
        nodes = [self.cluster.node(name) for name in targets]
        if kind in (KILL, ZK_LEADER):
            nodes[0].kill()
        elif kind in (PAUSE, SESSION_EXPIRY):
            nodes[0].suspend()
        elif kind == LINK_DOWN:
            self.network.link_down(targets[0])
        elif kind == SPLIT:
            self.network.split(list(targets))
        elif kind == SLOW_LINK:
            self.network.slow(targets[0], rate_kbit=256, latency_ms=50)
        elif kind == CORRUPT:
            flipped = flip_bytes(self.cluster.entry_logs(nodes[0]), self.rng, FLIPS_PER_FAULT)
            nodes[0].kill()
            return targets, f"flipped {flipped}"
        elif kind == DISK_FULL:
            ballast = fill_disk(self.cluster.disk(targets[0]))
            return targets, f"ballast {ballast >> 20} MiB"
        return targets, ""

    def heal(self, fault: Fault, targets: tuple[str, ...], stops: int = 0) -> None:
        """End the fault; `stops`: the targets' logged stops on storage errors before it."""
        self.network.heal()
        if fault.kind == DISK_FULL:
            free_disk(self.cluster.disk(targets[0]))
            if self._logged(targets, STOPPING_EVENT) > stops:
                node = self.cluster.node(targets[0])
                wait_until(
                    lambda: not node.alive(),
                    STOP_TIMEOUT_S,
                    message=lambda: f"{node.name} stopped:\n{node.managed.log_tail()}",
                )
        for name in targets:
            node = self.cluster.node(name)
            node.resume()
            if not node.alive():
                node.start()

    def heal_all(self) -> None:
        """Whatever state the run stopped in: every link up, every disk with room, every
        process running."""
        self.network.heal()
        for bookie in self.cluster.bookies:
            free_disk(self.cluster.disk(bookie.name))
        for node in self.cluster.nodes():
            node.resume()
            if not node.alive():
                node.start()

    def wait_serving(self, restartable: tuple[str, ...] = ()) -> None:
        """Every node ready and every gateway serving; a node of `restartable` that
        exits meanwhile (a bookie stopping on its full disk's errors) is started again."""
        for node in self.cluster.nodes():
            try:
                node.wait_ready(RECOVERY_TIMEOUT_S)
            except NodeExitedError:
                if node.name not in restartable:
                    raise
                node.start()
        for gateway in self.cluster.gateways:
            s3, key = self.cluster.s3(gateway), f"probe-{gateway.name}"
            wait_until(
                functools.partial(_round_trip, s3, key),
                RECOVERY_TIMEOUT_S,
                message=lambda: f"every gateway serving:\n{self.cluster.log_tails()}",
                interval_s=0.2,
            )

    def counts(self) -> Counter[str]:
        return Counter(record.fault.kind for record in self.records)


PROBE_BUCKET = "probe"


def _round_trip(s3: Any, key: str) -> bool:
    """A PUT and a GET of it through one gateway (each gateway its own key)."""
    body = os.urandom(64)
    try:
        s3.put_object(Bucket=PROBE_BUCKET, Key=key, Body=body)
        got = s3.get_object(Bucket=PROBE_BUCKET, Key=key)["Body"].read()
    except Exception:  # noqa: BLE001 - not serving yet
        return False
    # Other bytes: an earlier attempt's PUT, unanswered, took effect late. Try again.
    return bool(got == body)
