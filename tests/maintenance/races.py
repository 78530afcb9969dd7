"""Pausing a maintenance run at its named points, a workload whose ledgers a run
compacts, and what a race test reads of the catalog and the ledgers.

A pause is a hook (blobstore/maintenance/hooks.py): `point=pause:PATH` makes each
process that reaches `point` create `PATH.reached` and wait until `PATH` exists. At an
executor point every Spark task that reaches it waits: while a run stands at
`compact_copied`, each compaction task has copied a ledger, or is copying one, and none
has swapped a record yet; at `scan_task`, no scan task has read anything yet, but the
driver has listed each bucket's uploads (uploads created then are not scanned).

`sparse_ledgers`, in a fresh cluster (its gateway closes writer ledgers at 1 MiB):

- a 1 MiB seal object fills the gateway's first ledger, so the 96 KiB objects after it
  start a fresh ledger, 11 to a ledger (the 11th takes it past 1 MiB);
- LEDGERS ledgers of 11 objects, obj/000 to obj/043; in each, the objects at positions
  KEPT stay and the 7 others are overwritten (their new bytes go to new, full ledgers)
  or deleted: live ratio 4/11 and 672 KiB of garbage, so a run compacts every one of
  them and swaps 4 records of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from blobstore.catalog.config import CatalogConfig, CatalogPaths
from blobstore.ledger.ledger_metadata import LedgerMetadata
from blobstore.maintenance.hooks import HOOKS_ENV
from blobstore.wire import zk_layout
from tests.catalog.helpers import open_catalog
from tests.maintenance.conftest import MAINTAIN_TIMEOUT_S, ROOT, MaintenanceCluster
from tests.maintenance.workload import OBJECT_BYTES, Expected
from tests.waiting import wait_until

LEDGER_OBJECTS = 11
LEDGERS = 4
KEPT = (0, 3, 6, 9)  # positions in a ledger whose objects stay
SEAL_KEY = "seal"
SEAL_BYTES = 1024 * 1024
# A pause is reached after Spark starts and the scan (or the copies) before it are done.
PAUSE_WAIT_S = 120.0
KILLED_WAIT_S = 30.0
LOG_TAIL_LINES = 40
PATHS = CatalogPaths(CatalogConfig().root)


def object_key(index: int) -> str:
    return f"obj/{index:03d}"


def kept_key(ledger_index: int, position: int) -> str:
    """The key of a kept object: position `position` (one of KEPT) of the workload's
    `ledger_index`-th ledger."""
    assert position in KEPT, position
    return object_key(ledger_index * LEDGER_OBJECTS + position)


def sparse_ledgers(s3: Any, bucket: str, rng: random.Random) -> Expected:
    """The workload of the module docstring, in a new bucket."""
    expected = Expected()
    s3.create_bucket(Bucket=bucket)
    expected.put(s3, bucket, SEAL_KEY, rng.randbytes(SEAL_BYTES))
    count = LEDGERS * LEDGER_OBJECTS
    for i in range(count):
        expected.put(s3, bucket, object_key(i), rng.randbytes(OBJECT_BYTES))
    for i in range(count):
        if i % LEDGER_OBJECTS in KEPT:
            continue
        if i % 2:
            s3.delete_object(Bucket=bucket, Key=object_key(i))
            del expected.objects[bucket][object_key(i)]
        else:
            expected.put(s3, bucket, object_key(i), rng.randbytes(OBJECT_BYTES))
    return expected


def absent(s3: Any, bucket: str, key: str) -> bool:
    """The key has no object (S3 answers 404)."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey"):
            return True
        raise
    return False


def error_code(error: ClientError) -> str:
    code: str = error.response["Error"]["Code"]
    return code


# ------------------------------------------------------------------ a paused run


