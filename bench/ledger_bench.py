"""Ledger client benchmark: pipelined appends through `LedgerHandle` to 3 local bookie
processes, E3/WQ2/AQ2 and E3/WQ3/AQ2, entries of 1 KiB and 1 MiB, beside the
single-bookie rate (E1/WQ1/AQ1, same client path) and the machine's limits measured on
the same disk in the same run (4 KiB write+fdatasync rate, sequential write+fdatasync
bandwidth); then 1 KiB adds paced below saturation, alone and beside a stream of 1 MiB
adds to another ledger (paced at fixed rates, then as fast as it goes): a mixed load's
cost to small adds' latency. The mixed rows run again on bookies with direct writes off
(every add journaled whole, then checkpointed), to measure what writing large adds once
gives small ones.

    .venv/bin/python -m bench.ledger_bench [--seconds 10] [--output docs/benchmarks/ledger.md]

Not a test: nothing asserts on speed. Writes the report to docs/benchmarks/ledger.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvloop

from bench.disk_probes import DiskLimits, fsync_rate_4k, measure_disk
from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, start_zookeeper
from blobstore.ledger import LedgerClient, LedgerConfig, LedgerHandle
from blobstore.runtime.gc_pauses import freeze_after_startup
from blobstore.runtime.zk import ZooKeeperClient
from bookie.config import BookieConfig

ROOT = Path(__file__).resolve().parent.parent

KIB = 1024
MIB = 1024 * KIB
# Each paced row first runs this long at its rate, unmeasured (`run_paced`).
PACED_WARMUP_S = 3.0
# The issue's aim: 1 KiB adds at this rate with p99 <= AIM_P99_MS, below saturation. Rows
# at exactly this rate run AIM_REPEATS times: one row's p99 moves with this machine.
AIM_ADDS_PER_S = 10_000.0
AIM_P99_MS = 10.0
AIM_REPEATS = 3
READY_TIMEOUT_S = 60.0
# Adds this large are written once, to the bookies' direct entry logs with O_DIRECT.
DIRECT_WRITE_MIN_BYTES = BookieConfig().direct_write_min_bytes


# --------------------------------------------------------------------------- machine limits


ROUND_TRIP_REQUEST_BYTES = 4 * KIB
ROUND_TRIP_REPLY_BYTES = 64

# The far end of `process_round_trip`: reads requests of a fixed size, answers each.
_ECHO_CHILD = """
import os, socket, sys
cpu = int(sys.argv[2])
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
size, reply = int(sys.argv[3]), b"r" * int(sys.argv[4])
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as connection:
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray(size)
    view = memoryview(buffer)
    while True:
        got = 0
        while got < size:
            n = connection.recv_into(view[got:])
            if not n:
                sys.exit(0)
            got += n
        connection.sendall(reply)
