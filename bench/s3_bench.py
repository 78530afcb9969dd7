"""S3 gateway benchmark (warp-like) against a real local cluster (ZooKeeper, 3 bookies, the
gateway), driven by the asyncio load generator of `bench/s3_load.py`, beside the machine's
limits and the generator's own ceiling measured in the same run.

    .venv/bin/python -m bench.s3_bench [--duration 8] [--workers N] [--output docs/benchmarks/s3.md]
    .venv/bin/python -m bench.s3_bench --serve        # start the cluster, print the endpoint, wait

Phases: 4 KiB PUT and GET (concurrency 16), 16 MiB PUT and GET (concurrency 4), one 256 MiB
multipart upload (16 MiB parts, 4 in parallel), random 1 MiB ranged GETs (concurrency 16),
listing 5,000 keys (1000-key pages), DeleteObjects (1000-key batches). Each phase reports
ops/s, MB/s (MiB/s), p50/p99 latency and the generator's CPU per operation. Machine limits:
journal-disk write+fdatasync rate, sequential write+fsync bandwidth, loopback TCP bandwidth,
MD5/SHA256/CRC32C/CRC64NVME speed. Writes docs/benchmarks/s3.md. Not a test: no assertion
on speed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import crc32c
from awscrt import checksums

from bench.ledger_bench import round_trip_rows, sequential_mb_per_s
from bench.s3_load import (
    HttpConnection,
    Op,
    OpFactory,
    PhaseResult,
    S3Client,
    create_bucket,
    delete_objects_op,
    get_op,
    list_op,
    measure_ceiling,
    multipart_op,
    put_op,
    run_phase,
)
from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, start_zookeeper

ROOT = Path(__file__).resolve().parent.parent
ACCESS_KEY = "bench-access-key"
SECRET_KEY = "bench-secret-key"
BUCKET = "bench"
PACED_PUT_RATE = 1000.0
# Untimed 4 KiB PUTs first, so that the first timed phase does not pay for a freshly
# started cluster: ZooKeeper's JIT compiles its request path in the first tens of seconds
# under load (halving its CPU per request), and the writer ledgers, the index page's first
# splits and the workers' caches are set up.
WARM_UP_S = 30.0
# The second gateway measured on the same cluster warms only its own caches and ledgers.
WARM_UP_AGAIN_S = 10.0
PACED_PUT = "put 4KiB paced"
PACED_PUT_RUNS = 3
SCATTERED_PUT = "put 4KiB scattered keys"
KIB = 1 << 10
MIB = 1 << 20
READY_TIMEOUT_S = 90.0
LIST_KEYS = 5000
RANDOM_SEED = 1  # GETs pick their objects at random, the same sequence every run

# Ceph RADOS Gateway, single node, 3 OSDs, replication 3, on this kind of machine.
RGW = {
    "put 4KiB": "250/s, p99 130 ms",
    SCATTERED_PUT: "250/s, p99 130 ms",
    "get 4KiB": "345/s",
    "put 16MiB": "115 MB/s",
    "get 16MiB": "385 MB/s",
    "multipart 256MiB": "120 MB/s",
    "get 1MiB range": "310/s",
    "list 5000 keys": "12,000 keys/s",
    "delete-objects": "400 keys/s",
}


# --------------------------------------------------------------------------- machine limits


def hash_mb_s(update: Callable[[bytes], object], seconds: float = 0.5) -> float:
    block = os.urandom(MIB)
    count = 0
    started = time.monotonic()
    deadline = started + seconds
    while time.monotonic() < deadline:
        update(block)
        count += 1
    return count / (time.monotonic() - started)


def hashing_limits() -> list[tuple[str, float]]:
    md5 = hashlib.md5()
    sha = hashlib.sha256()
    state = {"crc32c": 0, "crc64": 0}

    def crc32c_update(block: bytes) -> None:
        state["crc32c"] = crc32c.crc32c(block, state["crc32c"])

    def crc64_update(block: bytes) -> None:
        state["crc64"] = checksums.crc64nvme(block, state["crc64"])

    return [
        ("MD5", hash_mb_s(md5.update)),
        ("SHA256", hash_mb_s(sha.update)),
        ("CRC32C", hash_mb_s(crc32c_update)),
        ("CRC64NVME", hash_mb_s(crc64_update)),
    ]


def loopback_mb_s(total_mib: int = 512) -> float:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    block = os.urandom(MIB)

    def sink() -> None:
        connection, _ = server.accept()
        with connection:
            while connection.recv(4 * MIB):
                pass

    thread = threading.Thread(target=sink, daemon=True)
    thread.start()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(total_mib):
            client.sendall(block)
    thread.join(timeout=60)
    server.close()
    return total_mib / (time.monotonic() - started)


def fsync_rate(directory: Path, seconds: float = 1.0) -> float:
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4096)
    count = 0
    started = time.monotonic()
    deadline = started + seconds
    try:
        while time.monotonic() < deadline:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        path.unlink()
    return count / (time.monotonic() - started)


# --------------------------------------------------------------------------- cluster


def start_child(
    command: list[str], log: Path, ready: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    ready.unlink(missing_ok=True)
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready.exists():
            try:
                return process, json.loads(ready.read_text())
            except json.JSONDecodeError:
                pass
        if process.poll() is not None:
            raise RuntimeError(f"{command[3]} exited early; see {log}")
        time.sleep(0.05)
    raise TimeoutError(f"{command[3]} not ready; see {log}")


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "blobstore.cli", *args]


class Cluster:
    """ZooKeeper, 3 bookies and a gateway in child processes, under one temporary dir."""

    def __init__(self, workers: int, compare_workers: int = 0) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="s3-bench-"))
        self.workers = workers
        self.compare_workers = compare_workers
        self.children: list[subprocess.Popen[bytes]] = []
        self.zookeeper: ZooKeeperServer | None = None
        self.endpoint = ""
        self.compare_endpoint = ""
        self.gateway_pid = 0

    def __enter__(self) -> Cluster:
        env = dict(os.environ)
        env.update({"BLOBSTORE_ACCESS_KEY": ACCESS_KEY, "BLOBSTORE_SECRET_KEY": SECRET_KEY})
        self.zookeeper = start_zookeeper(self.work / "zookeeper", free_port(), heap_mb=512)
        try:
            zk = self.zookeeper.connect_string
            for index in range(3):
                root = self.work / f"bookie-{index}"
                root.mkdir()
                process, _ = start_child(
                    cli(
                        "bookie",
                        *("--zk", zk, "--host", "127.0.0.1", "--port", "0", "--http-port", "0"),
                        *("--journal-dir", str(root / "journal")),
                        *("--ledger-dir", str(root / "ledgers")),
                        *("--ready-file", str(root / "ready.json")),
                    ),
                    root / "bookie.log",
                    root / "ready.json",
                    env,
                )
                self.children.append(process)
            process, ready = self._gateway(zk, self.workers, "gateway", env)
            self.gateway_pid = process.pid
            self.endpoint = f"http://127.0.0.1:{ready['port']}"
            if self.compare_workers:
                _, ready = self._gateway(zk, self.compare_workers, "gateway-compare", env)
                self.compare_endpoint = f"http://127.0.0.1:{ready['port']}"
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _gateway(
        self, zk: str, workers: int, name: str, env: dict[str, str]
    ) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
        process, ready = start_child(
            cli(
                "gateway",
                *("--zk", zk, "--port", "0", "--workers", str(workers)),
                *("--ready-file", str(self.work / f"{name}.json")),
            ),
            self.work / f"{name}.log",
            self.work / f"{name}.json",
            env,
        )
        self.children.append(process)
        return process, ready

    def __exit__(self, *exc: object) -> None:
        for child in reversed(self.children):
            child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        # Gigabytes of journals and entry logs per run: gone with the cluster.
        shutil.rmtree(self.work, ignore_errors=True)


# --------------------------------------------------------------------------- phases


def phase(
    name: str,
    factory: OpFactory,
    concurrency: int,
    endpoint: str,
    duration_s: float | None = None,
    count: int | None = None,
    rate: float | None = None,
) -> PhaseResult:
    result = run_phase(
        name, endpoint, ACCESS_KEY, SECRET_KEY, factory, concurrency, duration_s, count, rate=rate
    )
    print(
        f"{name:<22} {result.ops:>7} ops {result.ops_per_s:>9.0f}/s {result.mb_per_s:>8.1f} MB/s "
        f"p50 {result.p50_ms:7.2f} ms p99 {result.p99_ms:7.2f} ms errors {result.errors} "
        f"client {result.client_cpu_us_per_op:.0f} us/op",
        flush=True,
    )
    for sample in result.error_samples:
        print(f"    error: {sample}", flush=True)
    return result


def entry_cache_lookups(endpoint: str) -> tuple[float, float]:
    """The gateway's entry cache (hits, misses) so far, all workers, from its /metrics."""
    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = {"hit": 0.0, "miss": 0.0}
    for line in text.splitlines():
        if line.startswith("blobstore_entry_cache_lookups_total{"):
            labels, _, value = line.rpartition(" ")
            for result in counts:
                if f'result="{result}"' in labels:
                    counts[result] += float(value)
    return counts["hit"], counts["miss"]


