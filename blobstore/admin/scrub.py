"""Scrub the cluster now: every registered bookie reads back and verifies every entry it
stores (its scrubber, `POST /api/v1/bookie/scrub`), this command waits for them all,
optionally checks the replicas of closed ledgers from here (`--verify-percent`: the
auditor's replica check, which also finds copies a bookie lost from its index), then
repairs what the under-replicated set names (the replication worker) and prints what
was found and repaired.

Exit 0 when every bookie scrubbed and nothing is left under-replicated; 1 otherwise.

Examples:
  blobstore admin scrub
  blobstore admin scrub --rate-mb-s 0 --verify-percent 100 --json
  blobstore admin scrub --no-repair          # find and report only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from blobstore.admin._output import (
    Output,
    add_common_arguments,
    admin_session,
    human_bytes,
    run_async,
)
from blobstore.admin.bookies import registered_bookies
from blobstore.admin.underreplicated import listed, print_repair, print_set, worker_id
from blobstore.recovery.replica_verifier import ReplicaVerifier, VerificationPass
from blobstore.recovery.replication_worker import RepairPass, ReplicationWorker
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient

HTTP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.25
WAIT_DEFAULT_S = 3600.0
FINDINGS_SHOWN_MAX = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "--rate-mb-s",
        type=float,
        default=None,
        help="most entry bytes each bookie reads per second, in MB/s; 0: no limit "
        "(default: each bookie's scrub_rate_mb_s)",
    )
    parser.add_argument(
        "--verify-percent",
        type=float,
        default=None,
        help="also check the replicas of closed ledgers from here: this percent of each "
        "segment's entries, with its first and last (0-100; default: no replica check)",
    )
    parser.add_argument(
        "--no-repair", action="store_true", help="report to the under-replicated set only"
    )
    parser.add_argument(
        "--wait-s",
        type=float,
        default=WAIT_DEFAULT_S,
        help=f"give up waiting for the bookies after this long (default {WAIT_DEFAULT_S:g})",
    )


@dataclass(slots=True)
class BookieScrub:
    bookie_id: str
    address: str
    pass_id: int = 0
    result: dict[str, Any] | None = None  # the finished pass (GET .../scrub "last")
    progress: dict[str, Any] | None = None  # the pass while it runs
    error: str = ""

    @property
    def done(self) -> bool:
        return bool(self.error) or self.result is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "bookie_id": self.bookie_id,
            "pass": self.result,
            "error": self.error,
        }


@dataclass(slots=True)
class ScrubReport:
    bookies: list[BookieScrub] = field(default_factory=list)
    replica_check: VerificationPass | None = None
    repair: RepairPass | None = None
    left: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def healthy(self) -> bool:
        failed = any(b.error or (b.result or {}).get("state") != "done" for b in self.bookies)
        return not failed and not self.left

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "bookies": [b.to_json() for b in self.bookies],
            "errors_found": sum((b.result or {}).get("errors", 0) for b in self.bookies),
            "replica_check": self.replica_check.to_json() if self.replica_check else None,
            "repair": self.repair.to_json() if self.repair else None,
            "underreplicated_left": self.left,
            "seconds": round(self.seconds, 3),
        }


def _http(address: str, method: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(f"http://{address}{path}", data=None, method=method)
    if method == "POST":
        request.data = b""
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def start_pass(scrub: BookieScrub, rate_mb_s: float | None) -> None:
    query = "" if rate_mb_s is None else f"?rate_mb_s={rate_mb_s:g}"
    try:
        scrub.pass_id = int(_http(scrub.address, "POST", f"/api/v1/bookie/scrub{query}")["pass_id"])
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        scrub.error = f"{type(e).__name__}: {e}"


def poll_pass(scrub: BookieScrub) -> None:
    """Look at the bookie's scrubber: the pass's result once it finished."""
    try:
        status = _http(scrub.address, "GET", "/api/v1/bookie/scrub")
    except (urllib.error.URLError, OSError, ValueError) as e:
        scrub.error = f"{type(e).__name__}: {e}"
        return
    last, current = status.get("last"), status.get("current")
    if last is not None and int(last["pass_id"]) >= scrub.pass_id:
        scrub.result = last
    elif current is not None and int(current["pass_id"]) == scrub.pass_id:
        scrub.progress = current


async def scrub_bookies(
    zk: ZooKeeperClient, rate_mb_s: float | None, wait_s: float, output: Output
) -> list[BookieScrub]:
    bookies = [
        BookieScrub(b["bookie_id"], f"{b['host']}:{b['http_port']}")
        for b in await registered_bookies(zk)
        if b.get("http_port")
    ]
    if not bookies:
        raise UsageError("no bookie is registered")
    await asyncio.gather(*(asyncio.to_thread(start_pass, b, rate_mb_s) for b in bookies))
    await asyncio.gather(*(asyncio.to_thread(poll_pass, b) for b in bookies if not b.done))
    total_mb = sum(_bytes_total(b) for b in bookies) // 1_000_000
    deadline = time.monotonic() + wait_s
    with output.progress("scrub (MB verified)", total_mb or None) as advance:
        shown = 0
        while not all(b.done for b in bookies):
            if time.monotonic() > deadline:
                for b in bookies:
                    if not b.done:
                        b.error = f"the pass did not finish within {wait_s:g} s"
                break
            await asyncio.sleep(POLL_INTERVAL_S)
            await asyncio.gather(*(asyncio.to_thread(poll_pass, b) for b in bookies if not b.done))
            verified = sum(_bytes_verified(b) for b in bookies) // 1_000_000
            advance(verified - shown)
            shown = verified
    return bookies


def _bytes_total(scrub: BookieScrub) -> int:
    """The entry log bytes the bookie's pass set out to read (an estimate)."""
    figures = scrub.result or scrub.progress or {}
    return int(figures.get("bytes_total", 0))


