"""`blobstore admin decommission BOOKIE`: move everything a bookie holds to other bookies
and mark it safe to remove (the operation: `blobstore.recovery.decommission`).

The command checks its arguments, runs the operation with a progress bar and prints
one row per ledger it touched (or one JSON document), and exits 0 once the bookie is
safe to remove, 1 while ledgers still name it (rerun to resume).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from blobstore.admin._output import Output, add_common_arguments, admin_session, run_async
from blobstore.ledger.bookie_client import parse_bookie_id
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.recovery.decommission import LEDGER_CONCURRENCY_DEFAULT, DecommissionOp
from blobstore.runtime.errors import UsageError
from blobstore.wire.zk_layout import decommissioned_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("bookie", metavar="BOOKIE", help="bookie id host:port")
    parser.add_argument(
        "--password",
        action="append",
        default=[],
        help="a ledger password to try besides the object layer's (those derived from "
        "the cluster key, BLOBSTORE_CLUSTER_KEY_FILE, and the fixed one) (repeatable)",
    )
    parser.add_argument(
        "--wait-open-s",
        type=float,
        default=0.0,
        help="wait this long for OPEN ledgers of live writers to close (default 0)",
    )
    parser.add_argument(
        "--fence-open",
        action="store_true",
        help="recover (fence and close) OPEN ledgers of live writers too",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=LEDGER_CONCURRENCY_DEFAULT,
        help=f"ledgers moved at once (default {LEDGER_CONCURRENCY_DEFAULT})",
    )
    parser.add_argument(
        "--rate-mb-s",
        type=float,
        default=0.0,
        help="copy at most this many MB (10^6 bytes) of entries per second, so client "
        "traffic keeps its share of the bookies and the network (default 0: no limit)",
    )


def run(args: argparse.Namespace) -> int:
    _check_arguments(args)
    output = Output(args.json)
    passwords = LedgerPasswords.from_env(foreign=[p.encode() for p in args.password])

    async def main() -> DecommissionOp:
        async with admin_session(args.zk) as zk:
            op = DecommissionOp(
                zk,
                args.bookie,
                passwords=passwords,
                wait_open_s=args.wait_open_s,
                fence_open=args.fence_open,
                concurrency=args.concurrency,
                rate_bytes_per_s=args.rate_mb_s * 1e6,
                progress=output.progress,
            )
            await op.run()
            return op

    op = run_async(main)
    if output.json_mode:
        output.emit_json(decommission_document(op))
    else:
        _render(output, op)
    return 0 if op.safe_to_remove else 1


def _check_arguments(args: argparse.Namespace) -> None:
    try:
        parse_bookie_id(args.bookie)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not 1 <= args.concurrency <= 64:
        raise UsageError("--concurrency must be 1..64")
    if not 0 <= args.wait_open_s < math.inf:  # NaN fails too
        raise UsageError("--wait-open-s must be a number of seconds >= 0")
    if not 0 <= args.rate_mb_s < 1e6:  # NaN and inf fail too
        raise UsageError(
            f"--rate-mb-s {args.rate_mb_s:g}: must be a number of MB/s in [0, 1000000) "
            "(0: no limit)"
        )


def decommission_document(op: DecommissionOp) -> dict[str, Any]:
    """The JSON document of a finished decommission pass."""
    moved = [o for o in op.outcomes if o.status == "moved"]
    return {
        "bookie": op.bookie_id,
        "safe_to_remove": op.safe_to_remove,
        "ledgers_moved": len(moved),
        "segments_moved": sum(o.segments_moved for o in moved),
        "entries_copied": sum(o.entries_copied for o in moved),
        "bytes_copied": op.bytes_copied,
        "remaining_ledgers": op.remaining,
        "ledgers": [o.to_json() for o in op.outcomes],
    }


def _render(output: Output, op: DecommissionOp) -> None:
    output.table(
        f"decommission {op.bookie_id}",
        ["ledger", "status", "segments", "entries copied", "to", "detail"],
        [
            (
                o.ledger_id,
                o.status,
                o.segments_moved,
                o.entries_copied,
                ",".join(sorted(set(o.replacements))),
                o.detail,
            )
            for o in op.outcomes
        ],
        right_align=["segments", "entries copied"],
    )
    if op.safe_to_remove:
        document = decommission_document(op)
        output.note(
            f"bookie {op.bookie_id} is safe to remove: no ledger names it "
            f"({document['ledgers_moved']} ledgers moved, {document['entries_copied']} entries "
            f"({op.bytes_copied:,} bytes) copied; "
            f"marked at {decommissioned_path(op.bookie_id)})"
        )
    else:
        output.note(
            f"bookie {op.bookie_id} is NOT safe to remove yet: {len(op.remaining)} "
            "ledgers still name it (see the table); rerun the command to resume"
        )
