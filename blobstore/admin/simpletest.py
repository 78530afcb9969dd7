"""Write N entries to a new ledger, read them back, verify, report throughput and latency.

    blobstore admin --zk Z simpletest -e 3 -w 2 -a 2 -n 1000 [--size 1024]

Exits non-zero when any entry reads back different (or an add fails). The test ledger
is closed and deleted afterwards unless --keep is given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable
from typing import Any

from blobstore.admin._output import Output, add_common_arguments, admin_session, run_async
from blobstore.ledger import LedgerClient, LedgerConfig, LedgerError, LedgerHandle
from blobstore.runtime.errors import UsageError
from blobstore.wire import protocol

WINDOW = 64
PROGRESS_EVERY = 1000  # entries per progress bar step
DISCARD_TIMEOUT_S = 10.0  # closing and deleting the test ledger after a failure
ENTRY_COUNT_MAX = 10_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("-e", "--ensemble-size", type=int, default=3)
    parser.add_argument("-w", "--write-quorum", type=int, default=2)
    parser.add_argument("-a", "--ack-quorum", type=int, default=2)
    parser.add_argument("-n", "--entries", type=int, default=1000, help="entries to write")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per entry")
    parser.add_argument("--window", type=int, default=WINDOW, help="adds in flight")
    parser.add_argument("--keep", action="store_true", help="keep the test ledger")


def entry_payload(entry_id: int, size: int) -> bytes:
    block = hashlib.blake2b(b"simpletest-%d" % entry_id, digest_size=64).digest()
    return (block * (size // len(block) + 1))[:size]


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def _validate(args: argparse.Namespace) -> None:
    if not 1 <= args.entries <= ENTRY_COUNT_MAX:
        raise UsageError(f"-n must be in 1..{ENTRY_COUNT_MAX}, got {args.entries}")
    if not 0 <= args.size <= protocol.ENTRY_PAYLOAD_BYTES_MAX:
        raise UsageError(
            f"--size must be in 0..{protocol.ENTRY_PAYLOAD_BYTES_MAX}, got {args.size}"
        )
    if args.window < 1:
        raise UsageError(f"--window must be >= 1, got {args.window}")
    if not 1 <= args.ack_quorum <= args.write_quorum <= args.ensemble_size:
        raise UsageError(
            f"need -e >= -w >= -a >= 1, got -e {args.ensemble_size} -w {args.write_quorum} "
            f"-a {args.ack_quorum}"
        )


async def simpletest(
    args: argparse.Namespace, advance: Callable[[int], None] = lambda _count: None
) -> dict[str, Any]:
    async with admin_session(args.zk) as zk:
        client = LedgerClient(
            zk, config=LedgerConfig.from_env(pending_adds_max=max(args.window, 1))
        )
        await client.start()
        try:
            return await _run(client, args, advance)
        finally:
            await client.close()


async def _run(
    client: LedgerClient, args: argparse.Namespace, advance: Callable[[int], None]
) -> dict[str, Any]:
    try:
        handle = await client.create_ledger(
            args.ensemble_size,
            args.write_quorum,
            args.ack_quorum,
            b"simpletest",
            {"purpose": "simpletest"},
        )
    except LedgerError as e:
        raise UsageError(f"cannot create a ledger: {e}") from None
    try:
        return await _write_and_read(client, handle, args, advance)
    except BaseException:
        # Failed or interrupted (Ctrl-C): the test ledger is not left open behind, for
        # ever listed by `ledgers` and `fsck` (kept closed with --keep).
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_discard(client, handle, args.keep), DISCARD_TIMEOUT_S)
        raise


async def _discard(client: LedgerClient, handle: LedgerHandle, keep: bool) -> None:
    if keep:
        await handle.close()
    else:  # its entries were never read: no need to close it first
        await client.delete_ledger(handle.ledger_id)


async def _write_and_read(
    client: LedgerClient,
    handle: LedgerHandle,
    args: argparse.Namespace,
    advance: Callable[[int], None],
) -> dict[str, Any]:
    latencies, write_s = await _write(handle, args, advance)
    await handle.close()
    mismatches, read_s = await _read_back(client, handle.ledger_id, args)
    if not args.keep:
        await client.delete_ledger(handle.ledger_id)
    return {
        "ledger_id": handle.ledger_id,
        "ensemble": list(handle.metadata.last_ensemble),
        "ensemble_size": args.ensemble_size,
        "write_quorum": args.write_quorum,
        "ack_quorum": args.ack_quorum,
        "entries": args.entries,
        "entry_bytes": args.size,
        "window": args.window,
        **_rates(args.entries * args.size, args.entries, write_s, read_s),
        "add_latency_ms": _latency_ms(latencies),
        "mismatches": mismatches[:100],
        "mismatch_count": len(mismatches),
        "ok": not mismatches,
    }


async def _write(
    handle: LedgerHandle, args: argparse.Namespace, advance: Callable[[int], None]
) -> tuple[list[float], float]:
    """Append the entries, at most `window` in flight: (each add's latency, seconds).
    Each add is awaited through a waiter, never its own future: a Ctrl-C cancels what
    is awaited, and an add's own future must not be cancelled (PendingAddOp)."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    in_flight: list[tuple[asyncio.Future[int], float]] = []
    started = time.monotonic()
    for entry_id in range(args.entries):
        while len(in_flight) >= args.window:
            oldest, sent = in_flight.pop(0)
            await oldest
            latencies.append(time.monotonic() - sent)
        waiter: asyncio.Future[int] = loop.create_future()
        handle.append(entry_payload(entry_id, args.size), waiter)
        in_flight.append((waiter, time.monotonic()))
        if entry_id % PROGRESS_EVERY == PROGRESS_EVERY - 1:
            advance(PROGRESS_EVERY)
    for oldest, sent in in_flight:
        await oldest
        latencies.append(time.monotonic() - sent)
    advance(args.entries % PROGRESS_EVERY)
    return latencies, time.monotonic() - started


async def _read_back(
    client: LedgerClient, ledger_id: int, args: argparse.Namespace
) -> tuple[list[int], float]:
    """Read the closed ledger back: (the entry ids that do not match, seconds)."""
    started = time.monotonic()
    reader = await client.open_ledger(ledger_id, b"simpletest", recovery=False)
    mismatches: list[int] = []
    entry_id = 0
    async for data in reader.iter_entries(0, args.entries - 1, window=16):
        if data != entry_payload(entry_id, args.size):
            mismatches.append(entry_id)
        entry_id += 1
    read_s = time.monotonic() - started
    if entry_id != args.entries:
        mismatches.append(entry_id)
    return mismatches, read_s


def _rates(total_bytes: int, entries: int, write_s: float, read_s: float) -> dict[str, Any]:
    return {
        "write_seconds": round(write_s, 6),
        "write_entries_per_s": round(entries / write_s, 1) if write_s else None,
        "write_mb_per_s": round(total_bytes / write_s / 1e6, 3) if write_s else None,
        "read_seconds": round(read_s, 6),
        "read_mb_per_s": round(total_bytes / read_s / 1e6, 3) if read_s else None,
    }


def _latency_ms(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50": round(percentile(ordered, 0.50) * 1000, 3),
        "p99": round(percentile(ordered, 0.99) * 1000, 3),
        "p999": round(percentile(ordered, 0.999) * 1000, 3),
        "max": round(ordered[-1] * 1000, 3),
    }


def run(args: argparse.Namespace) -> int:
    _validate(args)
    output = Output(bool(args.json))
    with output.progress("writing entries", args.entries) as advance:
        result = run_async(lambda: simpletest(args, advance))
    if output.json_mode:
        output.emit_json(result)
    else:
        latency = result["add_latency_ms"]
        output.table(
            f"simpletest ledger {result['ledger_id']} "
            f"(E={args.ensemble_size} WQ={args.write_quorum} AQ={args.ack_quorum})",
            ["metric", "value"],
            [
                ("entries", f"{result['entries']} x {result['entry_bytes']} B"),
                (
                    "write",
                    f"{result['write_entries_per_s']} entries/s, {result['write_mb_per_s']} MB/s",
                ),
                ("read", f"{result['read_mb_per_s']} MB/s"),
                (
                    "add latency p50/p99/p99.9",
                    f"{latency['p50']} / {latency['p99']} / {latency['p999']} ms",
                ),
                ("verified", "ok" if result["ok"] else f"{result['mismatch_count']} MISMATCHED"),
            ],
        )
    return 0 if result["ok"] else 1
