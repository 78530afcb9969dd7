"""Maintenance job benchmark: `blobstore maintain` (local Spark) on real processes
(ZooKeeper, three bookies, a gateway), beside the machine's limits measured in the same
run (sequential write + fdatasync bandwidth, 4 KiB write + fdatasync rate, loopback TCP,
ZooKeeper page reads, an empty Spark task).

    .venv/bin/python -m bench.maintenance_bench [--records 1000000] [--quick]
                                                [--output docs/benchmarks/maintenance.md]

Three measurements, each on a cluster of its own (a ZooKeeper chroot and three fresh
bookies; one ZooKeeper server for all):

- **scan**: a catalog of `--records` object records bulk-loaded straight into ZooKeeper
  (`Catalog.bulk_load`), whose extents name a handful of real closed ledgers, scanned by
  `maintain --only gc --dry-run` (at the default pages per task, and with larger tasks):
  records per second of the scan phase, apart from Spark's start-up, and the Spark jobs the
  phase ran (Spark's event log); then a scan task's own work, piece by piece, in this
  process: where a scan's time goes;
- **compaction**: sparse closed ledgers (every other object garbage) compacted by
  `maintain --only compact --grace 0`: bytes copied per second against the disk's bound;
- **bytes on bookies**: a delete-heavy workload through the gateway (boto3), then one
  `maintain --grace 0`: the bookies' ledger directories against live bytes x WQ;
- **tiering**: objects put through the gateway and moved by `maintain --only tier`
  (Transition rules) to a file tier, then to an S3 tier (a second cluster's gateway):
  bytes written to the tier per second of the phase's Spark jobs, against the disk's
  sequential bandwidth; then GETs (boto3, 4 in flight) of hot objects and of objects on
  each tier in turn, same sizes.

Each run of the job is a child process (`--job`: `blobstore.maintenance.job.run` with a
progress callback whose calls are timed, so the start of each scan is exact), paying
Spark's start-up as `blobstore maintain` does. Not a test: nothing asserts on speed.
`--quick` runs small sizes, the three measurements at once (their figures are not to be
read), for tests/bench/test_maintenance_bench_report.py.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import linecache
import os
import pickle
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import uvloop

from bench.disk_probes import fsync_rate_4k, sequential_mb_per_s
from bench.ledger_bench import process_cpu_s, start_bookie
from bench.s3_bench import ACCESS_KEY, SECRET_KEY, cli, loopback_probe, start_child
from blobstore.catalog import Catalog, CatalogConfig
from blobstore.catalog.page import IndexPage
from blobstore.catalog.records import Extent, ObjectRecord, VersionRefs
from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, start_zookeeper
from blobstore.ledger import LedgerClient
from blobstore.ledger.config import OBJECT_LEDGER_PASSWORD, OBJECT_LEDGER_PURPOSE
from blobstore.maintenance import scan
from blobstore.runtime.sealing import CLUSTER_KEY_FILE_ENV, write_cluster_key_file
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout

ROOT = Path(__file__).resolve().parent.parent
KIB = 1024
MIB = 1024 * KIB
WRITE_QUORUM = 2  # E3/WQ2/AQ2, as the gateway writes
QUORUMS = (3, WRITE_QUORUM, 2)
BUCKET = "bench"
JOB_TIMEOUT_S = 3600.0
BOOKIE_GC_TIMEOUT_S = 120.0
PAGES_PER_TASK_DEFAULT = 64  # MaintainOptions' default
# The aims.
SCAN_AIM_RECORDS_PER_S = 50_000.0
COPY_AIM_FRACTION = 0.5  # of sequential write / (2 x WQ)
TIERING_AIM_FRACTION = 0.5  # of sequential write
TIER_GET_AIM_FRACTION = 0.7  # of a hot GET
TIER_GET_ROUNDS = 2
TIER_GET_THREADS = 4
DAY_S = 86_400
BOOKIE_BYTES_AIM = 1.1  # x live bytes x WQ
# Pages a scan task's walk reads ahead (listing.py's read-ahead), and the depth of the
# probe that asks ZooKeeper for pages as fast as one session can.
WALK_PAGES_IN_FLIGHT = 3
PROBE_PAGES_IN_FLIGHT = 32
PICKLE_BATCH_ROWS = 1024
TASK_SETUP_SAMPLES = 10


@dataclass(frozen=True, slots=True)
class Sizes:
    records: int  # catalog records scanned
    scan_ledgers: int  # real closed ledgers the records' extents name
    scan_ledger_entries: int  # 4 KiB entries in each
    scan_pages_per_task: tuple[int, ...]  # one scan run each
    compact_ledgers: int
    compact_ledger_bytes: int
    compact_object_bytes: int  # every other object is garbage
    workload_objects: int  # objects the delete-heavy workload puts first
    workload_object_bytes: int
    workload_ledger_bytes: int  # the gateway's writer ledger size
    aborted_part_bytes: int  # each of the two parts of the three aborted uploads
    spark_probe_tasks: int
    tier_objects: int  # tiered, and as many kept hot
    tier_object_bytes: int


FULL = Sizes(
    records=1_000_000,
    scan_ledgers=20,
    scan_ledger_entries=1024,
    scan_pages_per_task=(PAGES_PER_TASK_DEFAULT, 1024),
    compact_ledgers=24,
    compact_ledger_bytes=16 * MIB,
    compact_object_bytes=4 * MIB,
    workload_objects=1600,
    workload_object_bytes=256 * KIB,
    workload_ledger_bytes=8 * MIB,
    aborted_part_bytes=5 * MIB,
    spark_probe_tasks=200,
    tier_objects=64,
    tier_object_bytes=4 * MIB,
)
QUICK = Sizes(
    records=20_000,
    scan_ledgers=4,
    scan_ledger_entries=64,
    scan_pages_per_task=(PAGES_PER_TASK_DEFAULT,),
    compact_ledgers=4,
    compact_ledger_bytes=4 * MIB,
    compact_object_bytes=1 * MIB,
    workload_objects=48,
    workload_object_bytes=64 * KIB,
    workload_ledger_bytes=1 * MIB,
    aborted_part_bytes=256 * KIB,
    spark_probe_tasks=16,
    tier_objects=8,
    tier_object_bytes=256 * KIB,
)


# --------------------------------------------------------------------------- clusters


class Section:
    """One measurement's cluster: a chroot of the shared ZooKeeper server, three fresh
    bookies and, when asked, a gateway; all stopped and their data removed on exit."""

    def __init__(self, server: ZooKeeperServer, name: str, work: Path) -> None:
        self.server = server
        self.name = name
        self.work = work / name
        self.zk = ""
        self.bookies: list[subprocess.Popen[bytes]] = []
        self.http_ports: list[int] = []
        self.gateway: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Section:
        self.work.mkdir(parents=True)
        self.zk = self.server.chroot(f"/{self.name}")
        try:
            for index in range(3):
                root = self.work / f"bookie-{index}"
                process, _, http_port = start_bookie(self.zk, root, root / "bookie.log")
                self.bookies.append(process)
                self.http_ports.append(http_port)
        except BaseException:
            self.__exit__()
            raise
        return self

    def start_gateway(self, env: dict[str, str]) -> str:
        """A gateway (one worker) on this cluster; returns its endpoint."""
        ready = self.work / "gateway.json"
        command = cli("gateway", "--zk", self.zk, "--port", "0", "--workers", "1")
        command += ["--ready-file", str(ready)]
        environment = {**os.environ, **env}
        environment.update({"BLOBSTORE_ACCESS_KEY": ACCESS_KEY, "BLOBSTORE_SECRET_KEY": SECRET_KEY})
        self.gateway, info = start_child(command, self.work / "gateway.log", ready, environment)
        return f"http://127.0.0.1:{info['port']}"

    def stop_gateway(self) -> None:
        """SIGTERM: the gateway closes its writer ledgers on the way out."""
        if self.gateway is not None:
            stop_process(self.gateway)
            self.gateway = None

    def ledger_dir_bytes(self) -> int:
        return sum(tree_bytes(self.work / f"bookie-{i}" / "ledgers") for i in range(3))

    def journal_bytes(self) -> int:
        return sum(tree_bytes(self.work / f"bookie-{i}" / "journal") for i in range(3))

    def checkpoint_bookies(self) -> None:
        """A forced GC pass that compacts nothing (threshold 0) but checkpoints (`roll`):
        each bookie's write cache goes to its entry logs, so the bytes on disk are all
        there is."""
        for port in self.http_ports:
            url = f"http://127.0.0.1:{port}/api/v1/bookie/gc?threshold=0&roll=true"
            request = urllib.request.Request(url, data=b"", method="POST")
            with urllib.request.urlopen(request, timeout=BOOKIE_GC_TIMEOUT_S) as reply:
                reply.read()

    def __exit__(self, *exc: object) -> None:
        self.stop_gateway()
        for process in self.bookies:
            stop_process(process)
        self.bookies.clear()
        shutil.rmtree(self.work, ignore_errors=True)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@asynccontextmanager
async def connected(zk_connect: str) -> AsyncIterator[tuple[ZooKeeperClient, LedgerClient]]:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    client = LedgerClient(zk)
    try:
        await client.start()
        yield zk, client
    finally:
        await client.close()
        await zk.stop()


async def write_ledger(client: LedgerClient, payloads: list[bytes], entry_count: int) -> int:
    """A closed object ledger of `entry_count` entries (the payloads in turn), as a
    gateway's writer ledger: purpose objects, the object password."""
    handle = await client.create_ledger(
        *QUORUMS,
        OBJECT_LEDGER_PASSWORD,
        metadata={"purpose": OBJECT_LEDGER_PURPOSE, "writer": "maintenance-bench"},
    )
    added = []
    for entry in range(entry_count):
        await handle.wait_for_capacity()
        added.append(handle.append(payloads[entry % len(payloads)]))
    await asyncio.gather(*added)
    await handle.close()
    return handle.ledger_id


