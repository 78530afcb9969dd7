"""Bookie benchmark: pipelined adds of 1 KiB, 64 KiB and 1 MiB entries from several
connections to one real bookie process, beside the machine's limits measured on the same
disk in the same run (4 KiB write+fsync rate, sequential bandwidth buffered with fsync and
with O_DIRECT, the two ways a bookie writes).

    .venv/bin/python -m bench.bookie_bench [--seconds 8] [--connections 4] [--window 256]

Writes docs/benchmarks/bookie.md. Not a test: no assertion on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import crc32c
import uvloop

from bench.disk_probes import DiskLimits, measure_disk
from blobstore.cli.zookeeper_server import free_port, start_zookeeper
from blobstore.wire import protocol
from blobstore.wire.protocol import Op
from bookie.config import BookieConfig

DIRECT_WRITE_MIN_BYTES = BookieConfig().direct_write_min_bytes
ROOT = Path(__file__).resolve().parent.parent

KEY = protocol.master_key(b"bench")
RESPONSE = struct.Struct(">IBBHQ")
FRAME_PREFIX = RESPONSE
ADD_FIXED = struct.Struct(f">QQ{protocol.MASTER_KEY_BYTES}s")
DIGEST = struct.Struct(">I")


# --------------------------------------------------------------------------- machine limits


# --------------------------------------------------------------------------- client


class AddConnection(asyncio.Protocol):
    """A pipelined writer on one connection: keeps `window` adds in flight."""

    def __init__(
        self,
        ledger_id: int,
        payload: bytes,
        window: int,
        deadline: float,
        done: asyncio.Future[None],
    ) -> None:
        self.ledger_id = ledger_id
        self.payload = payload
        self.window = window
        self.deadline = deadline
        self.done = done
        self.buffer = bytearray()
        self.sent_at: dict[int, float] = {}
        self.latencies: list[float] = []
        self.next_entry = 0
        self.errors = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.fill()

    def frame(self, entry_id: int) -> bytes:
        """protocol.encode_frame(ADD_ENTRY, AddRequest(Entry(...))) built in one pack (the
        client must not be the bottleneck of a server benchmark)."""
        payload = self.payload
        entry_header = protocol.ENTRY_HEADER.pack(
            self.ledger_id, entry_id, entry_id - 1, (entry_id + 1) * len(payload) + 1
        )
        digest = crc32c.crc32c(payload, crc32c.crc32c(entry_header))
        length = (
            protocol.FRAME_HEADER_BYTES
            + ADD_FIXED.size
            + protocol.ENTRY_HEADER_BYTES
            + len(payload)
        )
        head = FRAME_PREFIX.pack(length, protocol.PROTOCOL_VERSION, Op.ADD_ENTRY, 0, entry_id)
        return b"".join(
            (
                head,
                ADD_FIXED.pack(self.ledger_id, entry_id, KEY),
                entry_header,
                DIGEST.pack(digest),
                payload,
            )
        )

    def fill(self) -> None:
        assert self.transport is not None
        frames = []
        now = time.monotonic()
        while len(self.sent_at) < self.window and now < self.deadline:
            entry_id = self.next_entry
            self.next_entry += 1
            frames.append(self.frame(entry_id))
            self.sent_at[entry_id] = now
        if frames:
            self.transport.writelines(frames)
        if not self.sent_at and not self.done.done():
            self.done.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        pos = 0
        now = time.monotonic()
        while len(self.buffer) - pos >= RESPONSE.size:
            length, _, _, status, request_id = RESPONSE.unpack_from(self.buffer, pos)
            if len(self.buffer) - pos < 4 + length:
                break
            pos += 4 + length
            self.latencies.append(now - self.sent_at.pop(request_id))
            if status != 0:
                self.errors += 1
        del self.buffer[:pos]
        self.fill()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"bookie closed the connection: {exc!r}"))


async def connect(protocol: AddConnection, port: int) -> None:
    await asyncio.get_running_loop().create_connection(lambda: protocol, "127.0.0.1", port)


async def run_adds(
    port: int, size: int, connections: int, window: int, seconds: float, first_ledger: int
) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    payload = os.urandom(size)
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    protocols = []
    waits = []
    for index in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        conn = AddConnection(first_ledger + index, payload, window, deadline, done)
        await connect(conn, port)
        protocols.append(conn)
        waits.append(done)
    await asyncio.wait_for(asyncio.gather(*waits), seconds + 60)
    elapsed = time.monotonic() - started
    for conn in protocols:
        assert conn.transport is not None
        conn.transport.close()
    latencies = sorted(lat for conn in protocols for lat in conn.latencies)
    count = len(latencies)
    errors = sum(conn.errors for conn in protocols)

    def pct(p: float) -> float:
        return latencies[min(count - 1, int(p * count))] * 1000

    return {
        "size": size,
        "adds": count,
        "errors": errors,
        "adds_per_s": count / elapsed,
        "mb_per_s": count * size / elapsed / 1e6,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "mean_ms": statistics.fmean(latencies) * 1000,
    }


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(http_port: int) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        values[base] = values.get(base, 0.0) + float(value)
    return values


# --------------------------------------------------------------------------- driver


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per entry size")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument(
        "--window", type=int, default=256, help="adds in flight per connection, at most"
    )
    parser.add_argument(
        "--dir", default=None, help="where the bookie's dirs go (default: a temp dir under bench/)"
    )
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "bookie.md"))
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    base = Path(args.dir) if args.dir else ROOT / "bench" / ".work"
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        work = Path(tmp)
        disk = measure_disk_limits(work)
        zk = start_zookeeper(work / "zk", free_port())
        bookie = None
        try:
            bookie, info = start_bookie(work, zk.chroot("/bench"))
            results = [
                measure_entry_size(args, bookie.pid, info, index, size)
                for index, size in enumerate((1024, 64 * 1024, 1024 * 1024))
            ]
        finally:
            if bookie is not None:
                stop_bookie(bookie)
            zk.stop()
    if not args.dir:
        base.rmdir()  # the temp dir inside it is gone already
    write_report(Path(args.output), args, disk, results)
    print(f"wrote {args.output}")
    return 0


def measure_disk_limits(work: Path) -> DiskLimits:
    """The disk's bounds on `work`'s disk, printed."""
    print("measuring disk limits ...", flush=True)
    disk = measure_disk(work, 3.0)
    print(
        f"  4 KiB write+fdatasync: {disk.fsync_rate:,.0f}/s; sequential write+fdatasync: "
        f"{disk.buffered_mb_per_s:,.0f} MB/s; O_DIRECT: {disk.direct_text()}",
        flush=True,
    )
    return disk


def start_bookie(work: Path, zk_connect: str) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """A bookie process with its dirs under `work`, and its ready file once it is up."""
    ready = work / "ready.json"
    with open(work / "bookie.log", "wb") as log:
        bookie = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "blobstore.cli",
                "bookie",
                "--zk",
                zk_connect,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--http-port",
                "0",
                "--journal-dir",
                str(work / "journal"),
                "--ledger-dir",
                str(work / "ledgers"),
                "--ready-file",
                str(ready),
            ],  # fmt: skip
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "BLOBSTORE_LOG_LEVEL": "WARNING"},
        )
    try:
        wait_until_ready(bookie, ready, work / "bookie.log")
        info: dict[str, int] = json.loads(ready.read_text())
    except BaseException:
        stop_bookie(bookie)
        raise
    return bookie, info


def wait_until_ready(bookie: subprocess.Popen[bytes], ready: Path, log: Path) -> None:
    deadline = time.monotonic() + 60
    while not ready.exists():
        if bookie.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"bookie did not start:\n{tail}")
        time.sleep(0.05)


def stop_bookie(bookie: subprocess.Popen[bytes]) -> None:
    bookie.terminate()
    try:
        bookie.wait(timeout=30)
    except subprocess.TimeoutExpired:
        bookie.kill()


def measure_entry_size(
    args: argparse.Namespace, bookie_pid: int, info: dict[str, int], index: int, size: int
) -> dict[str, float]:
    """Pipelined adds of `size`-byte entries for --seconds, with the bookie's CPU and
    journal figures over the same span."""
    # About 4 MiB in flight per connection: enough to keep group commits full without
    # measuring only queueing.
    window = min(args.window, max(4, (4 << 20) // size))
    cpu_before = process_cpu_s(bookie_pid)
    before = scrape(info["http_port"])
    first_ledger = 1000 * (index + 1)
    result = uvloop.run(
        run_adds(info["port"], size, args.connections, window, args.seconds, first_ledger)
    )
    after = scrape(info["http_port"])
    result["window"] = window
    result["bookie_cpu_us_per_add"] = (
        (process_cpu_s(bookie_pid) - cpu_before) / result["adds"] * 1e6
    )
    result.update(journal_figures(before, after))
    print(
        f"  {size // 1024:>5} KiB: {result['adds_per_s']:>9,.0f} adds/s {result['mb_per_s']:>7,.1f} MB/s "
        f"p50 {result['p50_ms']:.2f} ms p99 {result['p99_ms']:.2f} ms p99.9 {result['p999_ms']:.2f} ms "
        f"({result['adds_per_fsync']:.0f} adds per fsync, errors {result['errors']})",
        flush=True,
    )
    return result


def journal_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Journal fsyncs, adds per fsync and mean fsync time between two metric scrapes."""

    def grown(name: str) -> float:
        return after[name] - before[name]

    batches = grown("bookie_journal_batch_size_entries_count")
    records = grown("bookie_journal_batch_size_entries_sum")
    fsync_sum = grown("bookie_journal_fsync_latency_seconds_sum")
    return {
        "fsyncs": batches,
        "adds_per_fsync": records / batches if batches else 0.0,
        "fsync_ms": fsync_sum / batches * 1000 if batches else 0.0,
    }