@dataclass(frozen=True)
class Workload:
    """Where and for how long the phases of one workload run."""

    endpoint: str
    bucket: str
    duration_s: float

    def timed(
        self, name: str, factory: OpFactory, concurrency: int, rate: float | None = None
    ) -> PhaseResult:
        return phase(name, factory, concurrency, self.endpoint, self.duration_s, rate=rate)

    def counted(self, name: str, factory: OpFactory, concurrency: int, count: int) -> PhaseResult:
        return phase(name, factory, concurrency, self.endpoint, count=count)


Noted = tuple[PhaseResult, str]  # a phase's result and the note beside it in the tables


def run_workload(
    endpoint: str, duration: float, warm_up_s: float, bucket: str = BUCKET
) -> list[Noted]:
    """All phases in order, in a bucket of their own; returns (result, note) pairs."""
    create_bucket(endpoint, ACCESS_KEY, SECRET_KEY, bucket)
    workload = Workload(endpoint, bucket, duration)
    phase("warm-up (untimed)", put_op(bucket, 4 * KIB, "warm-"), 16, endpoint, warm_up_s)
    out = small_put_phases(workload)
    small_count = max(1, out[0][0].ops)
    out.append(small_get_phase(workload, small_count))
    out += large_object_phases(workload)
    out += listing_phases(workload)
    return out