# --------------------------------------------------------------------------- Spark


@dataclass(frozen=True, slots=True)
class SparkJob:
    """One Spark job of a run, from Spark's event log."""

    call_site: str  # where the driver started it ("collect at .../spark.py:158")
    tasks: int
    started_s: float  # wall clock
    ended_s: float
    task_s: float  # the wall time of its tasks, summed


JOB_APP_NAME = "blobstore-maintain"  # the job's Spark application (spark.py)


def spark_jobs(directory: Path) -> list[SparkJob]:
    """The jobs recorded in the event log of the job's application in `directory`."""
    (events,) = [e for e in map(event_log, directory.iterdir()) if app_name(e) == JOB_APP_NAME]
    starts: dict[int, tuple[str, float, list[int]]] = {}
    ends: dict[int, float] = {}
    stage_tasks: dict[int, list[float]] = {}
    for event in events:
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            starts[event["Job ID"]] = (
                _call_site(event),
                event["Submission Time"] / 1000,
                list(event["Stage IDs"]),
            )
        elif kind == "SparkListenerJobEnd":
            ends[event["Job ID"]] = event["Completion Time"] / 1000
        elif kind == "SparkListenerTaskEnd":
            info = event["Task Info"]
            seconds = (info["Finish Time"] - info["Launch Time"]) / 1000
            stage_tasks.setdefault(event["Stage ID"], []).append(seconds)
    jobs = []
    for job_id, (site, started, stages) in sorted(starts.items()):
        tasks = [t for s in stages for t in stage_tasks.get(s, [])]
        jobs.append(SparkJob(site, len(tasks), started, ends.get(job_id, started), sum(tasks)))
    return jobs


def event_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def app_name(events: list[dict[str, Any]]) -> str:
    starts = [e for e in events if e["Event"] == "SparkListenerApplicationStart"]
    return str(starts[0]["App Name"]) if starts else ""


def _call_site(event: dict[str, Any]) -> str:
    site = (event.get("Properties") or {}).get("callSite.short")
    if site:
        return str(site)
    # Started by the JVM on a DataFrame's behalf (e.g. `count()`): its method.
    method = event["Stage Infos"][0].get("Details", "").split("(", 1)[0]
    return ".".join(method.split(".")[-2:])


_PYTHON_SITE = re.compile(r"^(\w+) at (\S+\.py):(\d+)$")


def call_site_label(site: str) -> str:
    """A call site as the code that made it: `function` (file:line) and the line."""
    match = _PYTHON_SITE.match(site)
    if match is None:
        return f"`{site}` (started by the JVM for a DataFrame)"
    action, path, number = match.group(1), match.group(2), int(match.group(3))
    function = ""
    for n in range(number, 0, -1):
        text = linecache.getline(path, n).strip()
        if text.startswith(("def ", "async def ")):
            function = text.split("def ", 1)[1].split("(", 1)[0]
            break
    code = linecache.getline(path, number).strip()
    first = number
    while linecache.getline(path, first).strip().startswith(".") and first > 1:
        first -= 1  # a chained call: show where its statement starts too
    if first != number:
        code = f"{linecache.getline(path, first).strip()} … {code}"
    where = f"{Path(path).name}:{number}"
    return f"`{function}` ({where}, {action}): `{code}`" if code else f"{action} at {where}"


def union_s(intervals: list[tuple[float, float]]) -> float:
    """The time covered by a set of intervals."""
    covered = 0.0
    end = float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            covered += stop - max(start, end)
            end = stop
    return covered


@dataclass
class JobRun:
    """One run of the job: its report, the timed calls of its progress callback, its
    Spark jobs and the CPU it took."""

    report: dict[str, Any]
    events: list[tuple[float, str, int, int]]  # (wall time, phase, done, total)
    wall_s: float  # the child process, start to exit
    # CPU seconds the child process and its descendants (driver, JVM, Python workers)
    # had taken, sampled: [(wall clock, CPU seconds)].
    cpu_samples: list[tuple[float, float]]
    jobs: list[SparkJob]
    probe: SparkProbe | None  # Spark's cost per task, measured before the run if asked

    def phase_start(self, phase: str) -> float:
        """When `phase` was first reported."""
        return next(t for t, p, _, _ in self.events if p == phase)

    @property
    def spark_start_s(self) -> float:
        """From the run's start to its first scan: the lock, the catalog and Spark's
        start (a JVM, a SparkContext), which is most of it."""
        return self.phase_start("scan") - float(self.report["started"])

    @property
    def total_s(self) -> float:
        return float(self.report["finished"]) - float(self.report["started"])

    @property
    def cpu_s(self) -> float:
        return self.cpu_samples[-1][1] if self.cpu_samples else 0.0

    def cpu_at(self, moment: float) -> float:
        """CPU seconds taken by the last sample at or before `moment` (wall clock)."""
        return max((cpu for t, cpu in self.cpu_samples if t <= moment), default=0.0)


def run_job(zk: str, work: Path, name: str, **options: Any) -> JobRun:
    """`blobstore.maintenance.job.run` in a child process (Spark in its own JVM, as
    `blobstore maintain` starts it, with its event log on); its report, timed progress,
    Spark jobs and CPU."""
    result = work / f"{name}.json"
    events_dir = work / f"{name}-events"
    events_dir.mkdir()
    log = work / f"{name}.log"
    command = [sys.executable, "-m", "bench.maintenance_bench", "--job"]
    command += [json.dumps({"zk": zk, **options}), "--job-result", str(result)]
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": (
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{events_dir} "
        "pyspark-shell")}  # fmt: skip
    started = time.monotonic()
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        cpu_samples = tree_cpu_s(process, JOB_TIMEOUT_S)
    finally:
        stop_process(process)
    wall_s = time.monotonic() - started
    if process.returncode != 0 or not result.exists():
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"maintenance job {name} failed ({process.returncode}):\n{tail}")
    data = json.loads(result.read_text())
    if data["report"]["outcome"] != "ok" or data["report"]["errors"]:
        raise RuntimeError(f"maintenance job {name} reported errors: {data['report']}")
    events = [(float(t), str(p), int(d), int(n)) for t, p, d, n in data["events"]]
    probe = SparkProbe(**data["probe"]) if data["probe"] else None
    jobs = spark_jobs(events_dir)
    return JobRun(data["report"], events, wall_s, cpu_samples, jobs, probe)


CPU_SAMPLE_S = 0.25


def tree_cpu_s(process: subprocess.Popen[bytes], timeout_s: float) -> list[tuple[float, float]]:
    """Wait for `process` to exit; the CPU seconds it and its descendants (a JVM, Python
    workers) had taken so far at each sample, [(wall clock, CPU seconds)], read from
    /proc as they run (a descendant that lives less than a sample's interval is
    missed)."""
    seen: dict[tuple[int, int], float] = {}  # (pid, start time) -> CPU seconds
    samples = []
    deadline = time.monotonic() + timeout_s
    while process.poll() is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{process.args!r} still running after {timeout_s} s")
        for key, cpu_s in descendants_cpu_s(process.pid).items():
            seen[key] = max(seen.get(key, 0.0), cpu_s)
        samples.append((time.time(), sum(seen.values())))
        time.sleep(CPU_SAMPLE_S)
    return samples