def write_report(
    path: Path, args: argparse.Namespace, disk: DiskLimits, results: list[dict[str, float]]
) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Bookie benchmark",
        "",
        f"Generated by `python -m bench.bookie_bench` on {now} ({platform.node()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}). One bookie process with default settings "
        f"(journal_flush_when_queue_empty=true, journal_buffered_writes_threshold_bytes=512 KiB, "
        f"journal_zero_ahead_bytes=4 MiB below journal_zero_ahead_max_mb_s=32, "
        f"direct_write_min_bytes={DIRECT_WRITE_MIN_BYTES // 1024} KiB with O_DIRECT), "
        f"ZooKeeper local, {args.connections} client connections in one uvloop process, "
        f"{args.seconds:.0f} s per entry size. Journal, entry logs and probes on the same disk. "
        f"Load average at the end of the run: {os.getloadavg()[0]:.1f} (other work on the "
        "machine competes for the same cores and disk).",
        "",
        "## Machine limits (same disk, same run)",
        "",
        "| probe | result |",
        "|---|---|",
        f"| 4 KiB write + fdatasync | {disk.fsync_rate:,.0f} /s |",
        f"| sequential 4 MiB write + fdatasync | {disk.buffered_mb_per_s:,.0f} MB/s |",
        f"| sequential O_DIRECT, 1 MiB blocks, preallocated | {disk.direct_text()} |",
        "",
        "## Pipelined adds",
        "",
        "| entry | in flight | adds/s | MB/s | p50 ms | p99 ms | p99.9 ms | adds per fsync | fsync ms "
        "| bookie CPU µs/add | vs fsync rate | written to | vs disk MB/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        size = f"{int(r['size']) // 1024} KiB" if r["size"] < 1 << 20 else "1 MiB"
        direct = r["size"] >= DIRECT_WRITE_MIN_BYTES
        bound = disk.bound_mb_per_s(int(r["size"]), DIRECT_WRITE_MIN_BYTES)
        lines.append(
            f"| {size} | {args.connections}x{int(r['window'])} | {r['adds_per_s']:,.0f} | {r['mb_per_s']:,.1f} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['adds_per_fsync']:.1f} | "
            f"{r['fsync_ms']:.2f} | {r['bookie_cpu_us_per_add']:.0f} | "
            f"{r['adds_per_s'] / disk.fsync_rate:.1f}x | {'direct log' if direct else 'journal'} "
            f"| {r['mb_per_s'] / bound:.2f} |"
        )
    lines += READING
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


# How to read the table, below it in the report.
READING = [
    "",
    "Reading: *vs fsync rate* is adds/s over the bare 4 KiB write+fsync rate (what one fsync",
    "per add would give); group commit is what lifts it above 1. *written to* is where an",
    "add is made durable before its ack: an add below "
    f"{DIRECT_WRITE_MIN_BYTES // 1024} KiB goes whole to the",
    "group-committed journal (buffered writes, fdatasync per group; a checkpoint writes it",
    "again to an entry log later, its fsync once per checkpoint, so the page cache absorbs",
    "part of it); a larger one is written once, to a direct entry log with O_DIRECT (one",
    "fdatasync per group of data writes), and the journal gets only a small record naming",
    "it. *vs disk MB/s* is payload MB/s over the probe of that way of writing: buffered",
    "write+fdatasync for the journal, O_DIRECT for the direct log. *adds per fsync* and",
    "*fsync ms* are the journal's (for direct adds, its records' groups). The probes are",
    "3 s samples on a disk shared with other work: on this machine they vary by 2x between",
    "runs, so read the ratios as indicative. Latencies are from the client's send to its",
    "ack, measured with every connection's window full, so they include queueing. *Bookie",
    "CPU µs/add* is the bookie process's CPU time over the adds: at 1 KiB the bookie is",
    "CPU-bound (one event loop), so adds/s on an idle core is about 1e6 / that figure.",
    "",
]


if __name__ == "__main__":
    sys.exit(main())
