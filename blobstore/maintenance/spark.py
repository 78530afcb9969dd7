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
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from blobstore.maintenance import hooks, lifecycle, scan, scratch
from blobstore.maintenance.options import MaintainOptions
from blobstore.runtime.errors import UsageError
from blobstore.runtime.ledger_tls import LEDGER_TLS_DIR_ENV, ZK_TLS_DIR_ENV
from blobstore.runtime.zk_auth import DIGEST_FILE_ENV

logger = logging.getLogger(__name__)

PROGRESS_POLL_S = 0.5
EXECUTOR_WAIT_S = 120.0  # for a cluster master's first executor (Spark gives up at ~60 s)
EXECUTOR_POLL_S = 0.5
# The driver JVM logs errors only: Spark's warnings (each with its stack trace, some
# repeated for every retry) drown the run's own lines; its errors stay.
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
# The driver's JVM compiles with C1 only. A run's JVM lives for one run, and the rows it
# handles are few (the scan packs them): C2's compiler threads were half its CPU, 12 of
# 24.5 s in a scan of 1,000,000 records; with C1 only, 2.8 of 14.6 s.
DRIVER_JAVA_OPTIONS = f"-XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile={LOG4J2_CONFIG}"
SPARK_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"  # set when spark-submit started this driver


@asynccontextmanager
async def spark_session(options: MaintainOptions) -> AsyncIterator[Any]:
    """A SparkSession for the run (stopped on the way out), writing to disk only in the
    run's scratch directory (`scratch.py`: made here after sweeping dead drivers' ones,
    removed on the way out); a master Spark cannot reach is one clear UsageError.
    Started and stopped off the event loop: Spark takes seconds to start, and the
    driver's ZooKeeper session must keep beating meanwhile."""
    run_scratch = await asyncio.to_thread(
        scratch.open_run, scratch.scratch_root(options.scratch_dir), time.time()
    )
    try:
        session = await asyncio.to_thread(_start, options, run_scratch.path)
        try:
            yield session
        finally:
            await asyncio.to_thread(session.stop)
    finally:
        await asyncio.to_thread(run_scratch.remove)


def _start(options: MaintainOptions, run_dir: Path) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ[hooks.DRIVER_PID_ENV] = str(os.getpid())
    builder = (
        SparkSession.builder.appName("blobstore-maintain")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.python.worker.reuse", "true")
        # The scan's rows are cached once and read a few times: compressing the cache's
        # columns cost 4-5 µs of CPU per row here, half the cache's cost (its size goes
        # to memory and, past it, to disk: the cache is MEMORY_AND_DISK).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
    )
    for key, value in scratch_settings(run_dir).items():
        builder = builder.config(key, value)
    if options.master or SPARK_SUBMIT_ENV not in os.environ:
        builder = builder.master(options.master or "local[*]")
    # The executors' ZooKeeper sessions authenticate, and their ledger connections use
    # TLS, as the driver's do: the files must be at the same paths on them (mounted
    # Secrets on Kubernetes).
    for name in (
        hooks.HOOKS_ENV,
        hooks.DRIVER_PID_ENV,
        DIGEST_FILE_ENV,
        LEDGER_TLS_DIR_ENV,
        ZK_TLS_DIR_ENV,
    ):
        if name in os.environ:
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    try:
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        master = str(session.sparkContext.master)
        if not master.startswith("local"):
            _first_executor(session, master)
            _ship_package(session, run_dir)
        return session
    except UsageError:
        raise
    except Exception as e:  # Py4J and JVM failures: the master is wrong or unreachable
        where = options.master or "local[*]"
        raise UsageError(f"cannot start Spark with --master {where}: {cause_of(e)}") from e


def _first_executor(session: Any, where: str) -> None:
    """With a cluster master: wait (at most EXECUTOR_WAIT_S) for a first executor, so
    that a master that never answers is one clear error here rather than a failed job
    later (Spark gives up on an unreachable master after about a minute and stops the
    context). Executors that are merely slow to come leave the run waiting in its jobs."""
    context = session.sparkContext._jsc.sc()
    deadline = time.monotonic() + EXECUTOR_WAIT_S
    while time.monotonic() < deadline:
        if context.isStopped():
            raise UsageError(
                f"cannot start Spark with --master {where}: the application was stopped "
                "(is the master reachable?)"
            )
        if context.getExecutorMemoryStatus().size() > 1:  # the driver's own, plus one
            return
        time.sleep(EXECUTOR_POLL_S)
    logger.warning("event=no_executor_yet master=%s waited_s=%.0f", where, EXECUTOR_WAIT_S)