def descendants_cpu_s(root: int) -> dict[tuple[int, int], float]:
    """{(pid, start time): user + system CPU seconds} of `root` and its descendants."""
    parents: dict[int, int] = {}
    cpu: dict[tuple[int, int], float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        cpu[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / tick
    tree = {root}
    while True:
        grown = tree | {pid for pid, parent in parents.items() if parent in tree}
        if grown == tree:
            break
        tree = grown
    return {key: value for key, value in cpu.items() if key[0] in tree}


def job_child(spec_text: str, result_path: str) -> int:
    """The child of `run_job`: one run; its report and its progress calls, timed, written
    to a file. Asked for `probe_tasks`, it then measures Spark's cost per task in a new
    session of the same JVM."""
    from blobstore.maintenance import job
    from blobstore.maintenance.options import MaintainOptions

    spec = json.loads(spec_text)
    spec["phases"] = tuple(spec.get("phases", ("gc", "compact", "lifecycle")))
    probe_tasks = spec.pop("probe_tasks", 0)
    events: list[tuple[float, str, int, int]] = []

    def progress(phase: str, done: int, total: int) -> None:
        events.append((time.time(), phase, done, total))

    report = job.run(MaintainOptions(**spec), progress)
    probe = asdict(SparkProbe(probe_tasks, empty_tasks_s(probe_tasks))) if probe_tasks else None
    result = {"report": report.to_json(), "events": events, "probe": probe}
    Path(result_path).write_text(json.dumps(result))
    return 0


@dataclass
class SparkProbe:
    """Spark's own cost per task: a job of empty Python tasks."""

    tasks: int
    task_wall_s: float  # the job, start to end

    @property
    def ms_per_task(self) -> float:
        return self.task_wall_s / self.tasks * 1000


def empty_tasks_s(tasks: int) -> float:
    """The wall time of a job of `tasks` empty Python tasks in a `local[*]` session with
    the job's worker settings, once its Python workers started (a first small job)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.appName("maintenance-bench-probe")
        .master("local[*]")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.eventLog.enabled", "false")
        .getOrCreate()
    )
    try:
        context = session.sparkContext
        context.setLogLevel("ERROR")
        context.parallelize(range(4), 4).mapPartitions(lambda part: iter([0])).sum()
        started = time.monotonic()
        context.parallelize(range(tasks), tasks).mapPartitions(lambda part: iter([0])).sum()
        return time.monotonic() - started
    finally:
        session.stop()


# --------------------------------------------------------------------------- scan


def scan_record(ledger_ids: list[int], entries: int, n: int) -> ObjectRecord:
    """The nth record: a 4 KiB object as a gateway commits it (one extent, MD5 ETag,
    CRC32 checksum), in one entry of one of the scan's ledgers."""
    ledger = ledger_ids[n % len(ledger_ids)]
    entry = (n // len(ledger_ids)) % entries
    return ObjectRecord(
        bucket=BUCKET,
        key=f"data/part-{n // 1000:04d}/file-{n % 1000:06d}.bin",
        version_id="null",
        size=4096,
        etag=f"{n * 2654435761 % (1 << 128):032x}",
        last_modified=1_760_000_000.0 + n / 7,
        content_type="application/octet-stream",
        checksums={"CRC32": f"{n % 99_999_999:08d}==", "type": "FULL_OBJECT"},
        extents=(Extent(ledger, entry, entry, 4096, MIB),),
    )


def scan_records(ledger_ids: list[int], entries: int, count: int) -> Iterator[ObjectRecord]:
    """Sorted by key by construction (1000 keys per directory)."""
    for n in range(count):
        yield scan_record(ledger_ids, entries, n)


async def build_scan_catalog(zk_connect: str, sizes: Sizes) -> tuple[int, int, float]:
    """The scan's ledgers and catalog; returns (ledgers, pages, bulk load seconds)."""
    async with connected(zk_connect) as (zk, client):
        payloads = [os.urandom(4 * KIB) for _ in range(16)]
        ledger_ids = [
            await write_ledger(client, payloads, sizes.scan_ledger_entries)
            for _ in range(sizes.scan_ledgers)
        ]
        catalog = Catalog(zk, CatalogConfig())
        await catalog.start()
        try:
            await catalog.create_bucket(BUCKET, "bench")
            records = scan_records(ledger_ids, sizes.scan_ledger_entries, sizes.records)
            started = time.monotonic()
            pages = await catalog.bulk_load(BUCKET, records)
            load_s = time.monotonic() - started
        finally:
            await catalog.close()
    return len(ledger_ids), pages, load_s


async def page_paths(catalog: Catalog, bucket: str) -> list[str]:
    _root, shards = await catalog.index.map_snapshot(bucket)
    return [catalog.paths.page(bucket, p) for shard in shards for p in shard.page_ids]


async def read_pages(zk_connect: str, depth: int) -> tuple[list[bytes], float]:
    """Every page of the bucket read raw, `depth` reads in flight from one session;
    (the stored bytes, seconds)."""
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    try:
        paths = await page_paths(Catalog(zk, CatalogConfig()), BUCKET)
        semaphore = asyncio.Semaphore(depth)

        async def read(path: str) -> bytes:
            async with semaphore:
                return (await zk.get(path)).value

        started = time.monotonic()
        stored = await asyncio.gather(*(read(p) for p in paths))
        seconds = time.monotonic() - started
    finally:
        await zk.stop()
    return list(stored), seconds


async def walk(zk_connect: str, with_rows: bool) -> tuple[int, float]:
    """A scan task's walk (`Catalog.iter_key_runs`) over the whole bucket from one
    session, building its rows or not: (records, seconds)."""
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    catalog = Catalog(zk, CatalogConfig())
    catalog.index.start()
    count = 0
    rows: list[tuple[Any, ...]] = []
    objects = scan.ObjectExtents()
    try:
        started = time.monotonic()
        async for run in catalog.iter_key_runs(BUCKET, "", None):
            for key, versions in run:
                count += len(versions)
                if with_rows:
                    for version in versions:
                        rows.extend(scan.version_rows(BUCKET, key, version, objects))
        rows.extend(objects.rows(BUCKET))
        seconds = time.monotonic() - started
    finally:
        await catalog.close()
        await zk.stop()
    return count, seconds


def page_refs(pages: list[IndexPage]) -> list[tuple[str, VersionRefs]]:
    """Every version of the pages as a scan task sees it: each page's lines decoded in
    one JSON call, a `VersionRefs` per version."""
    return [
        (key, VersionRefs(d))
        for page in pages
        for key, versions in zip(page.keys, page.decode_lines(0, len(page.keys)), strict=True)
        for d in versions
    ]


@dataclass
class ScanPieces:
    """A scan task's work over the whole catalog in this process, piece by piece:
    seconds for `records` records."""

    records: int
    walk_s: float  # Catalog.iter_key_runs, one session: reads + decode + VersionRefs
    walk_rows_s: float  # the same, building the task's rows (scan.version_rows)
    read_s: float  # the pages' raw reads alone, WALK_PAGES_IN_FLIGHT in flight
    decode_s: float  # IndexPage.decode of every stored page
    refs_s: float  # each page's lines decoded, a VersionRefs per version (`page_refs`)
    rows_s: float  # scan.version_rows of every version
    records_s: float  # for comparison: IndexPage.records, an ObjectRecord per version
    pickle_s: float  # the rows pickled in batches, as a Python worker ships them
    pickled_bytes: int
    task_setup_s: float  # one task's session, ledger client, sync and close

    def us_per_record(self, seconds: float) -> float:
        return seconds / self.records * 1e6


def timed(work: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    value = work()
    return value, time.monotonic() - started


def task_rows(refs: list[tuple[str, VersionRefs]]) -> list[tuple[Any, ...]]:
    """A scan task's rows of these versions (`scan.version_rows`, packed objects)."""
    objects = scan.ObjectExtents()
    rows = [row for k, v in refs for row in scan.version_rows(BUCKET, k, v, objects)]
    return rows + list(objects.rows(BUCKET))


def cpu_pieces(stored: list[bytes]) -> dict[str, Any]:
    """The CPU pieces of a scan task over the stored pages, each timed alone."""
    pages, decode_s = timed(lambda: [IndexPage.decode(str(i), s, 0) for i, s in enumerate(stored)])
    refs, refs_s = timed(lambda: page_refs(pages))
    rows, rows_s = timed(lambda: task_rows(refs))
    records, records_s = timed(
        lambda: [r for p in pages for i in range(len(p.keys)) for r in p.records(BUCKET, i)]
    )
    assert len(records) == len(refs), (len(records), len(refs))
    batches = [rows[i : i + PICKLE_BATCH_ROWS] for i in range(0, len(rows), PICKLE_BATCH_ROWS)]
    pickled, pickle_s = timed(lambda: sum(len(pickle.dumps(b, 5)) for b in batches))
    return {
        "records": len(records), "decode_s": decode_s, "refs_s": refs_s,
        "rows_s": rows_s, "records_s": records_s, "pickle_s": pickle_s,
        "pickled_bytes": pickled,
    }  # fmt: skip


def task_setup_s(zk_connect: str) -> float:
    """What one scan task costs before its first page, in this process: a task that
    scans an empty ledger directory (session, ledger client, sync, close)."""
    session = scan.Session(zk_connect, "/catalog", time.time())
    task = scan.LedgersTask(f"{zk_layout.LEDGER_META_ROOT}/none")
    _, seconds = timed(
        lambda: [list(scan.run_partition(session, [task])) for _ in range(TASK_SETUP_SAMPLES)]
    )
    return float(seconds) / TASK_SETUP_SAMPLES


@dataclass(frozen=True, slots=True)
class PageReads:
    """Every page of the catalog read raw from one session, `depth` reads in flight."""

    depth: int
    pages: int
    stored_bytes: int
    seconds: float
    zookeeper_cpu_s: float  # the server's CPU over the reads

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds

    @property
    def zookeeper_us_per_page(self) -> float:
        return self.zookeeper_cpu_s / self.pages * 1e6


def measure_pieces(zk_connect: str, zk_pid: int) -> tuple[ScanPieces, list[PageReads]]:
    """Where a scan task's time goes, piece by piece (each event loop asyncio's, as in a
    Spark task), and ZooKeeper's page reads from one session at the walk's depth and at
    a deep pipeline."""
    reads = []
    stored: list[bytes] = []
    for depth in (WALK_PAGES_IN_FLIGHT, PROBE_PAGES_IN_FLIGHT):
        cpu_before = process_cpu_s(zk_pid)
        stored, seconds = asyncio.run(read_pages(zk_connect, depth))
        zookeeper_cpu_s = process_cpu_s(zk_pid) - cpu_before
        reads.append(PageReads(depth, len(stored), sum(map(len, stored)), seconds, zookeeper_cpu_s))
    pieces = cpu_pieces(stored)
    walked, walk_s = asyncio.run(walk(zk_connect, with_rows=False))
    walked_rows, walk_rows_s = asyncio.run(walk(zk_connect, with_rows=True))
    assert walked == walked_rows == pieces["records"], (walked, walked_rows, pieces)
    return ScanPieces(
        walk_s=walk_s,
        walk_rows_s=walk_rows_s,
        read_s=reads[0].seconds,
        task_setup_s=task_setup_s(zk_connect),
        **pieces,
    ), reads


@dataclass
class ScanRun:
    pages_per_task: int
    run: JobRun
    zookeeper_cpu_s: float  # the ZooKeeper server's CPU over the run

    @property
    def scan_s(self) -> float:
        """From the scan's start to the run's end: the driver's plan, the Spark tasks, the
        DataFrames and join, and a GC decision on a few ledgers (a dry run: nothing else)."""
        return float(self.run.report["finished"]) - self.run.phase_start("scan")

    @property
    def records_per_s(self) -> float:
        return int(self.run.report["records_scanned"]) / self.scan_s

    @property
    def scan_cpu_s(self) -> float:
        """CPU seconds of the run's processes over the scan phase."""
        run = self.run
        return run.cpu_at(float(run.report["finished"])) - run.cpu_at(run.phase_start("scan"))

    @property
    def cpu_bound_records_per_s(self) -> float:
        """The rate with the machine's cores all the scan's: records per CPU second of
        the scan phase, times the cores (ZooKeeper's CPU aside)."""
        cores = os.cpu_count() or 1
        return int(self.run.report["records_scanned"]) / self.scan_cpu_s * cores

    def scan_jobs(self) -> list[SparkJob]:
        """The Spark jobs of the scan phase (all of them, in a dry run of GC only)."""
        begin = self.run.phase_start("scan")
        return [j for j in self.run.jobs if j.started_s >= begin - 0.5]


@dataclass
class ScanResult:
    records: int
    pages: int
    ledgers: int
    load_s: float
    runs: list[ScanRun]
    pieces: ScanPieces
    page_reads: list[PageReads]

    @property
    def page_bytes(self) -> int:
        """Stored (compressed) bytes of all pages."""
        return self.page_reads[-1].stored_bytes

    @property
    def default_run(self) -> ScanRun:
        return next(r for r in self.runs if r.pages_per_task == PAGES_PER_TASK_DEFAULT)


def measure_scan(server: ZooKeeperServer, work: Path, sizes: Sizes) -> ScanResult:
    with Section(server, "scan", work) as section:
        print(f"scan: loading {sizes.records:,} records...", flush=True)
        ledgers, pages, load_s = uvloop.run(build_scan_catalog(section.zk, sizes))
        # First the pieces, one at a time in this process: their page reads also warm the
        # ZooKeeper server just started (its JIT, its memory), as a running ensemble is.
        pieces, page_reads = measure_pieces(section.zk, server.process.pid)
        print(f"scan: {pages:,} pages in {load_s:.1f} s; maintain --only gc --dry-run", flush=True)
        runs = []
        for pages_per_task in sizes.scan_pages_per_task:
            cpu_before = process_cpu_s(server.process.pid)
            run = run_job(
                section.zk, section.work, f"scan-{pages_per_task}",
                phases=["gc"], dry_run=True, pages_per_task=pages_per_task,
            )  # fmt: skip
            runs.append(
                ScanRun(pages_per_task, run, process_cpu_s(server.process.pid) - cpu_before)
            )
            print(
                f"scan, {pages_per_task} pages per task: {run.report['records_scanned']:,} "
                f"records in {runs[-1].scan_s:.1f} s ({runs[-1].records_per_s:,.0f}/s), "
                f"Spark start-up {run.spark_start_s:.1f} s",
                flush=True,
            )
    return ScanResult(sizes.records, pages, ledgers, load_s, runs, pieces, page_reads)


# --------------------------------------------------------------------------- compaction


@dataclass
class CompactionResult:
    ledgers: int
    data_bytes: int  # payload bytes of the sparse ledgers
    live_bytes: int
    write_s: float  # writing the sparse ledgers (one client, one ledger at a time)
    run: JobRun
    copy_start: float  # first new ledger created (its metadata's ctime)
    copy_end: float  # last new ledger closed (its znode's mtime)
    swap_end: float  # last index page written (the last swap)
    disk_mb_per_s: float

    @property
    def copied(self) -> int:
        return int(self.run.report["compaction_bytes_copied"])

    @property
    def copy_s(self) -> float:
        return self.copy_end - self.copy_start

    @property
    def phase_s(self) -> float:
        """From the first new ledger to the last swap: the copies and the swaps."""
        return max(self.copy_end, self.swap_end) - self.copy_start

    @property
    def mb_per_s(self) -> float:
        return self.copied / self.phase_s / 1e6

    @property
    def bound_mb_per_s(self) -> float:
        return self.disk_mb_per_s / (2 * WRITE_QUORUM)


def sparse_record(ledger_id: int, index: int, sizes: Sizes) -> ObjectRecord:
    """Object `index` of a sparse ledger (objects of whole 1 MiB entries, in order)."""
    entries = sizes.compact_object_bytes // MIB
    first = index * entries
    extent = Extent(ledger_id, first, first + entries - 1, sizes.compact_object_bytes, MIB)
    return ObjectRecord(
        BUCKET, f"objects/{ledger_id:08d}/{index:04d}", "null",
        size=sizes.compact_object_bytes, etag=f"{ledger_id:016x}{index:016x}",
        last_modified=time.time(), extents=(extent,),
    )  # fmt: skip


async def build_sparse_ledgers(zk_connect: str, sizes: Sizes) -> tuple[int, int, float]:
    """Closed ledgers of 1 MiB entries holding objects of `compact_object_bytes`, every
    other object referenced by a record (the rest garbage); returns (data bytes, live
    bytes, seconds the ledgers took to write)."""
    objects_per_ledger = sizes.compact_ledger_bytes // sizes.compact_object_bytes
    entry_count = objects_per_ledger * (sizes.compact_object_bytes // MIB)
    async with connected(zk_connect) as (zk, client):
        payloads = [os.urandom(MIB) for _ in range(8)]
        records = []
        started = time.monotonic()
        for _ in range(sizes.compact_ledgers):
            ledger_id = await write_ledger(client, payloads, entry_count)
            records += [sparse_record(ledger_id, i, sizes) for i in range(0, objects_per_ledger, 2)]
        write_s = time.monotonic() - started
        catalog = Catalog(zk, CatalogConfig())
        await catalog.start()
        try:
            await catalog.create_bucket(BUCKET, "bench")
            await catalog.bulk_load(BUCKET, sorted(records, key=lambda r: r.key))
        finally:
            await catalog.close()
    data = sizes.compact_ledgers * objects_per_ledger * sizes.compact_object_bytes
    return data, len(records) * sizes.compact_object_bytes, write_s


async def compaction_times(zk_connect: str) -> tuple[float, float, float]:
    """(first new ledger's creation, last new ledger's close, last index page write), in
    wall-clock seconds, read back from ZooKeeper after the run."""
    async with connected(zk_connect) as (zk, client):
        creations, closes = [], []
        for ledger_id in await client.list_ledger_ids():
            _, stat = await zk.get_with_stat(zk_layout.ledger_path(ledger_id))
            metadata = await client.get_metadata(ledger_id)
            if "compacted" in metadata.custom:
                creations.append(metadata.ctime)
                closes.append(stat.mtime / 1000)
        paths = await page_paths(Catalog(zk, CatalogConfig()), BUCKET)
        page_writes = [(await zk.get_with_stat(p))[1].mtime / 1000 for p in paths]
    assert creations, "the run compacted no ledger"
    return min(creations), max(closes), max(page_writes)


def measure_compaction(
    server: ZooKeeperServer, work: Path, sizes: Sizes, disk_mb_per_s: float
) -> CompactionResult:
    with Section(server, "compact", work) as section:
        print("compaction: writing sparse ledgers...", flush=True)
        data, live, write_s = uvloop.run(build_sparse_ledgers(section.zk, sizes))
        print(f"compaction: {data / MIB:,.0f} MiB, {live / MIB:,.0f} MiB live; maintain")
        run = run_job(
            section.zk, section.work, "compact",
            phases=["compact"], grace_s=0.0, bandwidth_mb_s=10_000.0,
            probe_tasks=sizes.spark_probe_tasks,
        )  # fmt: skip
        times = uvloop.run(compaction_times(section.zk))
    result = CompactionResult(
        sizes.compact_ledgers, data, live, write_s, run, *times, disk_mb_per_s
    )
    print(
        f"compaction: {result.copied / MIB:,.0f} MiB copied in {result.phase_s:.1f} s "
        f"({result.mb_per_s:,.0f} MB/s; disk bound {result.bound_mb_per_s:,.0f} MB/s)",
        flush=True,
    )
    return result


# --------------------------------------------------------------------------- bytes on bookies


@dataclass
class ReclaimResult:
    sizes: Sizes
    written_bytes: int  # payload bytes the workload wrote (aborted parts included)
    live_bytes: int
    before_bytes: int  # the bookies' ledger directories, checkpointed
    after_bytes: int
    journal_bytes: int
    run: JobRun

    @property
    def bound_bytes(self) -> int:
        return self.live_bytes * WRITE_QUORUM

    @property
    def ratio(self) -> float:
        return self.after_bytes / self.bound_bytes


def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=16,
        ),
    )


def delete_heavy(endpoint: str, sizes: Sizes) -> tuple[int, int]:
    """Put N objects, overwrite half of them, delete a quarter, abort three multipart
    uploads of two parts: (payload bytes written, live bytes)."""
    s3 = s3_client(endpoint)
    s3.create_bucket(Bucket=BUCKET)
    count, size = sizes.workload_objects, sizes.workload_object_bytes
    body = os.urandom(size)

    def put(i: int) -> None:
        s3.put_object(Bucket=BUCKET, Key=f"obj/{i:06d}", Body=body)

    def delete(i: int) -> None:
        s3.delete_object(Bucket=BUCKET, Key=f"obj/{i:06d}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))
        list(pool.map(put, range(0, count, 2)))
        list(pool.map(delete, range(1, count, 4)))
    part = os.urandom(sizes.aborted_part_bytes)
    for u in range(3):
        upload = s3.create_multipart_upload(Bucket=BUCKET, Key=f"aborted/{u}")["UploadId"]
        for number in (1, 2):
            s3.upload_part(
                Bucket=BUCKET, Key=f"aborted/{u}", UploadId=upload, PartNumber=number, Body=part
            )
        s3.abort_multipart_upload(Bucket=BUCKET, Key=f"aborted/{u}", UploadId=upload)
    written = (count + len(range(0, count, 2))) * size + 3 * 2 * len(part)
    live = (count - len(range(1, count, 4))) * size
    return written, live


def measure_reclaim(server: ZooKeeperServer, work: Path, sizes: Sizes) -> ReclaimResult:
    with Section(server, "reclaim", work) as section:
        endpoint = section.start_gateway(
            {"BLOBSTORE_LEDGER_BYTES_MAX": str(sizes.workload_ledger_bytes)}
        )
        print("bytes on bookies: delete-heavy workload...", flush=True)
        written, live = delete_heavy(endpoint, sizes)
        section.stop_gateway()
        section.checkpoint_bookies()
        before = section.ledger_dir_bytes()
        run = run_job(section.zk, section.work, "reclaim", grace_s=0.0)
        after = section.ledger_dir_bytes()
        journals = section.journal_bytes()
    result = ReclaimResult(sizes, written, live, before, after, journals, run)
    print(
        f"bytes on bookies: {before / MIB:,.0f} MiB before, {after / MIB:,.0f} MiB after; "
        f"live x WQ {result.bound_bytes / MIB:,.0f} MiB ({result.ratio:.2f}x)",
        flush=True,
    )
    return result


@dataclass
class TierRun:
    """One `maintain --only tier` moving objects to one tier."""

    run: JobRun
    tier_s: float  # the wall time of the tier phase's Spark jobs

    @property
    def bytes_written(self) -> int:
        return int(self.run.report["tier_bytes_written"])

    @property
    def mb_per_s(self) -> float:
        return self.bytes_written / self.tier_s / 1e6 if self.tier_s else 0.0


@dataclass
class TieringResult:
    sizes: Sizes
    file_tier: TierRun
    s3_tier: TierRun
    get_mb_s: dict[str, list[float]]  # "hot", "file", "s3" -> per round

    @property
    def mb_per_s(self) -> float:
        return self.file_tier.mb_per_s

    def get_ratio(self, tier: str) -> float:
        """Median GET from `tier` over median hot GET."""
        hot = statistics.median(self.get_mb_s["hot"])
        return statistics.median(self.get_mb_s[tier]) / hot if hot else 0.0


TIER_PREFIXES = {"hot": "hot/", "file": "cold/", "s3": "remote/"}


def get_mb_s(s3: Any, keys: list[str], size: int) -> float:
    """GETs of `keys`, TIER_GET_THREADS in flight: MB/s."""

    def get(key: str) -> int:
        return len(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    started = time.monotonic()
    with ThreadPoolExecutor(TIER_GET_THREADS) as pool:
        got = sum(pool.map(get, keys))
    assert got == size * len(keys), (got, size * len(keys))
    return got / (time.monotonic() - started) / 1e6


def tier_rule(prefix: str, storage_class: str) -> dict[str, Any]:
    return {
        "ID": prefix.strip("/"),
        "Status": "Enabled",
        "Filter": {"Prefix": prefix},
        "Transitions": [{"Days": 0, "StorageClass": storage_class}],
    }


def tier_workload(section: Section, remote: str, s3: Any, sizes: Sizes) -> None:
    """Objects under each of TIER_PREFIXES; a file tier (GLACIER) and an S3 tier
    (DEEP_ARCHIVE: a bucket of the remote cluster's gateway)."""
    s3.create_bucket(Bucket=BUCKET)
    body = os.urandom(sizes.tier_object_bytes)
    keys = [f"{p}{i:05d}" for p in TIER_PREFIXES.values() for i in range(sizes.tier_objects)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=BUCKET, Key=key, Body=body), keys))
    s3_client(remote).create_bucket(Bucket="tier")
    admin = cli("admin", "--zk", section.zk, "tier", "add")
    tier = section.work / "tier"
    for command in (
        [*admin, "FILE", f"file://{tier}", "--storage-class", "GLACIER"],
        [*admin, "REMOTE", "s3://tier/bench", "--endpoint", remote, "--access-key", ACCESS_KEY,
         "--storage-class", "DEEP_ARCHIVE"],
    ):  # fmt: skip
        env = {**os.environ, "BLOBSTORE_TIER_SECRET_KEY": SECRET_KEY}
        subprocess.run(command, check=True, capture_output=True, env=env)


def tier_run(section: Section, s3: Any, name: str, rules: list[dict[str, Any]]) -> TierRun:
    s3.put_bucket_lifecycle_configuration(Bucket=BUCKET, LifecycleConfiguration={"Rules": rules})
    run = run_job(section.zk, section.work, name, phases=["tier"], now=time.time() + 2 * DAY_S)
    return TierRun(run, sum(j.ended_s - j.started_s for j in jobs_of(run, "_run_tiering")))


def measure_tiering(server: ZooKeeperServer, work: Path, sizes: Sizes) -> TieringResult:
    key_file = work / "cluster.key"
    if not key_file.exists():
        write_cluster_key_file(key_file)
    os.environ[CLUSTER_KEY_FILE_ENV] = str(key_file)  # the gateways, admin and the job
    with Section(server, "tiering-remote", work) as remote_section:
        remote = remote_section.start_gateway({})
        with Section(server, "tiering", work) as section:
            s3 = s3_client(section.start_gateway({}))
            print("tiering: objects...", flush=True)
            tier_workload(section, remote, s3, sizes)
            file_rule = tier_rule(TIER_PREFIXES["file"], "GLACIER")
            file_tier = tier_run(section, s3, "tiering-file", [file_rule])
            s3_rule = tier_rule(TIER_PREFIXES["s3"], "DEEP_ARCHIVE")
            s3_tier = tier_run(section, s3, "tiering-s3", [file_rule, s3_rule])
            gets: dict[str, list[float]] = {name: [] for name in TIER_PREFIXES}
            for _ in range(TIER_GET_ROUNDS):
                for name, prefix in TIER_PREFIXES.items():
                    keys = [f"{prefix}{i:05d}" for i in range(sizes.tier_objects)]
                    gets[name].append(get_mb_s(s3, keys, sizes.tier_object_bytes))
    result = TieringResult(sizes, file_tier, s3_tier, gets)
    print(
        f"tiering: file {file_tier.mb_per_s:,.0f} MB/s, S3 {s3_tier.mb_per_s:,.0f} MB/s; "
        f"GET MB/s {gets}",
        flush=True,
    )
    return result


# --------------------------------------------------------------------------- runs


@dataclass
class Limits:
    fsync_per_s: float
    disk_mb_per_s: float
    loopback_mb_per_s: float


def measure_limits(work: Path, quick: bool) -> Limits:
    seconds = 1.0 if quick else 3.0
    limits = Limits(
        fsync_rate_4k(work, seconds),
        sequential_mb_per_s(work, seconds),
        loopback_probe(128 if quick else 512)[0],
    )
    print(
        f"limits: fsync {limits.fsync_per_s:,.0f}/s, sequential {limits.disk_mb_per_s:,.0f} "
        f"MB/s, loopback {limits.loopback_mb_per_s:,.0f} MB/s",
        flush=True,
    )
    return limits


@dataclass
class Results:
    sizes: Sizes
    quick: bool
    limits: Limits
    scan: ScanResult
    compaction: CompactionResult
    reclaim: ReclaimResult
    tiering: TieringResult
    load: tuple[float, float]  # load average before, after
    seconds: float

    @property
    def spark_probe(self) -> SparkProbe:
        probe = self.compaction.run.probe
        assert probe is not None, "the compaction's run measures Spark's cost per task"
        return probe


def run_all(sizes: Sizes, quick: bool) -> Results:
    """Every measurement: one after the other, or (quick) all at once."""
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="maintenance-bench-"))
    server = None
    try:
        limits = measure_limits(work, quick)
        server = start_zookeeper(work / "zookeeper", free_port(), heap_mb=1024)
        measures: list[Callable[[], Any]] = [
            lambda: measure_scan(server, work, sizes),
            lambda: measure_compaction(server, work, sizes, limits.disk_mb_per_s),
            lambda: measure_reclaim(server, work, sizes),
            lambda: measure_tiering(server, work, sizes),
        ]
        if quick:
            with ThreadPoolExecutor(len(measures)) as pool:
                futures = [pool.submit(measure) for measure in measures]
                scan_result, compaction, reclaim, tiering = [f.result() for f in futures]
        else:
            scan_result, compaction, reclaim, tiering = [measure() for measure in measures]
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return Results(
        sizes, quick, limits, scan_result, compaction, reclaim, tiering,
        (load_before, os.getloadavg()[0]), time.monotonic() - started,
    )  # fmt: skip


# --------------------------------------------------------------------------- report


def size_text(value: float) -> str:
    """Bytes in MiB, or in KiB below one MiB."""
    return f"{value / MIB:,.1f} MiB" if value >= MIB else f"{value / KIB:,.0f} KiB"


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(row) + " |" for row in rows],
    ]