"""


@dataclass
class RoundTrips:
    per_s: float
    cpu_us: float  # both processes' CPU per round trip


def process_round_trip(seconds: float, same_cpu: bool = False) -> RoundTrips:
    """Two processes taking turns over loopback TCP (4 KiB request, 64 B reply, one at a
    time): what every hop of an add or a PUT between client, gateway, bookies and
    ZooKeeper pays at least. Each turn wakes the other process; on different CPUs that is
    a wake-up of an idle CPU, which some virtual machines make dear. `same_cpu` pins both
    to one CPU, where no CPU sleeps and wakes: the difference is that cost."""
    cpus = sorted(os.sched_getaffinity(0))
    saved = set(cpus)
    # Apart: one CPU each (else the scheduler may put both on one under load).
    own_cpu = cpus[0]
    child_cpu = cpus[0] if same_cpu or len(cpus) < 2 else cpus[1]
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        child = start_echo_child(listener.getsockname()[1], child_cpu)
    except BaseException:
        listener.close()
        raise
    try:
        listener.settimeout(30)
        connection, _ = listener.accept()
        connection.settimeout(30)
        os.sched_setaffinity(0, {own_cpu})
        with connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            child_before = process_cpu_s(child.pid)
            cpu_before = time.process_time()
            started = time.monotonic()
            count = take_turns(connection, seconds)
            elapsed = time.monotonic() - started
            cpu = time.process_time() - cpu_before + process_cpu_s(child.pid) - child_before
    finally:
        os.sched_setaffinity(0, saved)
        listener.close()
        child.kill()
        child.wait()
    return RoundTrips(count / elapsed, cpu / max(count, 1) * 1e6)


def start_echo_child(port: int, cpu: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-c", _ECHO_CHILD, str(port), str(cpu)]
    command += [str(ROUND_TRIP_REQUEST_BYTES), str(ROUND_TRIP_REPLY_BYTES)]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL)


def take_turns(connection: socket.socket, seconds: float) -> int:
    """Requests sent and replies read, one at a time, for `seconds`: the turns taken."""
    request = os.urandom(ROUND_TRIP_REQUEST_BYTES)
    count = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        connection.sendall(request)
        got = 0
        while got < ROUND_TRIP_REPLY_BYTES:
            piece = connection.recv(ROUND_TRIP_REPLY_BYTES - got)
            if not piece:
                raise ConnectionError("round-trip probe: the echo process went away")
            got += len(piece)
        count += 1
    return count


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_trip_rows() -> list[tuple[str, str, str]]:
    """The round-trip probe as (probe, result, notes) rows for a limits table."""
    apart = process_round_trip(1.5)
    together = process_round_trip(1.5, same_cpu=True)
    return [
        (
            "process round trip, loopback TCP, one CPU each",
            f"{apart.per_s:,.0f} /s",
            f"4 KiB request, 64 B reply, one at a time between two processes; "
            f"{apart.cpu_us:.0f} µs of CPU per round trip (both processes)",
        ),
        (
            "the same, both processes on one CPU",
            f"{together.per_s:,.0f} /s",
            f"{together.cpu_us:.0f} µs of CPU per round trip; the difference from the row "
            "above is the cost of waking a process on another, idle CPU",
        ),
    ]


# --------------------------------------------------------------------------- bookies


def start_bookie(
    zk: str, root: Path, log: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str, int]:
    """One `blobstore bookie` child on port 0, as the test fixtures start it (`env`: more
    environment, BLOBSTORE_BOOKIE_* settings); returns the process, its bookie id and its
    HTTP admin port."""
    ready = root / "ready.json"
    command = [
        sys.executable, "-m", "blobstore.cli", "bookie",
        "--zk", zk, "--host", "127.0.0.1", "--port", "0", "--http-port", "0",
        "--journal-dir", str(root / "journal"), "--ledger-dir", str(root / "ledgers"),
        "--ready-file", str(ready),
    ]  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if process.poll() is not None:
            raise RuntimeError(f"bookie exited early, see {log}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"bookie not ready within {READY_TIMEOUT_S}s, see {log}")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    return process, f"127.0.0.1:{info['port']}", int(info["http_port"])


FSYNC_HISTOGRAM = "bookie_journal_fsync_latency_seconds"


def journal_fsync_buckets(http_ports: list[int]) -> dict[float, float]:
    """Cumulative counts of the bookies' journal write+fsync latency histogram (summed
    over bookies), by upper bound in seconds."""
    counts: dict[float, float] = {}
    for port in http_ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        for line in text.splitlines():
            if line.startswith(FSYNC_HISTOGRAM + "_bucket{"):
                bound_text = line.split('le="', 1)[1].split('"', 1)[0]
                bound = math.inf if bound_text == "+Inf" else float(bound_text)
                counts[bound] = counts.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile q of the observations between two
    scrapes (an upper estimate, to the histogram's resolution); nan without any."""
    bounds = sorted(after)
    deltas = [after[b] - before.get(b, 0.0) for b in bounds]
    if not deltas or deltas[-1] <= 0:
        return math.nan
    for bound, cumulative in zip(bounds, deltas, strict=True):
        if cumulative >= q * deltas[-1]:
            return bound
    return math.inf


# --------------------------------------------------------------------------- runs


@dataclass
class Result:
    label: str
    ensemble: str
    entry_bytes: int
    window: int
    adds: int
    seconds: float
    latencies_s: list[float]
    read_mb_per_s: float
    client_cpu_s: float  # CPU time of the client process while appending
    # Paced rows: the bookies' journal write+fsync p99 over the row (bucket upper bound).
    journal_fsync_p99_s: float = math.nan
    # Paced rows: the machine's CPUs busy over the row, in % of one CPU (/proc/stat).
    machine_busy_pct: float = math.nan

    @property
    def adds_per_s(self) -> float:
        return self.adds / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.adds * self.entry_bytes / self.seconds / 1e6

    def percentile_ms(self, fraction: float) -> float:
        values = sorted(self.latencies_s)
        index = min(len(values) - 1, max(0, round(fraction * (len(values) - 1))))
        return values[index] * 1000