def small_put_phases(workload: Workload) -> list[Noted]:
    """4 KiB PUTs: closed loop, paced, and with scattered keys; the first is `put 4KiB`."""
    bucket = workload.bucket
    small = workload.timed("put 4KiB", put_op(bucket, 4 * KIB, "small-"), 16)
    out: list[Noted] = [(small, "concurrency 16")]
    # The aim's rate offered open loop (latency from when each PUT was due): the p99 of
    # 1,000 PUTs/s, not of a closed loop that saturates the machine and queues. Three runs:
    # one 8 s p99 swings with the machine; the aim is judged on their median.
    for run in range(1, PACED_PUT_RUNS + 1):
        factory = put_op(bucket, 4 * KIB, f"paced{run}-")
        name = f"{PACED_PUT} {run}/{PACED_PUT_RUNS}"
        paced = workload.timed(name, factory, 64, rate=PACED_PUT_RATE)
        out.append((paced, f"open loop at {PACED_PUT_RATE:,.0f}/s, at most 64 in flight"))
    # Keys above sort in write order, so each PUT lands on the bucket's last index page
    # and one catalog write carries many commits. Keys that start with a hash (uuid-like
    # names, as warp writes) land on a different page each time: one page rewrite each.
    factory = put_op(bucket, 4 * KIB, "scattered-", scattered=True)
    scattered = workload.timed(SCATTERED_PUT, factory, 16)
    out.append((scattered, "concurrency 16, keys starting with 8 hashed hex digits"))
    return out


def small_get_phase(workload: Workload, small_count: int) -> Noted:
    """GETs of the `put 4KiB` objects, picked at random (as warp does): the first GET of
    each misses the gateway's entry cache and later ones hit it if it still holds them.
    The note gives the share of hits (the objects outgrow the 64 MiB cache on a fast day)."""
    hits_before, misses_before = entry_cache_lookups(workload.endpoint)
    factory = get_op(workload.bucket, small_count, "small-", random_seed=RANDOM_SEED)
    small_get = workload.timed("get 4KiB", factory, 16)
    hits_after, misses_after = entry_cache_lookups(workload.endpoint)
    hits, misses = hits_after - hits_before, misses_after - misses_before
    hit_share = hits / (hits + misses) if hits + misses else 0.0
    note = (
        f"concurrency 16, {small_count:,} objects picked at random; the entry cache "
        f"answered {hit_share:.0%} of reads"
    )
    return small_get, note