def report_head(results: Results) -> list[str]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    how = (
        "small sizes, the three measurements at once (`--quick`: figures not to be read)"
        if results.quick
        else "full sizes, one measurement after the other"
    )
    return [
        "# Maintenance job benchmark",
        "",
        f"Generated by `python -m bench.maintenance_bench` on {now} ({platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}), {how}, in "
        f"{results.seconds / 60:.0f} min. One ZooKeeper server; each measurement on a "
        "cluster of its own (a chroot, three fresh bookies, E3/WQ2/AQ2 ledgers); each run of "
        "the job is a child process running Spark `local[*]` as `blobstore maintain` does. "
        "Everything shares the machine's cores and its one disk. Load average before / "
        f"after: {results.load[0]:.1f} / {results.load[1]:.1f} (other work on the machine "
        "competes for the same cores: figures are lower bounds).",
        "",
    ]


def limits_section(results: Results) -> list[str]:
    limits = results.limits
    spark = results.spark_probe
    rows = [
        ("sequential 4 MiB write + fdatasync", f"{limits.disk_mb_per_s:,.0f} MB/s", ""),
        ("4 KiB write + fdatasync", f"{limits.fsync_per_s:,.0f} /s", ""),
        ("loopback TCP, one connection", f"{limits.loopback_mb_per_s:,.0f} MB/s", ""),
    ]
    for reads in results.scan.page_reads:
        rows.append((
            f"ZooKeeper page reads, one session, {reads.depth} in flight",
            f"{reads.pages_per_s:,.0f} pages/s",
            f"{reads.stored_bytes / reads.seconds / 1e6:,.1f} MB/s; the server's CPU: "
            f"{reads.zookeeper_us_per_page:,.0f} µs per page read",
        ))  # fmt: skip
    rows += [
        (
            "an empty Python task, `local[*]`",
            f"{spark.ms_per_task:,.0f} ms",
            f"wall time per task of a job of {spark.tasks} (`mapPartitions` returning "
            "nothing), in a session of the compaction run's JVM after the run, its Python "
            "workers started and reused: Spark's own cost per task here",
        ),
    ]
    return ["## Machine limits (same run)", "", *table(("probe", "result", "notes"), rows), ""]