async def run_config(
    client: LedgerClient,
    label: str,
    quorums: tuple[int, int, int],
    entry_bytes: int,
    window: int,
    seconds: float,
) -> Result:
    ensemble_size, write_quorum, ack_quorum = quorums
    read_window = 64 if entry_bytes <= 64 * KIB else 16
    handle = await client.create_ledger(ensemble_size, write_quorum, ack_quorum, b"bench")
    payload = os.urandom(entry_bytes)
    latencies: list[float] = []
    in_flight: list[tuple[asyncio.Future[int], float]] = []
    started = time.monotonic()
    cpu_started = time.process_time()
    adds = 0
    while time.monotonic() - started < seconds:
        while len(in_flight) >= window:
            future, sent = in_flight.pop(0)
            await future
            latencies.append(time.monotonic() - sent)
            adds += 1
        in_flight.append((handle.append(payload), time.monotonic()))
    for future, sent in in_flight:
        await future
        latencies.append(time.monotonic() - sent)
        adds += 1
    elapsed = time.monotonic() - started
    client_cpu_s = time.process_time() - cpu_started
    await handle.close()
    # Read back (bounded: at most ~256 MiB or what was written).
    last = min(handle.last_add_confirmed, max(0, (256 * MIB) // max(entry_bytes, 1) - 1))
    reader = await client.open_ledger(handle.ledger_id, b"bench", recovery=False)
    read_started = time.monotonic()
    read_bytes = 0
    async for data in reader.iter_entries(0, last, window=read_window):
        read_bytes += len(data)
    read_s = time.monotonic() - read_started
    await client.delete_ledger(handle.ledger_id)
    return Result(
        label,
        f"E{ensemble_size}/WQ{write_quorum}/AQ{ack_quorum}",
        entry_bytes,
        window,
        adds,
        elapsed,
        latencies,
        read_bytes / read_s / 1e6 if read_s else 0.0,
        client_cpu_s,
    )


async def run_paced(
    client: LedgerClient,
    quorums: tuple[int, int, int],
    entry_bytes: int,
    rate: float,
    seconds: float,
    http_ports: list[int],
) -> Result:
    """Open loop at a fixed offered rate (below saturation): entry i is due at
    start + i/rate, and its latency runs from when it was due (not when it was sent) to
    its ack quorum, so a client falling behind shows up in the latencies."""
    ensemble_size, write_quorum, ack_quorum = quorums
    handle = await client.create_ledger(ensemble_size, write_quorum, ack_quorum, b"bench")
    payload = os.urandom(entry_bytes)
    # Unmeasured first: the row before (saturated) leaves checkpoints running and write
    # caches full; the row measures the steady state at this rate, checkpoints included.
    await pace_adds(handle, payload, rate, PACED_WARMUP_S, None)
    latencies: list[float] = []
    fsync_before = await asyncio.to_thread(journal_fsync_buckets, http_ports)
    cpu_started = time.process_time()
    machine_started = machine_cpu_ticks()
    started = PACED_CLOCK()
    sent = await pace_adds(handle, payload, rate, seconds, latency_recorder(latencies))
    elapsed = PACED_CLOCK() - started
    client_cpu_s = time.process_time() - cpu_started
    busy_pct = busy_between(machine_started, machine_cpu_ticks())
    fsync_after = await asyncio.to_thread(journal_fsync_buckets, http_ports)
    await handle.close()
    await client.delete_ledger(handle.ledger_id)
    return Result(
        f"paced {rate:,.0f}/s",
        f"E{ensemble_size}/WQ{write_quorum}/AQ{ack_quorum}",
        entry_bytes,
        0,
        sent,
        elapsed,
        latencies,
        0.0,
        client_cpu_s,
        histogram_quantile(fsync_before, fsync_after, 0.99),
        busy_pct,
    )


def machine_cpu_ticks() -> tuple[int, int]:
    """(all, idle) CPU ticks of the machine so far (/proc/stat)."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]  # idle + iowait


def busy_between(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The machine's CPUs busy between two readings, in % of one CPU."""
    total, idle = after[0] - before[0], after[1] - before[1]
    return 100.0 * (os.cpu_count() or 1) * (1 - idle / total) if total else math.nan


MIXED_LARGE_IN_FLIGHT = 4
# The mixed rows' 1 MiB adds per second, paced; None: as fast as MIXED_LARGE_IN_FLIGHT go.
MIXED_LARGE_RATES: tuple[float | None, ...] = (50.0, 100.0, None)
MIXED_PACED_IN_FLIGHT_MAX = 16  # a paced stream the bookies cannot keep up with waits


async def run_mixed(
    client: LedgerClient,
    rate: float,
    seconds: float,
    http_ports: list[int],
    large_per_s: float | None,
) -> Result:
    """A paced 1 KiB row while another ledger takes 1 MiB adds, `large_per_s` of them
    (None: as fast as MIXED_LARGE_IN_FLIGHT in flight allow): what large writes cost
    small adds' latency, beside the paced row at the same rate alone."""
    stop = asyncio.Event()
    large = asyncio.ensure_future(large_stream(client, stop, large_per_s))
    try:
        result = await run_paced(client, (3, 2, 2), KIB, rate, seconds, http_ports)
    finally:
        stop.set()
        large_mb_per_s = await large
    offered = f"{large_per_s:,.0f}/s" if large_per_s else f"{MIXED_LARGE_IN_FLIGHT} in flight"
    result.label = f"paced {rate:,.0f}/s + 1 MiB adds, {offered}: {large_mb_per_s:,.0f} MB/s"
    return result


async def large_stream(
    client: LedgerClient, stop: asyncio.Event, per_s: float | None = None
) -> float:
    """1 MiB adds to a ledger of their own until `stop`, `per_s` of them a second (None:
    MIXED_LARGE_IN_FLIGHT at a time, as fast as they go); returns their MB/s."""
    handle = await client.create_ledger(3, 2, 2, b"bench")
    payload = os.urandom(MIB)
    in_flight: list[asyncio.Future[int]] = []
    window = MIXED_PACED_IN_FLIGHT_MAX if per_s else MIXED_LARGE_IN_FLIGHT
    started = time.monotonic()
    sent = 0
    while not stop.is_set():
        if per_s:
            await asyncio.sleep(max(0.0, started + sent / per_s - time.monotonic()))
        if len(in_flight) >= window:
            await in_flight.pop(0)
        in_flight.append(handle.append(payload))
        sent += 1
    for future in in_flight:
        await future
    elapsed = time.monotonic() - started
    await handle.close()
    await client.delete_ledger(handle.ledger_id)
    return sent * MIB / elapsed / 1e6


# time.monotonic(), not loop.time(): uvloop's clock moves in whole milliseconds.
PACED_CLOCK = time.monotonic

LatencyRecorder = Callable[[float, asyncio.Future[int]], None]


def latency_recorder(latencies: list[float]) -> LatencyRecorder:
    """A done callback (bound to an add's due time first) appending the time since due."""

    def record(due: float, _future: asyncio.Future[int]) -> None:
        latencies.append(PACED_CLOCK() - due)

    return record


async def pace_adds(
    handle: LedgerHandle,
    payload: bytes,
    rate: float,
    duration: float,
    record: LatencyRecorder | None,
) -> int:
    """Appends `payload` at `rate` for `duration` seconds, each add's latency from when it
    was due to `record`; returns the adds sent."""
    clock = PACED_CLOCK
    # Only the newest future is kept (adds complete in entry order): holding every one
    # would grow the heap the garbage collector scans, and its pauses, over the row.
    last: asyncio.Future[int] | None = None
    started = clock()
    sent = 0
    while True:
        now = clock()
        if now - started >= duration:
            break
        due_count = int((now - started) * rate) + 1
        while sent < due_count:
            due = started + sent / rate
            await handle.wait_for_capacity()  # a stall: the wait counts in the latency
            last = handle.append(payload)
            if record is not None:
                last.add_done_callback(functools.partial(record, due))
            sent += 1
        # At least a millisecond (uvloop's timer resolution): a shorter sleep returns at
        # once and the loop would spin, taking CPU from the bookies it measures. Adds that
        # fall due meanwhile go out together, their wait counted in their latency.
        await asyncio.sleep(max(0.001, started + sent / rate - clock()))
    if last is not None:
        await last
    return sent


async def run_all(zk_connect: str, seconds: float, http_ports: list[int]) -> list[Result]:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    client = LedgerClient(zk, config=LedgerConfig(pending_adds_max=1024))
    await client.start()
    freeze_after_startup()  # as a gateway worker does once its object store is up
    results = []
    try:
        for entry_bytes, window in ((KIB, 256), (MIB, 16)):
            single = await _single_bookie(client, entry_bytes, window, seconds)
            results.append(single)
            for quorums in ((3, 2, 2), (3, 3, 2)):
                results.append(
                    await run_config(client, "replicated", quorums, entry_bytes, window, seconds)
                )
            if entry_bytes == KIB:
                # Latency below saturation: E3/WQ2/AQ2 1 KiB at fixed fractions of its
                # saturated rate, before the 1 MiB rows leave gigabytes for the bookies'
                # checkpoints to write to the disk the journals share.
                for rate in paced_rates(saturated_rate(results)):
                    results.append(
                        await run_paced(client, (3, 2, 2), KIB, rate, seconds, http_ports)
                    )
                results += await mixed_rows(client, mixed_rate(results), seconds, http_ports)
    finally:
        await client.close()
        await zk.stop()
    return results


async def mixed_rows(
    client: LedgerClient, rate: float, seconds: float, http_ports: list[int], suffix: str = ""
) -> list[Result]:
    """1 KiB adds paced at `rate` beside each of MIXED_LARGE_RATES' 1 MiB streams."""
    rows = []
    for large_per_s in MIXED_LARGE_RATES:
        row = await run_mixed(client, rate, seconds, http_ports, large_per_s)
        row.label += suffix
        rows.append(row)
    return rows


DIRECT_OFF = " (direct writes off)"


async def run_direct_off(
    zk_connect: str, rate: float, seconds: float, http_ports: list[int]
) -> list[Result]:
    """On bookies started with direct writes off: the paced 1 KiB row alone at `rate`,
    then the mixed rows, labelled so."""
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    client = LedgerClient(zk, config=LedgerConfig(pending_adds_max=1024))
    await client.start()
    try:
        alone = await run_paced(client, (3, 2, 2), KIB, rate, seconds, http_ports)
        alone.label += DIRECT_OFF
        return [alone, *await mixed_rows(client, rate, seconds, http_ports, DIRECT_OFF)]
    finally:
        await client.close()
        await zk.stop()


def saturated_rate(results: list[Result]) -> float:
    """1 KiB adds/s of the saturated E3/WQ2/AQ2 row."""
    return next(r.adds_per_s for r in results if r.ensemble == "E3/WQ2/AQ2")


def mixed_rate(results: list[Result]) -> float:
    """The paced rate of the mixed rows: half the saturated rate."""
    return paced_rates(saturated_rate(results))[1]


def paced_rates(saturated_per_s: float) -> list[float]:
    """The paced rows' rates, ascending: 25, 50 and 75% of the saturated rate, and the
    aim's rate AIM_REPEATS times when it lies below saturation."""
    rates = [max(100.0, round(saturated_per_s * fraction, -2)) for fraction in (0.25, 0.5, 0.75)]
    if AIM_ADDS_PER_S < saturated_per_s:
        rates += [AIM_ADDS_PER_S] * AIM_REPEATS
    return sorted(rates)


async def _single_bookie(
    client: LedgerClient, entry_bytes: int, window: int, seconds: float
) -> Result:
    return await run_config(client, "single bookie", (1, 1, 1), entry_bytes, window, seconds)


# --------------------------------------------------------------------------- report


# The analysis of the paced rows is prose kept by hand beside the generated report.
PACED_ANALYSIS_DOCUMENT = "ledger-analysis.md"

AimRow = tuple[str, str, float]  # aim, measured as shown, ratio


def aims_table(results: list[Result], limits: Limits) -> list[str]:
    """The issue's aims beside this run (ratio = measured / aim; >= 1 meets it)."""
    lines = [
        "",
        "## Against the aims (ratio >= 1 meets it)",
        "",
        "| aim | measured | ratio |",
        "|---|---|---|",
    ]
    for name, shown, ratio in aim_rows(results, limits):
        lines.append(f"| {name} | {shown} | {ratio:.2f} |")
    paced = [r for r in results if r.label.startswith("paced")]
    if paced:
        lines += paced_section(paced)
    return lines


def aim_rows(results: list[Result], limits: Limits) -> list[AimRow]:
    """One row per E3/WQ2/AQ2 result and, when several rows ran at the aim's rate, after
    the last of them the row judging the aim on their median."""
    rows: list[AimRow] = []
    at_aim_p99s: list[float] = []
    median_at = 0
    for r in results:
        if r.ensemble != "E3/WQ2/AQ2":
            continue
        if r.entry_bytes == KIB and not r.label.startswith("paced"):
            rows.append(
                (f"1 KiB adds/s >= {AIM_ADDS_PER_S:,.0f}", f"{r.adds_per_s:,.0f} /s",
                 r.adds_per_s / AIM_ADDS_PER_S)
            )  # fmt: skip
        elif r.label.startswith("paced"):
            p99_ms = r.percentile_ms(0.99)
            at_aim = " (the aim's rate)" if r.label == f"paced {AIM_ADDS_PER_S:,.0f}/s" else ""
            rows.append(
                (f"1 KiB p99 <= {AIM_P99_MS:g} ms at {r.label}{at_aim} (ratio = aim / measured)",
                 f"{p99_ms:.2f} ms", AIM_P99_MS / max(p99_ms, 1e-9))
            )  # fmt: skip
            if at_aim:
                at_aim_p99s.append(p99_ms)
                median_at = len(rows)  # after the last row at the aim's rate
        elif r.entry_bytes == MIB:
            aim = 0.7 * limits.bound_mb_per_s(MIB) / 2
            rows.append(
                (f"1 MiB MB/s >= 70% of the disk as the bookies write it / WQ = {aim:,.0f} MB/s",
                 f"{r.mb_per_s:,.0f} MB/s", r.mb_per_s / aim)
            )  # fmt: skip
    if len(at_aim_p99s) > 1:
        rows.insert(median_at, median_aim_row(at_aim_p99s))
    return rows


def median_aim_row(at_aim_p99s: list[float]) -> AimRow:
    """One 10 s row's p99 swings with the machine: the aim is judged on the median of the
    rows at its rate (as the S3 benchmark's paced PUTs)."""
    median = statistics.median(at_aim_p99s)
    shown = ", ".join(f"{v:.2f}" for v in at_aim_p99s)
    return (
        f"1 KiB p99 <= {AIM_P99_MS:g} ms at paced {AIM_ADDS_PER_S:,.0f}/s, median of "
        f"the {len(at_aim_p99s)} rows ({shown} ms) (ratio = aim / measured)",
        f"{median:.2f} ms",
        AIM_P99_MS / max(median, 1e-9),
    )


def paced_section(paced: list[Result]) -> list[str]:
    """Each paced row's add p99 beside the bookies' journal write+fsync p99, its floor."""
    lines = [
        "",
        "Below saturation an add waits for its bookies' journal write+fsync: for one",
        "already under way, then for its own. The bookies' own histogram of that time",
        "(`bookie_journal_fsync_latency_seconds`, all three, over each paced row; the",
        "upper bound of the bucket holding the 99th percentile) is the floor of an add's",
        "p99 on this disk. What an add's p99 has beyond it, and how much the rows at the",
        f"aim's rate owe to the machine's history: [{PACED_ANALYSIS_DOCUMENT}]"
        f"({PACED_ANALYSIS_DOCUMENT}).",
        "",
        "*machine CPU busy* is the machine's CPUs over the row, in % of one CPU (this",
        f"machine has {os.cpu_count()}): a mixed row's small adds wait for the cores as well as",
        "for the disk.",
        "",
        "| paced row | add p50 ms | add p99 ms | journal write+fsync p99 ms (at most) "
        "| machine CPU busy |",
        "|---|---|---|---|---|",
    ]
    for r in paced:
        fsync_ms = r.journal_fsync_p99_s * 1000
        lines.append(
            f"| {r.label} | {r.percentile_ms(0.5):.2f} | {r.percentile_ms(0.99):.2f} "
            f"| {'-' if math.isnan(fsync_ms) else f'{fsync_ms:g}'} "
            f"| {'-' if math.isnan(r.machine_busy_pct) else f'{r.machine_busy_pct:.0f} %'} |"
        )
    return lines


def write_report(output: Path, results: list[Result], limits: Limits, seconds: float) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    disk = limits.disk
    lines = [
        "# Ledger client benchmark",
        "",
        f"Generated by `python -m bench.ledger_bench` on {now} ({platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}). Three local bookie "
        "processes with default settings, a local ZooKeeper, one client process (uvloop) "
        f"appending through `LedgerHandle.append` with a fixed window of adds in flight, "
        f"{seconds:g} s per row. All journals, entry logs and probes share one disk. "
        f"Load average at the end of the run: {load:.1f} (other work on the machine "
        "competes for the same cores and disk).",
        "",
        "## Machine limits (same disk, same run)",
        "",
        "| probe | result | notes |",
        "|---|---|---|",
        f"| 4 KiB write + fdatasync, appending | {disk.fsync_rate:,.0f} /s | |",
        f"| 4 KiB write + fdatasync over zeros (journal zero-ahead) | "
        f"{limits.fsync_zeroed:,.0f} /s | |",
        f"| sequential 4 MiB write + fdatasync | {disk.buffered_mb_per_s:,.0f} MB/s "
        "| how journals and checkpointed entry logs write |",
        f"| sequential O_DIRECT, 1 MiB blocks, preallocated | {disk.direct_text()} "
        f"| how adds of {DIRECT_WRITE_MIN_BYTES // KIB} KiB or more are written |",
        *[f"| {probe} | {result} | {notes} |" for probe, result, notes in limits.round_trips],
        "",
        "## Appends",
        "",
        *appends_table(results, limits),
        *aims_table(results, limits),
        "",
        *READING,
        "",
    ]
    output.write_text("\n".join(lines))


def appends_table(results: list[Result], limits: Limits) -> list[str]:
    singles = {r.entry_bytes: r for r in results if r.label == "single bookie"}
    lines = [
        "| ensemble | entry | in flight | adds/s | MB/s | p50 ms | p99 ms | p99.9 ms "
        "| vs single bookie | vs fsync rate | written to | vs disk MB/s | client CPU µs/add "
        "| read MB/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        single = singles[r.entry_bytes]
        write_quorum = int(r.ensemble.split("/WQ")[1].split("/")[0])
        direct = r.entry_bytes >= DIRECT_WRITE_MIN_BYTES
        written_to = "direct logs" if direct else "journals"
        # Payload bytes fsync'd before the ack, WQ times, over the bandwidth of that way.
        vs_disk = r.mb_per_s * write_quorum / limits.bound_mb_per_s(r.entry_bytes)
        in_flight = r.label if r.label.startswith("paced") else str(r.window)
        lines.append(
            f"| {r.ensemble} | {'1 KiB' if r.entry_bytes == KIB else '1 MiB'} | {in_flight} "
            f"| {r.adds_per_s:,.0f} | {r.mb_per_s:,.1f} | {r.percentile_ms(0.5):.2f} "
            f"| {r.percentile_ms(0.99):.2f} | {r.percentile_ms(0.999):.2f} "
            f"| {r.adds_per_s / single.adds_per_s:.2f} | {r.adds_per_s / limits.disk.fsync_rate:.1f}x "
            f"| {written_to} x{write_quorum} | {vs_disk:.2f} "
            f"| {r.client_cpu_s / r.adds * 1e6:,.0f} "
            f"| {f'{r.read_mb_per_s:,.1f}' if r.read_mb_per_s else '-'} |"
        )
    return lines


# How to read the appends table, below it in the report.
READING = [
    "Reading: *vs single bookie* divides by the E1/WQ1/AQ1 row of the same entry size (same",
    "client code, one replica). *vs fsync rate* compares adds/s with one 4 KiB",
    "write+fdatasync per add: group commit is what lifts it above 1. *written to* says",
    "where each payload byte is made durable before the ack, on each of WQ bookies: an add",
    f"below {DIRECT_WRITE_MIN_BYTES // KIB} KiB in the bookies' group-committed journals",
    "(a checkpoint writes it again to an entry log later, every 10 s or at half a write",
    "cache, partly outside a row); a larger one once, to a direct entry log with O_DIRECT,",
    "and only a small record naming it to the journal. *vs disk MB/s* is payload MB/s",
    "times WQ over the probe of that way of writing (buffered write+fdatasync for",
    "journals, O_DIRECT for direct logs), all bookies on the one disk here: near 1 means",
    "the disk is the limit. Latencies run from `append` to the",
    "ack-quorum completion with the window full, so they include queueing; *paced* rows",
    "offer a fixed rate instead (a fraction of the saturated E3/WQ2/AQ2 rate above, and",
    f"the aim's {AIM_ADDS_PER_S:,.0f}/s {AIM_REPEATS} times over when it is below that) and",
    "time each add from when it was due: the latency below saturation (each measured",
    f"after {PACED_WARMUP_S:g} s at its rate, so the checkpoints left by the saturated",
    "row before do not count; its own checkpoints do). The *mixed* rows pace 1 KiB adds",
    "at half the saturated rate beside 1 MiB adds to another ledger, 50 and 100 a second",
    f"and then {MIXED_LARGE_IN_FLIGHT} in flight as fast as they go: the small adds' latency",
    "while the direct logs take the large ones, on the same disk and the same cores. Rows",
    f"marked *{DIRECT_OFF.strip()}* ran on three more bookies started with",
    "`direct_write_min_bytes=0`: every add journaled whole and checkpointed later, the",
    "write path before direct writes, measured in the same run. The read column",
    "reads the ledger back with `iter_entries` (64 reads in flight for 1 KiB entries, 16",
    "for 1 MiB). *client CPU µs/add* is the client process's CPU time over the adds: the",
    "cost of the ledger client itself, one core's worth caps a single client process.",
    "The machine is shared (see the load average): rows of one run vary by",
    "tens of percent from run to run, so compare ratios within a run, not across runs.",
]


@dataclass(frozen=True)
class Limits:
    """The disk and the machine, measured before the rows."""

    disk: DiskLimits
    fsync_zeroed: float  # 4 KiB write+fdatasync over zeros (the journal's zero-ahead)
    round_trips: list[tuple[str, str, str]]

    def bound_mb_per_s(self, entry_bytes: int) -> float:
        return self.disk.bound_mb_per_s(entry_bytes, DIRECT_WRITE_MIN_BYTES)


def measure_limits(work: Path, probe_seconds: float) -> Limits:
    """4 KiB write+fdatasync rate appending and over zeros, sequential MB/s buffered and
    O_DIRECT, and the process round-trip rows, printed as they are measured."""
    limits = Limits(
        measure_disk(work, probe_seconds),
        fsync_rate_4k(work, probe_seconds, over_zeros=True),
        round_trip_rows(),
    )
    print(
        f"fsync 4k: {limits.disk.fsync_rate:,.0f}/s appending, {limits.fsync_zeroed:,.0f}/s "
        f"over zeros  sequential: {limits.disk.buffered_mb_per_s:,.0f} MB/s buffered, "
        f"{limits.disk.direct_text()} O_DIRECT",
        *[f"{probe}: {result} ({notes})" for probe, result, notes in limits.round_trips],
        sep="\n",
        flush=True,
    )
    return limits


def print_result(r: Result) -> None:
    print(
        f"{r.ensemble:14} {r.entry_bytes:>8} B  {r.adds_per_s:9,.0f} adds/s "
        f"{r.mb_per_s:8,.1f} MB/s  p50 {r.percentile_ms(0.5):7.2f} ms  "
        f"p99 {r.percentile_ms(0.99):7.2f} ms  read {r.read_mb_per_s:,.1f} MB/s",
        flush=True,
    )


Bookies = tuple[list[subprocess.Popen[bytes]], list[int]]  # processes, HTTP ports


def start_bookies(zk_connect: str, work: Path, env: dict[str, str] | None = None) -> Bookies:
    processes, http_ports = [], []
    try:
        for index in range(3):
            root = work / f"bookie-{index}"
            process, bookie_id, http_port = start_bookie(
                zk_connect, root, work / f"bookie-{index}.log", env
            )
            processes.append(process)
            http_ports.append(http_port)
            print(f"bookie {bookie_id} ready", flush=True)
    except BaseException:
        stop_bookies(processes)
        raise
    return processes, http_ports


def stop_bookies(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def measure(zk_server: ZooKeeperServer, work: Path, seconds: float) -> list[Result]:
    """Every row on default bookies, then the direct-writes-off rows on bookies of their
    own (a ZooKeeper chroot of their own too)."""
    processes, http_ports = start_bookies(zk_server.chroot("/ledger-bench"), work / "default")
    try:
        results = uvloop.run(run_all(zk_server.chroot("/ledger-bench"), seconds, http_ports))
    finally:
        stop_bookies(processes)
    zk_connect = zk_server.chroot("/ledger-bench-direct-off")
    processes, http_ports = start_bookies(
        zk_connect, work / "direct-off", {"BLOBSTORE_BOOKIE_DIRECT_WRITE_MIN_BYTES": "0"}
    )
    try:
        rate = mixed_rate(results)
        results += uvloop.run(run_direct_off(zk_connect, rate, seconds, http_ports))
    finally:
        stop_bookies(processes)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per row")
    parser.add_argument("--probe-seconds", type=float, default=3.0)
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "ledger.md"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ledger-bench-", dir=ROOT / "bench"))
    zk_server = None
    try:
        limits = measure_limits(work, args.probe_seconds)
        zk_server = start_zookeeper(work / "zk", free_port(), heap_mb=256)
        results = measure(zk_server, work, args.seconds)
        for r in results:
            print_result(r)
        write_report(Path(args.output), results, limits, args.seconds)
        print(f"wrote {args.output}")
    finally:
        if zk_server is not None:
            zk_server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
