"""The Spark session of a maintenance run, and the DataFrames of its scan.

`local[*]` by default: the driver starts Spark in this process's JVM, with executors
running this very Python. With another master the `blobstore` package is shipped to the
executors as a zip (their Python needs the project's dependencies: the container image
has them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from blobstore.maintenance import hooks, scan
from blobstore.maintenance.options import MaintainOptions
from blobstore.runtime.errors import UsageError

logger = logging.getLogger(__name__)

PROGRESS_POLL_S = 0.5
SPARK_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"  # set when spark-submit started this driver


@asynccontextmanager
async def spark_session(options: MaintainOptions) -> AsyncIterator[Any]:
    """A SparkSession for the run (stopped on the way out); a master Spark cannot reach
    is one clear UsageError. Started and stopped off the event loop: Spark takes seconds
    to start, and the driver's ZooKeeper session must keep beating meanwhile."""
    session, shipped = await asyncio.to_thread(_start, options)
    try:
        yield session
    finally:
        await asyncio.to_thread(session.stop)
        if shipped is not None:
            shutil.rmtree(shipped, ignore_errors=True)


def _start(options: MaintainOptions) -> tuple[Any, str | None]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ[hooks.DRIVER_PID_ENV] = str(os.getpid())
    builder = (
        SparkSession.builder.appName("blobstore-maintain")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.python.worker.reuse", "true")
    )
    if options.master or SPARK_SUBMIT_ENV not in os.environ:
        builder = builder.master(options.master or "local[*]")
    for name in (hooks.HOOKS_ENV, hooks.DRIVER_PID_ENV):
        if name in os.environ:
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    try:
        session = builder.getOrCreate()
    except Exception as e:  # Py4J and JVM failures: the master is wrong or unreachable
        raise UsageError(f"cannot start Spark with --master {options.master}: {e}") from e
    session.sparkContext.setLogLevel("ERROR")
    master = str(session.sparkContext.master)
    return session, None if master.startswith("local") else _ship_package(session)


def _ship_package(session: Any) -> str:
    """Zip the `blobstore` package for executors on other machines."""
    directory = tempfile.mkdtemp(prefix="blobstore-maintain-")
    root = Path(__file__).resolve().parents[2]
    archive = shutil.make_archive(f"{directory}/blobstore", "zip", root, "blobstore")
    session.sparkContext.addPyFile(archive)
    return directory


class StageProgress:
    """Reports (done, total) tasks of the running Spark jobs to a callback, from a
    thread polling the status tracker."""

    def __init__(self, session: Any, report: Callable[[int, int], None]) -> None:
        self.tracker = session.sparkContext.statusTracker()
        self.report = report
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> StageProgress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)

    def _poll(self) -> None:
        while not self.stop_event.wait(PROGRESS_POLL_S):
            done = total = 0
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                self.report(done, total)


# ------------------------------------------------------------------ DataFrames

EXTENT_SCHEMA = (
    "ledger_id long, first_entry long, last_entry long, length long, entry_size long, "
    "role string, bucket string, key string, version_id string, upload_id string, "
    "part_number int"
)
ACTION_SCHEMA = (
    "action string, bucket string, key string, version_id string, mtime double, "
    "rule_id string, reason string"
)
LEDGER_SCHEMA = (
    "ledger_id long, state string, purpose string, length long, write_quorum int, "
    "ctime double, mtime double, writer string"
)


def scan_rows(session: Any, run: scan.Session, tasks: list[scan.Task]) -> Any:
    """The scan's rows as a cached RDD: one Spark partition per task."""
    context = session.sparkContext
    rdd = context.parallelize(tasks, max(1, len(tasks)))
    return rdd.mapPartitions(lambda part: scan.run_partition(run, part)).cache()


def frames(session: Any, rows: Any) -> tuple[Any, Any, Any, int]:
    """The extents, actions and ledgers DataFrames of the scan's rows, and the count of
    records scanned."""
    extents = session.createDataFrame(
        rows.filter(lambda r: r[0] == scan.TAG_EXTENT).map(lambda r: r[1:]), EXTENT_SCHEMA
    )
    actions = session.createDataFrame(
        rows.filter(lambda r: r[0] == scan.TAG_ACTION).map(lambda r: r[1:]), ACTION_SCHEMA
    )
    ledgers = session.createDataFrame(
        rows.filter(lambda r: r[0] == scan.TAG_LEDGER).map(lambda r: r[1:]), LEDGER_SCHEMA
    )
    scanned = rows.filter(lambda r: r[0] == scan.TAG_COUNT).map(lambda r: r[1]).sum()
    return extents, actions, ledgers, int(scanned)


def ledger_stats(extents: Any, ledgers: Any) -> tuple[list[Any], list[int], int]:
    """Per ledger of the metadata: live bytes, referenced, pinned (the join); plus the
    ledgers referenced but without metadata, and the count of unresolved manifests."""
    from pyspark.sql import functions as f

    pinning = f.col("role").isin(*scan.PINNING_ROLES)
    per_ledger = extents.groupBy("ledger_id").agg(
        f.sum(f.when(f.col("role") == scan.ROLE_OBJECT, f.col("length")).otherwise(0)).alias(
            "live_bytes"
        ),
        f.max(f.when(pinning, 1).otherwise(0)).alias("pinned"),
    )
    joined = ledgers.join(per_ledger, "ledger_id", "left").collect()
    missing = (
        per_ledger.join(ledgers, "ledger_id", "left_anti")
        .filter(f.col("ledger_id") >= 0)
        .select("ledger_id")
        .collect()
    )
    unresolved = extents.filter(f.col("role") == scan.ROLE_UNRESOLVED).count()
    return joined, sorted(int(r.ledger_id) for r in missing), int(unresolved)


def fully_released(extents: Any, released: Any) -> dict[int, tuple[int, int]]:
    """Per ledger that lost a holder this run: (holders, holders released). `released`
    rows: (ledger_id or -1 for every ledger of the holder, bucket, key, version_id,
    upload_id)."""
    from pyspark.sql import functions as f

    holders = (
        extents.filter(f.col("ledger_id") >= 0)
        .select("ledger_id", "bucket", "key", "version_id", "upload_id")
        .distinct()
    )
    r = released.alias("r")
    h = holders.alias("h")
    on = (
        (f.col("h.bucket") == f.col("r.bucket"))
        & (f.col("h.key") == f.col("r.key"))
        & (f.col("h.version_id") == f.col("r.version_id"))
        & (f.col("h.upload_id") == f.col("r.upload_id"))
        & ((f.col("r.ledger_id") == -1) | (f.col("r.ledger_id") == f.col("h.ledger_id")))
    )
    joined = h.join(r, on, "left").select(
        f.col("h.ledger_id").alias("ledger_id"), f.col("r.key").isNotNull().alias("released")
    )
    touched = joined.groupBy("ledger_id").agg(
        f.count("*").alias("holders"), f.sum(f.col("released").cast("int")).alias("released")
    )
    rows = touched.filter(f.col("released") > 0).collect()
    return {int(r.ledger_id): (int(r.holders), int(r.released)) for r in rows}