def scan_section(result: ScanResult) -> list[str]:
    rows = []
    for scan_run in result.runs:
        report = scan_run.run.report
        records = int(report["records_scanned"])
        rows.append((
            f"{scan_run.pages_per_task:,}" + (" (default)" if scan_run.pages_per_task
                                               == PAGES_PER_TASK_DEFAULT else ""),
            f"{report['tasks']:,}",
            f"{records:,}",
            f"{scan_run.run.spark_start_s:.1f}",
            f"{scan_run.scan_s:.1f}",
            f"**{scan_run.records_per_s:,.0f}**",
            f"{scan_run.scan_cpu_s:,.0f} ({scan_run.scan_cpu_s / records * 1e6:,.0f} µs)",
            f"{scan_run.cpu_bound_records_per_s:,.0f}",
            f"{scan_run.zookeeper_cpu_s:,.1f}",
        ))  # fmt: skip
    header = (
        "pages per task", "tasks", "records scanned", "Spark start-up s", "scan phase s",
        "records/s", "scan phase CPU s (per record)", "records/s, CPU-bound",
        "ZooKeeper CPU s (whole run)",
    )  # fmt: skip
    stored_kib = result.page_bytes / result.pages / KIB
    return [
        "## Scan",
        "",
        f"{result.records:,} records (4 KiB objects as a gateway commits them: one extent, "
        f"an ETag, a CRC32, keys of 1,000 per directory) bulk-loaded into {result.pages:,} "
        f"index pages ({result.records / result.pages:,.0f} records and {stored_kib:.1f} KiB "
        f"stored per page, {result.page_bytes / 1e6:,.1f} MB in all) in {result.load_s:.1f} "
        f"s; their extents name {result.ledgers} real closed ledgers. The pieces below are "
        "measured first: their reads of every page warm the ZooKeeper server, started for "
        "this run, as a running ensemble is warm. Then `maintain --only gc "
        "--dry-run --pages-per-task N`, in this order. *Spark start-up* runs from the run's start to its "
        "scan's (the first progress call): the lock, the catalog and, most of it, Spark's "
        "start (a JVM, a SparkContext); the *scan phase* from there to the run's end: the "
        "driver's plan, the Spark tasks, the DataFrames and their join (a dry run of GC adds "
        "a decision on a few ledgers). *Scan phase CPU* is the driver's, the JVM's and the "
        "Python workers' together over the scan phase (sampled from /proc); the "
        "*CPU-bound* rate is records per CPU second times the machine's "
        f"{os.cpu_count()} cores: what the scan would reach with the cores all its own "
        "(other work on the machine stretches the wall-clock rate, hardly its CPU).",
        "",
        *table(header, rows),
        "",
    ]


