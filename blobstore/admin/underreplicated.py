"""List the under-replicated set: the copies of entries known to be bad or missing on a
bookie that should hold them, as the bookies' scrubbers, readers (read-repair) and the
auditor's replica check reported them, merged by ledger. The replication worker (in the
auditor's pass, or `--repair` here, or `blobstore admin scrub`) repairs them.

Examples:
  blobstore admin underreplicated
  blobstore admin underreplicated --json
  blobstore admin underreplicated --repair     # repair what is listed now, then list
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from typing import Any

from blobstore.admin._output import Output, add_common_arguments, admin_session, run_async
from blobstore.recovery import underreplication
from blobstore.recovery.replication_worker import RepairPass, ReplicationWorker
from blobstore.runtime.zk import ZooKeeperClient

TABLE_ROWS_MAX = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "--repair", action="store_true", help="repair what the set names now, then list it"
    )


def worker_id() -> str:
    return f"admin-{socket.gethostname()}-{os.getpid()}"


async def listed(zk: ZooKeeperClient) -> list[dict[str, Any]]:
    return [d.to_json() for d in underreplication.merge(await underreplication.list_reports(zk))]


def ranges_text(ranges: list[list[int]], shown_max: int = 6) -> str:
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:shown_max]]
    if len(ranges) > shown_max:
        parts.append(f"... ({len(ranges) - shown_max} more)")
    return ",".join(parts)


def print_set(output: Output, damage: list[dict[str, Any]], now: float) -> None:
    rows = [
        (
            d["ledger_id"],
            bookie,
            ranges_text(ranges),
            sum(b - a + 1 for a, b in ranges),
            ",".join(d["reasons"]),
            ",".join(d["reported_by"]),
            f"{max(0.0, now - d['first_reported_at']) / 60:.0f} min",
        )
        for d in damage
        for bookie, ranges in d["bookies"].items()
    ]
    title = f"{len(damage)} under-replicated ledger(s), {sum(d['entries'] for d in damage)} copies"
    output.table(
        title,
        ["ledger", "bookie", "entries", "copies", "reason", "reported by", "age"],
        rows[:TABLE_ROWS_MAX],
        right_align=["ledger", "copies", "age"],
    )
    if len(rows) > TABLE_ROWS_MAX:
        output.note(f"... {len(rows) - TABLE_ROWS_MAX} more rows: use --json for all")


def print_repair(output: Output, repair: RepairPass) -> None:
    rows = [
        (
            r.ledger_id,
            r.status,
            r.verdicts.get("repaired", 0),
            r.bytes_repaired,
            ", ".join(f"{k}={v}" for k, v in sorted(r.verdicts.items())),
            sum(len(e) for e in r.left.values()),
        )
        for r in repair.ledgers
    ]
    output.table(
        f"repair: {repair.entries_repaired} copies, {repair.bytes_repaired} bytes "
        f"in {repair.duration_s:.1f} s",
        ["ledger", "status", "repaired", "bytes", "verdicts", "left"],
        rows[:TABLE_ROWS_MAX],
        right_align=["ledger", "repaired", "bytes", "left"],
    )


def run(args: argparse.Namespace) -> int:
    output = Output(bool(args.json))

    async def main() -> tuple[RepairPass | None, list[dict[str, Any]]]:
        async with admin_session(args.zk) as zk:
            repair = None
            if args.repair:
                repair = await ReplicationWorker(zk, worker_id=worker_id()).run_once()
            return repair, await listed(zk)

    repair, damage = run_async(main)
    if output.json_mode:
        document: dict[str, Any] = {"underreplicated": damage}
        if repair is not None:
            document["repair"] = repair.to_json()
        output.emit_json(document)
    else:
        if repair is not None:
            print_repair(output, repair)
        print_set(output, damage, time.time())
    return 1 if damage else 0