def large_object_phases(workload: Workload) -> list[Noted]:
    bucket = workload.bucket
    large = workload.timed("put 16MiB", put_op(bucket, 16 * MIB, "large-"), 4)
    large_count = max(1, large.ops)
    factory = get_op(bucket, large_count, "large-", random_seed=RANDOM_SEED)
    large_get = workload.timed("get 16MiB", factory, 4)
    factory = multipart_op(bucket, 256 * MIB, 16 * MIB, part_concurrency=4)
    multipart = workload.counted("multipart 256MiB", factory, 1, count=1)
    ranged = workload.timed("get 1MiB range", ranged_get_op(bucket, large_count), 16)
    return [
        (large, "concurrency 4"),
        (large_get, "concurrency 4"),
        (multipart, "16 parts of 16 MiB, 4 in parallel"),
        (ranged, "random 1 MiB ranges of the 16 MiB objects, concurrency 16"),
    ]


def ranged_get_op(bucket: str, large_count: int) -> OpFactory:
    """Random 1 MiB ranges inside the 16 MiB objects: a fresh random range and object per
    request, from one seeded sequence shared by every connection."""
    rng = random.Random(RANDOM_SEED)

    def factory(client: S3Client) -> Op:
        async def op(connection: HttpConnection, sequence: int) -> int:
            start = rng.randrange(16) * MIB
            inner = get_op(bucket, large_count, "large-", (start, start + MIB - 1))(client)
            return await inner(connection, rng.randrange(large_count))

        return op

    return factory


def listing_phases(workload: Workload) -> list[Noted]:
    """Listing and DeleteObjects over 5,000 keys of their own (prepared here, not timed)."""
    bucket = workload.bucket
    prepared = workload.counted("prepare 5000 keys", put_op(bucket, 1, "list-"), 16, LIST_KEYS)
    if prepared.errors or prepared.ops != LIST_KEYS:
        # Listing fewer keys than it counts would report a rate that was never reached.
        raise RuntimeError(
            f"preparing the listing's {LIST_KEYS} keys failed ({prepared.ops} written, "
            f"{prepared.errors} errors, e.g. {list(prepared.error_samples[:2])})"
        )
    passes = 3
    factory = list_op(bucket, "list-", 1000)
    listed = workload.counted("list 5000 keys", factory, 1, count=passes * LIST_KEYS // 1000)
    batches = LIST_KEYS // 1000
    factory = delete_objects_op(bucket, "list-", 1000)
    deleted = workload.counted("delete-objects", factory, batches, count=batches)
    return [
        (listed, f"{passes} passes over {LIST_KEYS} keys, 1000-key pages, one client"),
        (deleted, f"{batches} requests of 1000 keys, concurrency {batches}"),
    ]


# --------------------------------------------------------------------------- report

# The analysis of the figures is prose kept by hand beside the generated report.
ANALYSIS_DOCUMENT = "s3-analysis.md"
ANALYSIS = (
    "## Where the time goes (py-spy and /proc CPU accounting under this generator)\n\n"
    f"What bounds these figures, and the changes measured against them: [{ANALYSIS_DOCUMENT}]"
    f"({ANALYSIS_DOCUMENT}).\n"
)


def rate_text(result: PhaseResult) -> str:
    if result.name.startswith(("list", "delete")):
        return f"{result.ops * 1000 / result.seconds:,.0f} keys/s"
    if result.mb_per_s >= 50:
        return f"{result.mb_per_s:,.0f} MB/s"
    return f"{result.ops_per_s:,.0f}/s"


def results_table(results: list[Noted]) -> list[str]:
    lines = [
        "| phase | ops | ops/s | MB/s | p50 ms | p99 ms | errors | generator CPU/op | "
        "headline | Ceph RGW | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result, note in results:
        lines.append(
            f"| {result.name} | {result.ops} | {result.ops_per_s:,.1f} | {result.mb_per_s:,.1f} "
            f"| {result.p50_ms:.1f} | {result.p99_ms:.1f} | {result.errors} "
            f"| {result.client_cpu_us_per_op:,.0f} us | {rate_text(result)} "
            f"| {RGW.get(result.name, '')} | {note} |"
        )
    return lines


def report(
    args: argparse.Namespace,
    results: list[Noted],
    compared: list[Noted],
    ceilings: list[PhaseResult],
    limits: list[tuple[str, str, str]],
    numbers: dict[str, float],
) -> str:
    lines = report_head(args)
    if compared:
        lines += compared_first_note(args)
    lines += results_table(results)
    lines += ["", *ceilings_table(ceilings), "", *limits_table(limits), ""]
    lines += [*verdicts(results, ceilings, numbers), "", ANALYSIS]
    if compared:
        lines += compared_section(args, compared, ceilings, numbers)
    return "\n".join(lines)


def report_head(args: argparse.Namespace) -> list[str]:
    return [
        "# S3 gateway benchmark",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}): ZooKeeper, 3 bookies "
        f"(E/WQ/AQ 3/2/2), the gateway (workers={args.workers}, as `blobstore standalone` "
        "runs it on a host it shares with its bookies and ZooKeeper) and the load generator "
        "(`bench/s3_load.py`, asyncio + httptools, SigV4 UNSIGNED-PAYLOAD) all share the "
        f"machine. Timed phases run {args.duration:g} s each, after {WARM_UP_S:g} s of untimed "
        "4 KiB PUTs on the freshly started cluster (ZooKeeper's JIT compiles its request path "
        "in the first minute under load, halving its CPU per request). "
        "`python -m bench.s3_bench` regenerates this file.",
        "",
    ]