def jobs_section(scan_run: ScanRun, records: int) -> list[str]:
    """The Spark jobs of one scan run's scan phase, by call site."""
    groups: dict[str, list[SparkJob]] = {}
    for job in scan_run.scan_jobs():
        groups.setdefault(job.call_site, []).append(job)
    rows = []
    intervals = []
    for site, jobs in groups.items():
        spans = [(j.started_s, j.ended_s) for j in jobs]
        intervals += spans
        task_s = sum(j.task_s for j in jobs)
        rows.append((
            call_site_label(site), str(len(jobs)), f"{sum(j.tasks for j in jobs):,}",
            f"{union_s(spans):.1f}", f"{task_s:.1f}", f"{task_s / records * 1e6:.1f}",
        ))  # fmt: skip
    outside = scan_run.scan_s - union_s(intervals)
    rows.append(("the driver, between jobs", "", "", f"{outside:.1f}", "", ""))
    header = ("call site", "jobs", "tasks", "wall s", "task time s", "task µs per record")
    return [
        f"### The scan phase's Spark jobs, {scan_run.pages_per_task:,} pages per task",
        "",
        "From Spark's event log of the run: the jobs the scan phase started, by the line "
        "that started them; *wall* is the time they ran (overlapping jobs counted once), "
        "*task time* the sum of their tasks' durations (two run at a time here).",
        "",
        *table(header, rows),
        "",
    ]


def pieces_section(result: ScanResult) -> list[str]:
    pieces = result.pieces
    per = pieces.us_per_record
    rows = [
        ("the walk (`Catalog.iter_key_runs`, one session)", pieces.walk_s),
        ("the walk and the task's rows (`scan.version_rows`): a scan task's work",
         pieces.walk_rows_s),
        (f"of which: page reads alone ({WALK_PAGES_IN_FLIGHT} in flight)", pieces.read_s),
        ("of which: page decode (`IndexPage.decode`)", pieces.decode_s),
        ("of which: versions (a page's lines in one JSON call, a `VersionRefs` each)",
         pieces.refs_s),
        ("of which: rows (`scan.version_rows`)", pieces.rows_s),
        ("for comparison: an `ObjectRecord` per version instead (`IndexPage.records`)",
         pieces.records_s),
        (f"pickling the rows (batches of {PICKLE_BATCH_ROWS:,}), as a Python worker ships "
         "them to the JVM", pieces.pickle_s),
    ]  # fmt: skip
    lines = [
        "### Where a scan task's time goes",
        "",
        "A scan task's work done in this process over the same catalog after the runs, one "
        "piece at a time (asyncio's event loop, as in a Spark task): µs per record, and the "
        "rate one core would reach on that piece alone.",
        "",
    ]
    table_rows = [(name, f"{per(s):.1f}", f"{1e6 / max(per(s), 1e-9):,.0f}") for name, s in rows]
    table_rows.append((
        "one task's set-up and end (ZooKeeper session, ledger client, sync, close)",
        f"{pieces.task_setup_s * 1000:.0f} ms per task", "",
    ))  # fmt: skip
    table_rows.append(
        ("pickled rows", f"{pieces.pickled_bytes / pieces.records:.0f} bytes per record", "")
    )
    return [*lines, *table(("piece", "µs per record", "records/s, one core"), table_rows), ""]