def is_spark_failure(error: BaseException) -> bool:
    """An error Spark raised (in the JVM, across Py4J, or in PySpark itself)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return isinstance(error, Py4JError | PySparkException)


def cause_of(error: Exception) -> str:
    """What a JVM error comes down to: its innermost Java cause (class and message),
    else its first line (the Java stack trace stays in the log)."""
    cause = getattr(error, "java_exception", None)
    try:
        while cause is not None and cause.getCause() is not None:
            cause = cause.getCause()
        if cause is not None:
            return str(cause.toString())
    except Exception:  # noqa: BLE001 - a JVM already gone: fall back to the Python text
        pass
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _ship_package(session: Any, run_dir: Path) -> None:
    """Zip the `blobstore` package (into the run's scratch directory) for executors on
    other machines."""
    root = Path(__file__).resolve().parents[2]
    archive = shutil.make_archive(str(run_dir / "blobstore"), "zip", root, "blobstore")
    session.sparkContext.addPyFile(archive)


def scratch_settings(run_dir: Path) -> dict[str, str]:
    """The settings that keep the driver's local files in `run_dir`: Spark's local
    directory (block manager and `spark-*` directories; executors of a cluster use the
    directories their cluster manager gives them), the driver JVM's temporary directory
    (native libraries unpacked, other temporary files; the JVM takes it at its start,
    from these settings when the driver starts it, not under spark-submit), and
    Hadoop's."""
    java_options = f"{DRIVER_JAVA_OPTIONS} {java_option('java.io.tmpdir', str(run_dir))}"
    return {
        "spark.local.dir": str(run_dir),
        "spark.driver.extraJavaOptions": java_options,
        "spark.hadoop.hadoop.tmp.dir": str(run_dir / "hadoop"),
    }


def java_option(name: str, value: str) -> str:
    """`-Dname=value`, quoted as Spark's launcher splits extraJavaOptions (a value with
    spaces or quotes stays one option)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'-D{name}="{escaped}"'


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

SCAN_SCHEMA = (
    "tag string, ledger_id long, first_entry long, last_entry long, length long, "
    "entry_size long, role string, bucket string, key string, version_id string, "
    "upload_id string, part_number int, holders long, mtime double, detail string"
)
PARTITIONS_PER_CORE = 4
OBJECT_EXTENT_SCHEMA = (
    "ledger_id long, first_entry long, last_entry long, length long, entry_size long, "
    "bucket string, key string, version_id string"
)


def scan_rows(session: Any, run: scan.Session, tasks: list[scan.Task]) -> Any:
    """The scan's rows (an RDD, not yet run): the tasks dealt into a few Spark partitions
    per core (`scan.deal`), each partition one ZooKeeper session walking its tasks in
    turn (a Spark task and a session cost tens of milliseconds each: per page range,
    they were most of a scan)."""
    context = session.sparkContext
    groups = scan.deal(tasks, max(1, context.defaultParallelism) * PARTITIONS_PER_CORE)
    rdd = context.parallelize(groups, max(1, len(groups)))
    return rdd.mapPartitions(lambda part: scan.run_partition(run, [t for g in part for t in g]))


class ScanFrames:
    """The scan's rows as one persisted DataFrame, made in one pass over the tasks, and
    the views of it the run works with (each a filter and a projection, in the JVM)."""

    def __init__(self, session: Any, rows: Any) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as f

        self.session = session
        self.all = session.createDataFrame(rows, SCAN_SCHEMA, verifySchema=False)
        self.all = self.all.persist(StorageLevel.MEMORY_AND_DISK)
        tag = f.col("tag")
        self.extents = self.all.where(tag == scan.TAG_EXTENT).select(*scan.EXTENT_COLUMNS, "detail")
        transition = f.col("role") == str(lifecycle.ActionKind.TRANSITION)
        self.transitions = self.all.where((tag == scan.TAG_ACTION) & transition).select(
            "bucket",
            "key",
            "version_id",
            "mtime",
            "length",
            f.get_json_object("detail", "$.storage_class").alias("storage_class"),
        )
        self.tiered = self.all.where(tag == scan.TAG_TIERED).select(
            "bucket",
            "key",
            "version_id",
            "length",
            "mtime",
            f.col("detail").alias("location"),
            f.regexp_extract("detail", "^([^@]*)@", 1).alias("segment"),  # tier/segment id
        )
        self.actions = self.all.where((tag == scan.TAG_ACTION) & ~transition).select(
            f.col("role").alias("action"),
            "bucket",
            "key",
            "version_id",
            "mtime",
            f.get_json_object("detail", "$.rule_id").alias("rule_id"),
            f.get_json_object("detail", "$.reason").alias("reason"),
        )
        self.ledgers = self.all.where(tag == scan.TAG_LEDGER).select(
            "ledger_id", "length", "mtime", "detail"
        )
        # The one job that runs the scan (and fills the cache): rows by kind.
        counts = self.all.groupBy("tag", "role").agg(
            f.count("*").alias("rows"), f.sum("length").alias("length")
        )
        by_kind = {(r.tag, r.role): (int(r.rows), r.length) for r in counts.collect()}
        self.records = int(by_kind.get((scan.TAG_COUNT, None), (0, 0))[1] or 0)
        self.unresolved = by_kind.get((scan.TAG_EXTENT, scan.ROLE_UNRESOLVED), (0, 0))[0]

    def object_extents(self, ledger_ids: list[int]) -> Any:
        """The object extents on `ledger_ids`, a row each (OBJECT_EXTENT_SCHEMA: ledger,
        entries, bytes, the version holding it), unpacked from the packed rows by
        Spark tasks; not cached."""
        from pyspark.sql import functions as f

        packed = self.extents.where(
            f.col("detail").isNotNull() & f.col("ledger_id").isin(*ledger_ids)
        )
        rows = packed.select("ledger_id", "bucket", "detail").rdd.flatMap(scan.extent_rows_of)
        return self.session.createDataFrame(rows, OBJECT_EXTENT_SCHEMA, verifySchema=False)

    def unpersist(self) -> None:
        self.all.unpersist()


def ledger_stats(frames: ScanFrames) -> tuple[list[Any], list[int]]:
    """Per ledger of the metadata: its row with live bytes and pinned (null when nothing
    references it), from one full join; and the ledgers referenced but without
    metadata."""
    from pyspark.sql import functions as f

    extents = frames.extents.where(f.col("ledger_id") >= 0)
    pinning = f.col("role").isin(*scan.PINNING_ROLES)
    per_ledger = extents.groupBy("ledger_id").agg(
        f.sum(f.when(f.col("role") == scan.ROLE_OBJECT, f.col("length")).otherwise(0)).alias(
            "live_bytes"
        ),
        f.max(f.when(pinning, 1).otherwise(0)).alias("pinned"),
    )
    joined = frames.ledgers.join(per_ledger, "ledger_id", "full_outer").collect()
    known = [r for r in joined if r.detail is not None]
    missing = sorted(int(r.ledger_id) for r in joined if r.detail is None)
    return known, missing


Released = tuple[int, str, str, str, str]  # (ledger_id or -1: all, bucket, key, version, upload)


def fully_released(session: Any, extents: Any, released: list[Released]) -> dict[int, Counts]:
    """Per ledger that lost a holder this run: (holders, holders released), over the
    extent rows (uploads' parts, manifests) and the packed object rows together.
    `released`: (ledger_id or -1 for every ledger of the holder, bucket, key,
    version_id, upload_id)."""
    from pyspark.sql import functions as f

    packed = f.col("detail").isNotNull()
    objects = [r for r in released if not r[4]]
    gone = _released_in_packed(extents.filter(packed), objects)
    frame = session.createDataFrame(
        released, "ledger_id long, bucket string, key string, version_id string, upload_id string"
    )
    counts = _released_of_rows(extents.filter(~packed), frame, list(gone))
    touched = sorted(set(counts) | set(gone))
    totals = _packed_holders(extents.filter(packed), touched)
    return {
        i: (counts.get(i, (0, 0))[0] + totals.get(i, 0), counts.get(i, (0, 0))[1] + gone.get(i, 0))
        for i in touched
    }


Counts = tuple[int, int]


def _released_in_packed(packed: Any, released: list[Released]) -> dict[int, int]:
    """Per ledger, the released object versions found in the packed rows' extents (read
    in the executors, over the released versions' buckets only)."""
    from pyspark.sql import functions as f

    if not released:
        return {}
    buckets = sorted({r[1] for r in released})
    rows = packed.filter(f.col("bucket").isin(*buckets)).select("ledger_id", "bucket", "detail")
    wanted = scan.ReleasedVersions(released)
    gone: dict[int, int] = {}
    for ledger_id, _bucket, _key, _version in (
        rows.rdd.mapPartitions(wanted.found_in).distinct().collect()
    ):
        gone[ledger_id] = gone.get(ledger_id, 0) + 1
    return gone


def _packed_holders(packed: Any, ledger_ids: list[int]) -> dict[int, int]:
    """The object versions holding each of `ledger_ids`, from the packed rows."""
    from pyspark.sql import functions as f

    if not ledger_ids:
        return {}
    rows = (
        packed.filter(f.col("ledger_id").isin(*ledger_ids))
        .groupBy("ledger_id")
        .agg(f.sum("holders").alias("holders"))
        .collect()
    )
    return {int(r.ledger_id): int(r.holders) for r in rows}


def _released_of_rows(extents: Any, released: Any, also: list[int]) -> dict[int, Counts]:
    """`fully_released` over the extent rows (one per holder and extent), in the JVM:
    the ledgers they release, and those of `also` (released in packed rows)."""
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
    wanted = f.col("released") > 0
    if also:
        wanted = wanted | f.col("ledger_id").isin(*also)
    rows = touched.filter(wanted).collect()
    return {int(r.ledger_id): (int(r.holders), int(r.released)) for r in rows}