def compared_first_note(args: argparse.Namespace) -> list[str]:
    return [
        f"The same workload also ran first, on the same cluster, through a second gateway "
        f"with workers={args.compare_workers} (one per CPU, a dedicated gateway host's "
        "sizing): see the section after the analysis. This run's tables are for "
        f"workers={args.workers}, measured second (on a cluster holding the first run's "
        "objects).",
        "",
    ]


def ceilings_table(ceilings: list[PhaseResult]) -> list[str]:
    lines = [
        "Generator ceiling, same run (same generator and concurrency against a trivial HTTP "
        "server in a child process):",
        "",
        "| ceiling | ops/s | MB/s | p50 ms | p99 ms | generator CPU/op |",
        "|---|---|---|---|---|---|",
    ]
    for result in ceilings:
        lines.append(
            f"| {result.name}, concurrency {result.concurrency} | {result.ops_per_s:,.0f} "
            f"| {result.mb_per_s:,.1f} | {result.p50_ms:.2f} | {result.p99_ms:.2f} "
            f"| {result.client_cpu_us_per_op:,.0f} us |"
        )
    return lines


def limits_table(limits: list[tuple[str, str, str]]) -> list[str]:
    return [
        "Machine limits, same run:",
        "",
        "| limit | value | notes |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in limits],
    ]


def compared_section(
    args: argparse.Namespace,
    compared: list[Noted],
    ceilings: list[PhaseResult],
    numbers: dict[str, float],
) -> list[str]:
    """The workload through the second gateway, measured first on the same cluster."""
    return [
        f"## The same workload through a gateway with workers={args.compare_workers}",
        "",
        "Measured first, on the same cluster (after its "
        f"{WARM_UP_S:g} s warm-up; {WARM_UP_AGAIN_S:g} s of untimed PUTs before the "
        f"workers={args.workers} run). Each worker process commits to an index page on its "
        "own, so with keys that sort in write order the workers take turns on the bucket's "
        f"last page (see *Two workers, one hot page* in [{ANALYSIS_DOCUMENT}]"
        f"({ANALYSIS_DOCUMENT})), and on two CPUs the second worker adds one more process to "
        "share them with the bookies and ZooKeeper; large objects gain from the second "
        "worker's CPU.",
        "",
        *results_table(compared),
        "",
        *verdicts(compared, ceilings, numbers, heading="###"),
    ]


# An aim: its text, the measured value, the aim's value and unit, and the ratio (None:
# measured / aim; for a latency aim, aim / measured).
Aim = tuple[str, float, float, str, float | None]