def why_section(results: Results) -> list[str]:
    """What the default scan run's time went to, from its Spark jobs and the pieces."""
    scan_result = results.scan
    scan_run = scan_result.default_run
    records = int(scan_run.run.report["records_scanned"])
    tasks = int(scan_run.run.report["tasks"])
    first, *later = scan_run.scan_jobs()
    per = scan_result.pieces.us_per_record
    work_us = per(scan_result.pieces.walk_rows_s)
    first_us = first.task_s / records * 1e6
    spark_own_s = first.tasks * results.spark_probe.ms_per_task / 1000
    later_s = sum(job.task_s for job in later)
    lines = [
        "### Where the scan phase's time goes",
        "",
        f"The default run's scan phase took {scan_run.scan_s:.1f} s for {records:,} records: "
        f"{tasks:,} scan tasks dealt into {first.tasks:,} Spark partitions; its Spark jobs' "
        f"tasks add up to {sum(j.task_s for j in scan_run.scan_jobs()):.0f} s on "
        f"{os.cpu_count()} cores.",
        "",
        f"1. **The scan job** (the first: it runs the tasks and fills the DataFrame's "
        f"cache): {first_us:.0f} µs of task time per record, where a task's walk and rows "
        f"in one process take {work_us:.0f} µs. The rest: two tasks share two cores with "
        "ZooKeeper and the JVM, the rows' way into the JVM (object extents packed, a row "
        "per ledger and partition), the Python workers' start and Spark's own cost per "
        f"task ({spark_own_s:.1f} s for {first.tasks:,} empty tasks here).",
        f"2. **The jobs after it** (the per-ledger join over the cached DataFrame, in the "
        f"JVM): {later_s:.1f} s of task time ({later_s / records * 1e6:.1f} µs per "
        "record).",
    ]
    lines += [
        f"3. With {other.pages_per_task:,} pages per task ({other.run.report['tasks']:,} "
        f"tasks) the same scan ran at {other.records_per_s:,.0f} records/s."
        for other in scan_result.runs
        if other is not scan_run
    ]
    return [*lines, ""]


def compaction_section(result: CompactionResult) -> list[str]:
    report = result.run.report
    rows = [
        ("ledgers compacted", f"{report['compacted_ledgers']}"),
        ("bytes copied", size_text(result.copied)),
        ("records swapped", f"{report['records_swapped']}"),
        ("run, start to finish", f"{result.run.total_s:.1f} s"),
        ("copies (first new ledger created to last closed)", f"{result.copy_s:.2f} s"),
        ("compaction (first new ledger created to last swap)", f"{result.phase_s:.2f} s"),
        ("**copy rate** (bytes copied / compaction)", f"**{result.mb_per_s:,.0f} MB/s**"),
        ("disk bound: sequential write / (2 x WQ)", f"{result.bound_mb_per_s:,.0f} MB/s"),
        (
            "writing the sparse ledgers, for comparison (one client, pipelined 1 MiB adds)",
            f"{result.data_bytes / result.write_s / 1e6:,.0f} MB/s",
        ),
    ]
    spark_jobs = jobs_of(result.run, "_run_compaction")
    if spark_jobs:
        rows.insert(6, (
            "the compaction's Spark job (its tasks' start and set-up included)",
            f"{union_s([(j.started_s, j.ended_s) for j in spark_jobs]):.2f} s, "
            f"{sum(j.tasks for j in spark_jobs)} tasks",
        ))  # fmt: skip
    journals_mb_per_s = WRITE_QUORUM * result.mb_per_s
    return [
        "## Compaction copy",
        "",
        f"{result.ledgers} closed ledgers of "
        f"{size_text(result.data_bytes / result.ledgers)} (1 MiB "
        f"entries), {size_text(result.data_bytes)} in all, holding objects of equal size, every "
        f"other one referenced ({size_text(result.live_bytes)} live, the rest garbage). `maintain "
        "--only compact --grace 0 --bandwidth 10000`. The compaction's span is read back "
        "from ZooKeeper: the new ledgers' creation times and close times, and the index "
        "pages' last writes (the swaps). Each copied byte is written WQ times to the "
        "bookies' journals and WQ times again to their entry logs, all on the one disk "
        "here: sequential write / (2 x WQ) bounds the copy.",
        "",
        *table(("measure", "result"), rows),
        "",
        f"Within the span the journals take WQ x the copy rate, {journals_mb_per_s:,.0f} MB/s "
        f"({journals_mb_per_s / result.disk_mb_per_s:.0%} of the sequential write); the "
        "entry-log writes of the same bytes follow at each bookie's checkpoint (every 10 s, "
        "or when its 64 MiB write cache is half full), partly after a span of a few "
        "seconds: a short copy can run above the bound, which holds for a long one.",
        "",
    ]


def jobs_of(run: JobRun, function: str) -> list[SparkJob]:
    """The run's Spark jobs started from `function` (their call site's enclosing def)."""
    return [j for j in run.jobs if call_site_label(j.call_site).startswith(f"`{function}`")]


def reclaim_section(result: ReclaimResult) -> list[str]:
    report = result.run.report
    sizes = result.sizes
    rows = [
        ("bookies' ledger directories before", size_text(result.before_bytes)),
        ("ledgers deleted / compacted", f"{report['ledgers_deleted']} / "
         f"{report['compacted_ledgers']}"),
        ("bookies' ledger directories after", size_text(result.after_bytes)),
        ("live bytes x WQ", size_text(result.bound_bytes)),
        ("**after / (live x WQ)**", f"**{result.ratio:.2f}**"),
        ("run, start to finish", f"{result.run.total_s:.1f} s"),
        ("journals (not counted: preallocated, reused)", size_text(result.journal_bytes)),
    ]  # fmt: skip
    return [
        "## Bytes on bookies",
        "",
        f"Through the gateway (writer ledgers closed at {size_text(sizes.workload_ledger_bytes)}): "
        f"{sizes.workload_objects:,} objects of {size_text(sizes.workload_object_bytes)} put, half "
        "of them overwritten, a quarter deleted, three multipart uploads of two parts of "
        f"{size_text(sizes.aborted_part_bytes)} aborted: "
        f"{size_text(result.written_bytes)} of payload "
        f"written, {size_text(result.live_bytes)} "
        "live. The gateway is stopped (it closes its writer ledgers) and the bookies "
        "checkpointed (their write caches in their entry logs), then one `maintain --grace "
        "0` (which asks the bookies for their GC pass). Bytes are the files under the "
        "bookies' ledger directories: entry logs and their index.",
        "",
        *table(("measure", "result"), rows),
        "",
    ]


def tiering_section(results: Results) -> list[str]:
    result = results.tiering
    sizes = result.sizes

    def rounds(name: str) -> str:
        return ", ".join(f"{v:,.0f}" for v in result.get_mb_s[name])

    rows = [
        ("file tier: bytes written (segments) / objects",
         f"{size_text(result.file_tier.bytes_written)} / "
         f"{result.file_tier.run.report['objects_tiered']:,}"),
        ("file tier: the tier phase's Spark jobs (write, verify, swap)",
         f"{result.file_tier.tier_s:.1f} s"),
        ("**file tier: tiering**", f"**{result.file_tier.mb_per_s:,.0f} MB/s**"),
        ("sequential write + fdatasync (same run)", f"{results.limits.disk_mb_per_s:,.0f} MB/s"),
        ("S3 tier: bytes written / Spark jobs", f"{size_text(result.s3_tier.bytes_written)} / "
         f"{result.s3_tier.tier_s:.1f} s"),
        ("S3 tier: tiering", f"{result.s3_tier.mb_per_s:,.0f} MB/s"),
        (f"GET MB/s, hot, {TIER_GET_ROUNDS} rounds", rounds("hot")),
        ("GET MB/s, file tier", rounds("file")),
        ("GET MB/s, S3 tier", rounds("s3")),
        ("**file-tier GET / hot GET (medians)**", f"**{result.get_ratio('file'):.2f}**"),
        ("S3-tier GET / hot GET (medians)", f"{result.get_ratio('s3'):.2f}"),
    ]  # fmt: skip
    return [
        "## Tiering",
        "",
        f"Through the gateway: {sizes.tier_objects:,} objects of "
        f"{size_text(sizes.tier_object_bytes)} under each of `hot/`, `cold/` and `remote/`. "
        "Two tiers: a file tier on the same disk as the bookies (GLACIER), and an S3 tier "
        "whose remote is a second cluster (three bookies and a gateway on the same machine, "
        "DEEP_ARCHIVE). `maintain --only tier` moves `cold/` to the file tier, then a second "
        "run `remote/` to the S3 tier (Transition rules, Days 0). Throughput is the bytes "
        "of the segments written over the wall time of the phase's Spark jobs: each task "
        "reads the objects from the bookies, writes the segment, reads it back whole to "
        "verify it and swaps the records. Then GETs through boto3 "
        f"({TIER_GET_THREADS} in flight), hot, file tier and S3 tier in turn, "
        f"{TIER_GET_ROUNDS} rounds.",
        "",
        *table(("measure", "result"), rows),
        "",
    ]