def _bytes_verified(scrub: BookieScrub) -> int:
    figures = scrub.result or scrub.progress or {}
    return int(figures.get("bytes_verified", 0))


async def run_scrub(zk: ZooKeeperClient, args: argparse.Namespace, output: Output) -> ScrubReport:
    started = time.monotonic()
    report = ScrubReport()
    report.bookies = await scrub_bookies(zk, args.rate_mb_s, args.wait_s, output)
    if args.verify_percent is not None:
        verifier = ReplicaVerifier(zk, verifier_id=worker_id(), percent=args.verify_percent)
        ledger_ids = await verifier.ledger_ids()
        with output.progress("replica check (ledgers)", len(ledger_ids)) as advance:
            report.replica_check = await verifier.run_once(ledger_ids, advance)
    if not args.no_repair:
        report.repair = await ReplicationWorker(zk, worker_id=worker_id()).run_once()
    report.left = await listed(zk)
    report.seconds = time.monotonic() - started
    return report


def print_report(output: Output, report: ScrubReport) -> None:
    rows = []
    findings = []
    for b in report.bookies:
        r = b.result or {}
        rows.append(
            (
                b.bookie_id,
                b.error or r.get("state", "?"),
                r.get("entries_verified", 0),
                human_bytes(int(r.get("bytes_verified", 0))),
                r.get("errors", 0),
                f"{float(r.get('duration_s', 0.0)):.1f} s",
            )
        )
        findings += [
            (b.bookie_id, f["ledger_id"], f["entry_id"], f["reason"], f["detail"])
            for f in r.get("findings", [])
        ]
    output.table(
        "scrub",
        ["bookie", "state", "entries", "verified", "errors", "took"],
        rows,
        right_align=["entries", "verified", "errors", "took"],
    )
    if findings:
        output.table(
            "bad copies found by the scrubbers",
            ["bookie", "ledger", "entry", "reason", "detail"],
            findings[:FINDINGS_SHOWN_MAX],
            right_align=["ledger", "entry"],
        )
    _print_replica_check(output, report.replica_check)
    if report.repair is not None:
        print_repair(output, report.repair)
    print_set(output, report.left, time.time())


def _print_replica_check(output: Output, check: VerificationPass | None) -> None:
    if check is None:
        return
    output.table(
        f"replica check at {check.percent:g} %: {check.ledgers_checked} ledgers, "
        f"{check.entries_checked} entries, {check.copies_checked} copies",
        ["ledger", "entry", "bookie", "reason"],
        [(b.ledger_id, b.entry_id, b.bookie, b.reason) for b in check.bad_copies][
            :FINDINGS_SHOWN_MAX
        ],
        right_align=["ledger", "entry"],
    )


def _check_args(args: argparse.Namespace) -> None:
    if args.rate_mb_s is not None and not args.rate_mb_s >= 0:
        raise UsageError(f"--rate-mb-s {args.rate_mb_s}: must be >= 0")
    if args.verify_percent is not None and not 0 <= args.verify_percent <= 100:
        raise UsageError(f"--verify-percent {args.verify_percent}: must be in [0, 100]")
    if not args.wait_s > 0:
        raise UsageError(f"--wait-s {args.wait_s}: must be > 0")


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    output = Output(bool(args.json))

    async def main() -> ScrubReport:
        async with admin_session(args.zk) as zk:
            return await run_scrub(zk, args, output)

    report = run_async(main)
    if output.json_mode:
        output.emit_json(report.to_json())
    else:
        print_report(output, report)
    return 0 if report.healthy else 1