def verdicts(
    results: list[Noted],
    ceilings: list[PhaseResult],
    numbers: dict[str, float],
    heading: str = "##",
) -> list[str]:
    """The issue's aims and the RGW figures beside this run's results, as ratios, under
    headings of level `heading`."""
    by_name = {result.name: result for result, _ in results}
    paced_p99s = [result.p99_ms for result, _ in results if result.name.startswith(PACED_PUT)]
    lines = [
        f"{heading} Against the aims (ratio = measured / aim; >= 1 meets it)",
        "",
        "| aim | measured | aim value | ratio |",
        "|---|---|---|---|",
    ]
    for text, measured, aim, unit, ratio in aims(by_name, paced_p99s, numbers["disk"]):
        ratio = measured / aim if ratio is None else ratio
        lines.append(f"| {text} | {measured:,.1f} | {aim:,.1f} {unit} | {ratio:.2f} |")
    lines += [
        "",
        f"{heading} Against Ceph RGW (single node, 3 OSDs, replication 3, same kind of machine)",
        "",
        "| phase | blobstore | RGW | ratio |",
        "|---|---|---|---|",
    ]
    for name, measured, reference in rgw_comparisons(by_name):
        lines.append(
            f"| {name} | {measured:,.0f} | {reference:,.0f} | {measured / reference:.2f} |"
        )
    small_ceiling = min(c.ops_per_s for c in ceilings[:2])
    lines += [
        "",
        f"Generator: its 4 KiB ceiling in this run is {small_ceiling:,.0f} requests/s, "
        f"{small_ceiling / max(1.0, by_name['put 4KiB'].ops_per_s):.0f}x the gateway's 4 KiB "
        "PUT rate, so the small-object phases measure the gateway, not the client.",
    ]
    return lines


def aims(
    by_name: dict[str, PhaseResult], paced_p99s: list[float], disk_mb_per_s: float
) -> list[Aim]:
    """The issue's aims beside this run's results; the paced PUT's on the median of its runs."""
    paced_p99 = statistics.median(paced_p99s)
    small_put_p99 = by_name["put 4KiB"].p99_ms
    # The ledger issue's bound with every bookie on one disk: each replica writes a byte
    # twice (journal, then entry log), WQ=2 replicas; its aim is 70% of that.
    replication_bound = disk_mb_per_s / (2 * 2)
    large_put_aim = 0.7 * replication_bound
    return [
        ("large GET >= 400 MB/s", by_name["get 16MiB"].mb_per_s, 400.0, "MB/s", None),
        (
            f"large PUT at the ledger's replication-bound aim ({large_put_aim:,.0f} MB/s = 70% "
            f"of sequential write / (2 x WQ) = 0.7 x {replication_bound:,.0f})",
            by_name["put 16MiB"].mb_per_s,
            large_put_aim,
            "MB/s",
            None,
        ),
        ("4 KiB PUT >= 1,000/s", by_name["put 4KiB"].ops_per_s, 1000.0, "/s", None),
        (
            "4 KiB PUT >= 1,000/s, scattered keys",
            by_name[SCATTERED_PUT].ops_per_s,
            1000.0,
            "/s",
            None,
        ),
        (
            "4 KiB PUT p99 <= 15 ms at 1,000/s offered, median of "
            f"{len(paced_p99s)} runs ({', '.join(f'{p:.1f}' for p in paced_p99s)} ms) "
            "(ratio = aim / measured)",
            paced_p99,
            15.0,
            "ms",
            15.0 / max(0.001, paced_p99),
        ),
        (
            "4 KiB PUT p99 <= 15 ms at concurrency 16, saturated (ratio = aim / measured)",
            small_put_p99,
            15.0,
            "ms",
            15.0 / max(0.001, small_put_p99),
        ),
        ("4 KiB GET >= 3,000/s", by_name["get 4KiB"].ops_per_s, 3000.0, "/s", None),
    ]