@dataclass
class PausedRun:
    """`blobstore maintain ARGS --json` started with a pause at each of `points`; its
    report goes to `directory`/stdout, its log to `directory`/stderr."""

    process: subprocess.Popen[bytes]
    directory: Path
    points: tuple[str, ...]

    def wait_at(self, point: str) -> None:
        """Until some process of the run stands at `point` (fails if the run ended)."""
        assert point in self.points, (point, self.points)
        reached = self.directory / f"{point}.reached"
        wait_until(
            lambda: reached.exists() or self.process.poll() is not None,
            PAUSE_WAIT_S,
            message=lambda: f"the run never reached {point}:\n{self.log_tail()}",
        )
        assert reached.exists(), f"the run ended before {point}:\n{self.log_tail()}"

    def resume(self, point: str) -> None:
        assert point in self.points, (point, self.points)
        (self.directory / point).touch()

    def finish(self) -> dict[str, Any]:
        """Resume every pause, wait for the run's end, and return its report."""
        for point in self.points:
            self.resume(point)
        wait_until(
            lambda: self.process.poll() is not None,
            MAINTAIN_TIMEOUT_S,
            message=lambda: f"the run never ended:\n{self.log_tail()}",
        )
        assert self.process.returncode == 0, f"the run failed:\n{self.log_tail()}"
        report: dict[str, Any] = json.loads((self.directory / "stdout").read_text())
        return report

    def kill(self) -> None:
        """SIGKILL the run's process group (the driver, its JVM and Python workers)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(KILLED_WAIT_S)

    def log_tail(self) -> str:
        try:
            text = (self.directory / "stderr").read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


@contextlib.contextmanager
def paused_run(
    cluster: MaintenanceCluster, directory: Path, points: tuple[str, ...], *args: str
) -> Iterator[PausedRun]:
    """Start a run that pauses at each of `points`; on the way out it is killed, unless
    it ended (`PausedRun.finish`)."""
    directory.mkdir(parents=True)
    hooks = ",".join(f"{point}=pause:{directory / point}" for point in points)
    with open(directory / "stdout", "wb") as out, open(directory / "stderr", "wb") as err:
        process = subprocess.Popen(
            [*cluster.maintain_command(*args), "--json"],
            cwd=ROOT,
            env={**os.environ, HOOKS_ENV: hooks},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    run = PausedRun(process, directory, points)
    try:
        yield run
    finally:
        run.kill()


def assert_compacted(report: dict[str, Any]) -> None:
    """The run ended well and compacted something."""
    assert report["outcome"] == "ok", report
    assert report["errors"] == [], report
    assert report["compacted_ledgers"] > 0, report
    assert report["records_swapped"] > 0, report


# ------------------------------------------------------------------ catalog and ledgers


def record_ledgers(zk: str, bucket: str, key: str) -> set[int]:
    """The ledgers the key's current object names."""

    async def read() -> set[int]:
        async with open_catalog(zk) as catalog:
            record = await catalog.get_object(bucket, key)
        return {extent.ledger_id for extent in record.extents}

    return asyncio.run(read())


def part_ledgers(zk: str, bucket: str, upload_id: str) -> set[int]:
    """The ledgers the upload's parts name."""

    async def read() -> set[int]:
        async with open_catalog(zk) as catalog:
            parts = await catalog.get_parts(bucket, upload_id)
        return {extent.ledger_id for part in parts for extent in part.extents}

    return asyncio.run(read())


def condemned_ledgers(zk: KazooClient) -> set[int]:
    """The ledgers of the condemned set (tombstones of deleted ones included)."""
    try:
        return {int(child) for child in zk.get_children(PATHS.condemned)}
    except NoNodeError:
        return set()


def ledger_state(zk: KazooClient, ledger_id: int) -> str | None:
    """The ledger's state as its metadata says (None: deleted)."""
    try:
        data, _stat = zk.get(zk_layout.ledger_path(ledger_id))
    except NoNodeError:
        return None
    state: str = LedgerMetadata.decode(data).state
    return state