def aims_section(results: Results) -> list[str]:
    scan_rate = results.scan.default_run.records_per_s
    copy = results.compaction
    copy_aim = COPY_AIM_FRACTION * copy.bound_mb_per_s
    ratio = results.reclaim.ratio
    tiering = results.tiering
    tier_aim = TIERING_AIM_FRACTION * results.limits.disk_mb_per_s
    rows = [
        (
            f"scan >= {SCAN_AIM_RECORDS_PER_S:,.0f} records/s (default pages per task)",
            f"{scan_rate:,.0f} records/s",
            f"{scan_rate / SCAN_AIM_RECORDS_PER_S:.2f}",
        ),
        (
            f"compaction copy >= {COPY_AIM_FRACTION:.0%} of sequential write / (2 x WQ) = "
            f"{copy_aim:,.0f} MB/s",
            f"{copy.mb_per_s:,.0f} MB/s",
            f"{copy.mb_per_s / copy_aim:.2f}",
        ),
        (
            f"bytes on bookies after one run <= {BOOKIE_BYTES_AIM} x live x WQ "
            "(ratio = aim / measured)",
            f"{ratio:.2f} x",
            f"{BOOKIE_BYTES_AIM / ratio:.2f}",
        ),
        (
            f"tiering >= {TIERING_AIM_FRACTION:.0%} of sequential write = {tier_aim:,.0f} MB/s",
            f"{tiering.mb_per_s:,.0f} MB/s",
            f"{tiering.mb_per_s / tier_aim:.2f}",
        ),
        (
            f"GET from a file tier >= {TIER_GET_AIM_FRACTION:.0%} of a hot GET",
            f"{tiering.get_ratio('file'):.2f}",
            f"{tiering.get_ratio('file') / TIER_GET_AIM_FRACTION:.2f}",
        ),
    ]
    return [
        "## Against the aims (ratio >= 1 meets it)",
        "",
        *table(("aim", "measured", "ratio"), rows),
        "",
    ]


SCALE_RECORDS = 100_000_000
SCALE_CORES = (16, 64, 256)
ENSEMBLE_SERVERS = 5


@dataclass(frozen=True, slots=True)
class Scale:
    """A scan of SCALE_RECORDS records, from this run's figures."""

    per_page: float  # records per index page
    page_bytes: float  # stored bytes per page
    work_us: float  # a scan task's work per record (the pieces' walk and rows)
    setup_s: float  # a scan task's set-up and end
    zookeeper_us: float  # the ZooKeeper server's CPU per page read
    today_us: float  # the default scan run's core time per record

    @property
    def pages(self) -> float:
        return SCALE_RECORDS / self.per_page

    @property
    def tasks(self) -> float:
        return self.pages / PAGES_PER_TASK_DEFAULT

    @property
    def core_pages_per_s(self) -> float:
        """Page reads per second of one executor core walking at the task's pace."""
        return 1e6 / (self.work_us * self.per_page)

    def zookeeper_cores(self, cores: int) -> float:
        return cores * self.core_pages_per_s * self.zookeeper_us / 1e6

    def row(self, cores: int) -> tuple[str, ...]:
        reads_per_s = cores * self.core_pages_per_s
        work_s = SCALE_RECORDS * self.work_us / 1e6 + self.tasks * self.setup_s
        return (
            f"{cores}",
            f"{SCALE_RECORDS * self.today_us / 1e6 / cores / 60:,.0f} min",
            f"{work_s / cores / 60:,.1f} min",
            f"{reads_per_s:,.0f}",
            f"{reads_per_s * self.page_bytes / 1e6:,.0f}",
            f"{self.zookeeper_cores(cores):,.1f}",
        )


def scale_of(results: Results) -> Scale:
    scan_result = results.scan
    pieces = scan_result.pieces
    default = scan_result.default_run
    records = int(default.run.report["records_scanned"])
    return Scale(
        per_page=scan_result.records / scan_result.pages,
        page_bytes=scan_result.page_bytes / scan_result.pages,
        work_us=pieces.us_per_record(pieces.walk_rows_s),
        setup_s=pieces.task_setup_s,
        zookeeper_us=scan_result.page_reads[-1].zookeeper_us_per_page,
        today_us=default.scan_s * (os.cpu_count() or 1) / records * 1e6,
    )


def scale_section(results: Results) -> list[str]:
    """The arithmetic of a 100 M-object scan on a Spark cluster, from this run's figures."""
    scale = scale_of(results)
    header = (
        "executor cores", "scan, today's cost per record", "scan, the task's work alone",
        "ZooKeeper page reads/s", "ZooKeeper MB/s sent", "ZooKeeper cores busy",
    )  # fmt: skip
    most = SCALE_CORES[-1]
    return [
        "## A 100 M-object catalog on a Spark cluster",
        "",
        f"Pages hold {scale.per_page:,.0f} records here and {scale.page_bytes / KIB:.1f} KiB "
        f"stored (zlib), so {SCALE_RECORDS / 1e6:,.0f} M records are "
        f"{scale.pages / 1e6:.2f} M pages, {scale.pages * scale.page_bytes / 1e9:.1f} GB of "
        "page reads (records without checksums pack to ~1.6 KiB a page: 0.7-1 M pages, "
        f"1-1.6 GB). At {PAGES_PER_TASK_DEFAULT} pages per task that is {scale.tasks:,.0f} "
        "Spark tasks, each with its own ZooKeeper session: a `sync` (through the leader), "
        f"the bucket's root map and shards, then its {PAGES_PER_TASK_DEFAULT} pages, read "
        "from whichever server the session reached (followers serve reads: reads scale with "
        f"the ensemble, writes do not). Opening and closing {scale.tasks:,.0f} sessions are "
        f"{2 * scale.tasks:,.0f} writes through the quorum, against ~3,200 pipelined "
        "creates/s on this machine's one server ([catalog.md](catalog.md)): seconds of "
        "write capacity, spread over the scan.",
        "",
        f"A task walks at {1e6 / scale.work_us:,.0f} records/s per core (its work alone, "
        f"above): {scale.core_pages_per_s:,.0f} page reads/s per executor core. The "
        f"ZooKeeper server spent {scale.zookeeper_us:,.0f} µs of CPU per page read (above, one "
        f"session, {PROBE_PAGES_IN_FLIGHT} in flight): one ZooKeeper core serves the reads of "
        f"{1e6 / scale.zookeeper_us / scale.core_pages_per_s:,.0f} executor cores. For "
        "comparison: one session here lists 76,556 keys/s (~600 pages/s, bound by the "
        "client) behind a 0.42 ms round trip ([catalog.md](catalog.md)); the ZooKeeper "
        "paper (Hunt et al., USENIX ATC 2010, table 1) measured about 87,000 reads/s of "
        "1 KiB on 3 servers and 460,000 on 13 (the leader serving no client), 30-45,000 "
        "reads/s per server on 2010 hardware. *Today's cost per record* is this run's scan "
        f"phase x {os.cpu_count()} cores / records ({scale.today_us:,.0f} µs: Spark's "
        "per-task and per-pass costs included, as on this machine); *the task's work alone* "
        f"adds each task's set-up ({scale.setup_s * 1000:.0f} ms) to the walk:",
        "",
        *table(header, [scale.row(cores) for cores in SCALE_CORES]),
        "",
        f"At {most} executor cores the page reads ask {scale.zookeeper_cores(most):,.1f} "
        "ZooKeeper cores in all, spread over the servers the sessions reached "
        f"({scale.zookeeper_cores(most) / ENSEMBLE_SERVERS:,.1f} per server of a "
        f"{ENSEMBLE_SERVERS}-server ensemble). The executors' CPU per record is what bounds "
        "the scan: most of it is the task's own walk, which grows with the catalog, as "
        "the executors do; Spark's costs per task and per job (above) do not.",
        "",
    ]


def write_report(output: Path, results: Results) -> str:
    lines = [
        *report_head(results),
        *limits_section(results),
        *scan_section(results.scan),
        *[
            line
            for scan_run in results.scan.runs
            for line in jobs_section(scan_run, int(scan_run.run.report["records_scanned"]))
        ],
        *pieces_section(results.scan),
        *why_section(results),
        *compaction_section(results.compaction),
        *reclaim_section(results.reclaim),
        *tiering_section(results),
        *aims_section(results),
        *scale_section(results),
    ]
    text = "\n".join(lines)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    return text


# --------------------------------------------------------------------------- main


def stop_on_sigterm() -> None:
    """SIGTERM (a test's timeout) unwinds the run as Ctrl-C does: its clusters are
    stopped and their data removed on the way out."""

    def interrupted(_signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the cleanup finish
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=None, help="catalog records scanned")
    parser.add_argument("--quick", action="store_true", help="small sizes, all at once")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "maintenance.md"))
    # The child: one run of the job.
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--job-result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        return job_child(args.job, args.job_result)
    stop_on_sigterm()
    sizes = QUICK if args.quick else FULL
    if args.records is not None:
        sizes = Sizes(**{**asdict(sizes), "records": args.records})
    results = run_all(sizes, args.quick)
    print(write_report(Path(args.output), results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