def rgw_comparisons(by_name: dict[str, PhaseResult]) -> list[tuple[str, float, float]]:
    """(phase, this run's figure, Ceph RGW's) in the unit of the RGW table."""
    return [
        ("put 4KiB", by_name["put 4KiB"].ops_per_s, 250.0),
        (SCATTERED_PUT, by_name[SCATTERED_PUT].ops_per_s, 250.0),
        ("get 4KiB", by_name["get 4KiB"].ops_per_s, 345.0),
        ("put 16MiB", by_name["put 16MiB"].mb_per_s, 115.0),
        ("get 16MiB", by_name["get 16MiB"].mb_per_s, 385.0),
        ("multipart 256MiB", by_name["multipart 256MiB"].mb_per_s, 120.0),
        ("get 1MiB range", by_name["get 1MiB range"].ops_per_s, 310.0),
        ("list 5000 keys", 1000 * by_name["list 5000 keys"].ops_per_s, 12000.0),
        ("delete-objects", 1000 * by_name["delete-objects"].ops_per_s, 400.0),
    ]


def run(args: argparse.Namespace) -> str:
    print("measuring machine limits", flush=True)
    probe_dir = Path(tempfile.mkdtemp(prefix="s3-bench-probe-"))
    # The ledger benchmark's probe: the same "disk sequential bandwidth" in both aims.
    numbers = {"fsync": fsync_rate(probe_dir), "disk": sequential_mb_per_s(probe_dir, 3.0)}
    numbers["loopback"] = loopback_mb_s()
    hashes = hashing_limits()
    numbers.update(hashes)
    limits: list[tuple[str, str, str]] = [
        ("4 KiB write+fdatasync", f"{numbers['fsync']:,.0f} /s", "one thread, journal disk"),
        (
            "sequential write",
            f"{numbers['disk']:,.0f} MB/s",
            "4 MiB write + fdatasync for 3 s (as the ledger benchmark); the 3 bookies share "
            "this disk",
        ),
        ("loopback TCP", f"{numbers['loopback']:,.0f} MB/s", "one connection"),
        *round_trip_rows(),
        *[(f"{name} one core", f"{value:,.0f} MB/s", "") for name, value in hashes],
    ]
    probe_dir.rmdir()
    for row in limits:
        print(" ".join(row), flush=True)
    ceilings = [
        measure_ceiling("put", 4 * KIB, 16, duration_s=min(args.duration, 4)),
        measure_ceiling("get", 4 * KIB, 16, duration_s=min(args.duration, 4)),
        measure_ceiling("get", 16 * MIB, 4, duration_s=min(args.duration, 4)),
    ]
    for ceiling in ceilings:
        print(f"{ceiling.name}: {ceiling.ops_per_s:.0f}/s {ceiling.mb_per_s:.0f} MB/s", flush=True)
    compare = args.compare_workers if args.compare_workers != args.workers else 0
    with Cluster(args.workers, compare) as cluster:
        compared: list[Noted] = []
        warm_up_s = WARM_UP_S
        if compare:
            print(f"gateway with workers={compare}, first", flush=True)
            compared = run_workload(cluster.compare_endpoint, args.duration, warm_up_s, "bench-b")
            warm_up_s = WARM_UP_AGAIN_S
        print(f"gateway with workers={args.workers}", flush=True)
        results = run_workload(cluster.endpoint, args.duration, warm_up_s)
    return report(args, results, compared, ceilings, limits, numbers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per timed phase")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway worker processes (default 1, as `blobstore standalone` runs the gateway "
        "on a host it shares with the bookies and ZooKeeper)",
    )
    parser.add_argument(
        "--compare-workers",
        type=int,
        default=os.cpu_count() or 1,
        help="also run the workload first through a second gateway on the same cluster with "
        "this many workers (default: one per CPU, a dedicated gateway host's sizing; equal "
        "to --workers: no second run)",
    )
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "s3.md"))
    parser.add_argument(
        "--serve", action="store_true", help="start the cluster, print the endpoint and wait"
    )
    args = parser.parse_args()
    if args.serve:

        def stop(_signum: int, _frame: object) -> None:
            # Once: a second signal must not cut the cleanup short (it would leave
            # ZooKeeper running and the data behind).
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            raise KeyboardInterrupt

        # also when started in the background, where SIGINT is ignored
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        with Cluster(args.workers) as cluster:
            print(
                json.dumps({"endpoint": cluster.endpoint, "gateway_pid": cluster.gateway_pid}),
                flush=True,
            )
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
    text = run(args)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
