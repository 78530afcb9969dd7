"""Killing a maintenance run's driver at a named point, and what each kill must leave.

A kill is a hook (`blobstore/maintenance/hooks.py`): `point=kill:N` makes the process
that reaches `point` for the N-th time SIGKILL the driver. The executor points count in
each Python worker, so the N of each point stays within what one worker surely reaches
in a run that follows one `churn`:

- churn writes a 1 MiB seal object first: the gateway's writer ledger is retired once it
  passes 1 MiB, so the next 96 KiB objects start a fresh ledger, 11 to a ledger;
- ledger A (11 objects) and ledger C (11) are deleted whole: the run condemns both and,
  with `--grace 0`, deletes both on its second look (gc_deleted >= 2);
- ledger B (11) loses 4 of them: live ratio 7/11, compacted, 7 holders swapped in one
  task (compact_swapped >= 7 in that worker), then released (gc_deleted >= 3);
- four `tmp/` objects (expired by the bucket's lifecycle rule) and one open multipart
  upload (aborted by it): lifecycle actions in at most two scan partitions.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from blobstore.maintenance.hooks import HOOKS_ENV
from blobstore.maintenance.report import LOCK_PATH, RUNS_PATH
from tests.maintenance.conftest import ROOT, MaintenanceCluster
from tests.maintenance.workload import OBJECT_BYTES, Expected
from tests.waiting import wait_until

# Point -> the phase of the run it stands in (job.py's docstring numbers them).
POINT_PHASES = {
    "started": "lock",
    "scanned": "scan",
    "scan_task": "scan",
    "gc_deleted": "gc",
    "gc_done": "gc",
    "condemned": "gc",
    "lifecycle_action": "lifecycle",
    "compact_copied": "compaction",
    "compact_swapped": "compaction",
    "released": "release",
    "second_look": "release",
    "bookie_gc": "bookie gc",
}
# The largest N one process surely reaches at each point after one churn (see above).
NTH_MAX = {
    "started": 1,
    "scanned": 1,
    "scan_task": 1,
    "gc_deleted": 3,  # ledgers A and C, and B once compaction released it
    "gc_done": 2,  # the first look and the second
    "condemned": 2,  # the first look (A, C), then the released ledgers (B)
    "lifecycle_action": 2,  # five actions, in at most two range and upload partitions
    "compact_copied": 1,
    "compact_swapped": 7,  # ledger B's holders, all in one task
    "released": 1,
    "second_look": 1,
    "bookie_gc": 1,
}
assert set(NTH_MAX) == set(POINT_PHASES), sorted(set(NTH_MAX) ^ set(POINT_PHASES))

BUCKET = "kill"
LEDGER_OBJECTS = 11  # 96 KiB objects: the 11th takes a 1 MiB ledger past its limit
SEAL_BYTES = 1024 * 1024
EXPIRING_PREFIX = "tmp/"
EXPIRING_PER_CHURN = 4
LIFECYCLE_RULES = [
    {
        "ID": "expire-tmp",
        "Status": "Enabled",
        "Filter": {"Prefix": EXPIRING_PREFIX},
        "Expiration": {"Days": 1},
    },
    {
        "ID": "abort-uploads",
        "Status": "Enabled",
        "Filter": {"Prefix": ""},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
    },
]
LOCK_HELD = "another maintenance run is in progress"
KILLED_RUN_TIMEOUT_S = 180.0
GROUP_GONE_TIMEOUT_S = 30.0
# The driver's ZooKeeper session (at most 15 s) holds the lock after a kill; a margin.
LOCK_FREED_TIMEOUT_S = 60.0
RERUN_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class KillPoint:
    point: str
    nth: int

    def __post_init__(self) -> None:
        assert self.point in POINT_PHASES, self.point
        assert 1 <= self.nth <= NTH_MAX[self.point], (self.point, self.nth)

    @property
    def hook(self) -> str:
        return f"{self.point}=kill:{self.nth}"


def choose_kill_points(rng: random.Random, count: int) -> list[KillPoint]:
    """`count` kill points: one in every phase first, then points not chosen yet, then
    any (point, N) not chosen yet, then repeats; in a random order."""
    phases = sorted(set(POINT_PHASES.values()))
    assert count >= len(phases), (count, phases)
    chosen = [
        _kill_in(rng, [p for p, ph in POINT_PHASES.items() if ph == phase]) for phase in phases
    ]
    unused = [p for p in sorted(POINT_PHASES) if all(k.point != p for k in chosen)]
    rng.shuffle(unused)
    chosen += [_kill_in(rng, [p]) for p in unused[: count - len(chosen)]]
    pairs = [KillPoint(p, n) for p in sorted(NTH_MAX) for n in range(1, NTH_MAX[p] + 1)]
    fresh = [k for k in pairs if k not in chosen]
    rng.shuffle(fresh)
    chosen += fresh[: count - len(chosen)]
    chosen += [rng.choice(pairs) for _ in range(count - len(chosen))]
    rng.shuffle(chosen)
    return chosen


def _kill_in(rng: random.Random, points: list[str]) -> KillPoint:
    point = rng.choice(points)
    return KillPoint(point, rng.randint(1, NTH_MAX[point]))


# ------------------------------------------------------------------ the workload


@dataclass
class Acknowledged:
    """Every object S3 acknowledged: what must read back, and what lifecycle may take."""

    expected: Expected
    expiring: dict[str, bytes] = field(default_factory=dict)  # key -> bytes, under tmp/

    def put(self, s3: Any, key: str, body: bytes) -> None:
        self.expected.put(s3, BUCKET, key, body)

    def delete(self, s3: Any, key: str) -> None:
        s3.delete_object(Bucket=BUCKET, Key=key)
        del self.expected.objects[BUCKET][key]


def set_lifecycle(s3: Any) -> None:
    s3.put_bucket_lifecycle_configuration(
        Bucket=BUCKET, LifecycleConfiguration={"Rules": LIFECYCLE_RULES}
    )


def churn(s3: Any, acked: Acknowledged, rng: random.Random, round_index: int) -> None:
    """New garbage for one run (the module docstring says how much of each kind)."""
    keys = sorted(acked.expected.objects[BUCKET])
    for key in rng.sample(keys, 3):
        acked.put(s3, key, rng.randbytes(OBJECT_BYTES))  # overwritten
    for key in rng.sample(keys, 2):
        acked.delete(s3, key)
    seal = f"seal/{round_index:03d}"
    acked.put(s3, seal, rng.randbytes(SEAL_BYTES))
    names = [f"churn/{round_index:03d}/{i:02d}" for i in range(3 * LEDGER_OBJECTS)]
    for key in names:
        acked.put(s3, key, rng.randbytes(OBJECT_BYTES))
    ledger_a, ledger_b, ledger_c = (
        names[i : i + LEDGER_OBJECTS] for i in range(0, len(names), LEDGER_OBJECTS)
    )
    for key in [seal, *ledger_a, *ledger_b[::3], *ledger_c]:
        acked.delete(s3, key)
    for i in range(EXPIRING_PER_CHURN):
        key = f"{EXPIRING_PREFIX}{round_index:03d}/{i}"
        body = rng.randbytes(OBJECT_BYTES)
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        acked.expiring[key] = body
    key = f"uploads/{round_index:03d}"
    upload_id = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    s3.upload_part(
        Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=1, Body=rng.randbytes(OBJECT_BYTES)
    )


def read_back_problems(s3: Any, acked: Acknowledged) -> list[str]:
    """Every acknowledged object that does not read back byte-identical; an expiring one
    may be gone (lifecycle deleted it), but never different."""
    problems = []
    for key, body in sorted(acked.expected.objects[BUCKET].items()):
        found = _read(s3, key)
        if found != body:
            problems.append(f"{key}: {_describe(found, body)}")
    for key, body in sorted(acked.expiring.items()):
        found = _read(s3, key)
        if found is not None and found != body:
            problems.append(f"{key} (expiring): {_describe(found, body)}")
    return problems


def expired_leftovers(s3: Any, acked: Acknowledged) -> list[str]:
    """What a finished run should have removed by lifecycle but left: expiring objects
    and open uploads."""
    left = [key for key in sorted(acked.expiring) if _read(s3, key) is not None]
    listed = s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    left += [f"upload {u['Key']} {u['UploadId']}" for u in listed]
    return left


def _read(s3: Any, key: str) -> bytes | None:
    try:
        body: bytes = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except ClientError as e:
        if e.response["Error"]["Code"] == "NoSuchKey":
            return None
        raise
    return body


def _describe(found: bytes | None, body: bytes) -> str:
    if found is None:
        return "gone"
    return f"{len(found)} bytes read, {len(body)} written, first difference at " + str(
        next((i for i, (a, b) in enumerate(zip(found, body, strict=False)) if a != b), "end")
    )


# ------------------------------------------------------------------ runs


def run_killed(cluster: MaintenanceCluster, hook: str, args: tuple[str, ...], log: Path) -> int:
    """Start a run with the kill `hook` (`point=kill:N`), wait for its driver to die, kill
    the rest of its process group (the JVM and Python workers), and return the driver's
    exit status."""
    process = start_run(cluster, args, {HOOKS_ENV: hook}, log)
    try:
        wait_until(
            lambda: process.poll() is not None,
            KILLED_RUN_TIMEOUT_S,
            message=lambda: f"run with {hook} still alive:\n{_tail(log)}",
        )
    finally:
        kill_group(process)
    return process.wait()


def start_run(
    cluster: MaintenanceCluster, args: tuple[str, ...], env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """`cluster.start_maintain`, but closing its log file once the child holds it (the
    fixture's stays open, and filterwarnings=error fails the test on its ResourceWarning)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*cluster.maintain_command(*args), "--json"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the run's group, and wait until none is left."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    wait_until(
        lambda: not group_members(process.pid),
        GROUP_GONE_TIMEOUT_S,
        message=lambda: f"process group {process.pid} still has {group_members(process.pid)}",
    )


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        state, _parent, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def rerun(cluster: MaintenanceCluster, args: tuple[str, ...]) -> dict[str, Any]:
    """A run without hooks, to its end: retried while the killed run's lock stands."""
    started = time.monotonic()
    refusals = []

    def attempt() -> dict[str, Any] | None:
        done = cluster.maintain(*args, check=False)
        if done.returncode == 2 and LOCK_HELD in done.stderr:
            refusals.append(time.monotonic() - started)
            return None
        assert done.returncode == 0, f"rerun failed:\n{done.stdout}\n{done.stderr[-4000:]}"
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    report = wait_until(
        attempt,
        LOCK_FREED_TIMEOUT_S,
        message="the killed run's maintenance lock was never freed",
        interval_s=RERUN_INTERVAL_S,
    )
    waited = f"{refusals[-1]:.1f} s" if refusals else "no wait"
    print(
        f"rerun: {len(refusals)} refusals ({waited}), done after {time.monotonic() - started:.1f} s"
    )
    return report


# ------------------------------------------------------------------ reports


def lock_holder_run(zk: KazooClient) -> str | None:
    """The run id in the maintenance lock (a killed driver's, until its session ends)."""
    try:
        data, _stat = zk.get(LOCK_PATH)
    except NoNodeError:
        return None
    run_id: str = json.loads(data)["run_id"]
    return run_id


def run_outcomes(zk: KazooClient) -> dict[str, str]:
    """run id -> outcome, of every report kept."""
    try:
        runs = zk.get_children(RUNS_PATH)
    except NoNodeError:
        return {}
    outcomes = {}
    for run_id in runs:
        try:
            data, _stat = zk.get(f"{RUNS_PATH}/{run_id}")
        except NoNodeError:
            continue
        outcomes[run_id] = json.loads(data)["outcome"]
    return outcomes


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""
