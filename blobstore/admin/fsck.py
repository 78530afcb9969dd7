"""Check that every byte the catalog points to is stored, readable and fully replicated.

For every extent of every object version and of every part of an upload in progress:
the ledger exists, the extent lies inside it, and each of its entries is read from every
bookie of its write set (directly, one bookie at a time) and verified (CRC32C digest,
ledger and entry ids). Findings:

- dangling reference: an extent whose ledger is gone, which runs past the end of its
  closed ledger, or one of whose entries no bookie holds with a valid digest (data loss);
- under-replicated entry: fewer than WQ good copies (a bookie lost or corrupted its copy,
  or is down); still readable, but one more fault away from loss;
- divergent entry: two good copies with different payloads (never expected);
- unreferenced ledger: a CLOSED ledger that nothing references (garbage the maintenance
  job deletes; reported, but a failure only with --strict);
- unreadable manifest: an object whose part list (kept in ledger entries, not in its
  record) cannot be read; its data extents are then unknown, so no ledger is called
  unreferenced in that pass;
- open ledger: OPEN or IN_RECOVERY, with its writer and whether that writer is alive
  (a dead writer's ledger is closed by any gateway's sweeper).

With `--queue-repairs`, the missing and corrupt copies of under-replicated entries are
added to the under-replicated set, where the replication worker (the auditor's pass,
`blobstore admin underreplicated --repair`) copies a good replica back.

Exit 0 when healthy, 1 when a problem is found. Every finding is confirmed by reading
the record again, so objects changed while fsck runs are not reported.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from blobstore.admin._catalog_scan import (
    Found,
    Holder,
    bucket_names,
    manifest_reader,
    still_references,
    walk_bucket,
)
from blobstore.admin._output import (
    Output,
    add_common_arguments,
    admin_session,
    human_bytes,
    run_async,
)
from blobstore.catalog import Catalog
from blobstore.catalog.records import Extent
from blobstore.ledger.bookie_client import (
    BookieClientPool,
)
from blobstore.ledger.distribution_schedule import write_set_bookies
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.ledger.ledger_manager import LedgerManager
from blobstore.ledger.ledger_metadata import LedgerMetadata, MetadataFormatError
from blobstore.ledger.replicas import CORRUPT, MISSING, OK, read_verified
from blobstore.objects.manifest import ManifestReader
from blobstore.recovery import underreplication
from blobstore.recovery.sweeper import GATEWAYS_PATH
from blobstore.runtime.aio import for_each
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import underreplicated as urs
from blobstore.wire.protocol import ENTRY_HEADER_BYTES

logger = logging.getLogger(__name__)

CONCURRENCY_DEFAULT = 16
CONCURRENCY_MAX = 256
TABLE_ROWS_MAX = 50
READ_TIMEOUT_S = 10.0

# Ledger id -> the references to its entries: who holds which extent.
_References = dict[int, list[tuple[Holder, Extent]]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--bucket", help="check only this bucket (skips the unreferenced check)")
    parser.add_argument(
        "--strict", action="store_true", help="unreferenced ledgers count as a problem"
    )
    parser.add_argument(
        "--queue-repairs",
        action="store_true",
        help="add the missing and corrupt copies found to the under-replicated set",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY_DEFAULT,
        help=f"entries checked at once (default {CONCURRENCY_DEFAULT})",
    )


@dataclass(slots=True)
class EntryCheck:
    ledger_id: int
    entry_id: int
    write_quorum: int
    copies: dict[str, str] = field(default_factory=dict)  # bookie -> outcome
    divergent: bool = False

    @property
    def good(self) -> int:
        return sum(1 for outcome in self.copies.values() if outcome == OK)

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "good_copies": self.good,
            "write_quorum": self.write_quorum,
            "copies": dict(sorted(self.copies.items())),
        }


# Kinds of dangling reference.
LEDGER_MISSING = "ledger_missing"
BEYOND_END = "beyond_ledger_end"
ENTRY_LOST = "entry_lost"


@dataclass(slots=True)
class Dangling:
    holder: Holder
    extent: Extent
    kind: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            **self.holder.to_json(),
            "ledger_id": self.extent.ledger_id,
            "first_entry": self.extent.first_entry,
            "last_entry": self.extent.last_entry,
            "kind": self.kind,
            "reason": self.reason,
        }


@dataclass(slots=True)
class FsckReport:
    strict: bool
    buckets: int = 0
    object_versions: int = 0
    parts: int = 0
    extents: int = 0
    ledgers: int = 0
    entries_checked: int = 0
    copies_checked: int = 0
    dangling: list[Dangling] = field(default_factory=list)
    under_replicated: list[EntryCheck] = field(default_factory=list)
    divergent: list[EntryCheck] = field(default_factory=list)
    corrupt_copies: int = 0
    bad_metadata: list[dict[str, Any]] = field(default_factory=list)
    unreferenced: list[dict[str, Any]] = field(default_factory=list)
    open_ledgers: list[dict[str, Any]] = field(default_factory=list)
    unreadable_manifests: list[dict[str, Any]] = field(default_factory=list)
    unreferenced_checked: bool = True
    seconds: float = 0.0
    repairs_queued: int | None = None  # copies added to the under-replicated set

    @property
    def healthy(self) -> bool:
        problems = (
            len(self.dangling)
            + len(self.under_replicated)
            + len(self.divergent)
            + len(self.bad_metadata)
            + len(self.unreadable_manifests)
        )
        if self.strict:
            problems += len(self.unreferenced)
        return problems == 0

    def summary(self) -> dict[str, Any]:
        return {
            "buckets": self.buckets,
            "object_versions": self.object_versions,
            "upload_parts": self.parts,
            "extents": self.extents,
            "ledgers": self.ledgers,
            "entries_checked": self.entries_checked,
            "copies_checked": self.copies_checked,
            "dangling_references": len(self.dangling),
            "under_replicated_entries": len(self.under_replicated),
            "divergent_entries": len(self.divergent),
            "corrupt_copies": self.corrupt_copies,
            "bad_ledger_metadata": len(self.bad_metadata),
            "unreadable_manifests": len(self.unreadable_manifests),
            "unreferenced_ledgers": len(self.unreferenced) if self.unreferenced_checked else None,
            "unreferenced_bytes": sum(u["length"] for u in self.unreferenced),
            "open_ledgers": len(self.open_ledgers),
            "seconds": round(self.seconds, 3),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "strict": self.strict,
            "summary": self.summary(),
            "dangling": [d.to_json() for d in self.dangling],
            "under_replicated": [e.to_json() for e in self.under_replicated],
            "divergent": [e.to_json() for e in self.divergent],
            "bad_metadata": self.bad_metadata,
            "unreadable_manifests": self.unreadable_manifests,
            "unreferenced_ledgers": self.unreferenced,
            "open_ledgers": self.open_ledgers,
            "repairs_queued": self.repairs_queued,
        }


class FsckOp:
    """One fsck pass over the catalog and the ledgers it references."""

    def __init__(
        self,
        zk: ZooKeeperClient,
        output: Output,
        *,
        bucket: str | None,
        strict: bool,
        concurrency: int,
    ) -> None:
        self._zk = zk
        self._output = output
        self._bucket = bucket
        self._concurrency = concurrency
        self._manager = LedgerManager(zk)
        self._catalog = Catalog(zk)
        self._pool = BookieClientPool(request_timeout_s=READ_TIMEOUT_S)
        self._metadata: dict[int, LedgerMetadata | None] = {}  # None: no such ledger
        self.report = FsckReport(strict=strict, unreferenced_checked=bucket is None)

    async def run(self) -> FsckReport:
        started = time.monotonic()
        await self._catalog.start()
        try:
            async with manifest_reader(self._zk) as manifests:
                await self._run(manifests)
        finally:
            await self._catalog.close()
            await self._pool.close()
        self.report.seconds = time.monotonic() - started
        return self.report

    async def _run(self, manifests: ManifestReader) -> None:
        ledger_ids = await self._manager.list_ledger_ids()
        with self._output.progress("ledger metadata", len(ledger_ids)) as advance:
            await for_each(ledger_ids, self._load_metadata, self._concurrency, advance)
        self.report.ledgers = sum(1 for m in self._metadata.values() if m is not None)
        by_ledger, suspects = await self._walk_catalog(manifests)
        problems, vanished = await self._check_entries(by_ledger)
        lost, under_replicated, divergent = entry_findings(problems, by_ledger)
        self.report.under_replicated.extend(under_replicated)
        self.report.divergent.extend(divergent)
        suspects += lost
        suspects += vanished_references(vanished, by_ledger)
        referenced_ledgers = set(by_ledger) | {s.extent.ledger_id for s in suspects}
        await self._confirm_dangling(manifests, suspects)
        await self._classify_ledgers(referenced_ledgers)

    async def _walk_catalog(self, manifests: ManifestReader) -> tuple[_References, list[Dangling]]:
        """Which extents of which ledgers the catalog references, and by whom; and the
        extents the ledgers' metadata already shows as dangling. Memory is O(extents);
        entries are generated from the extents when checked."""
        by_ledger: _References = defaultdict(list)
        suspects: list[Dangling] = []
        names = await bucket_names(self._catalog, self._bucket)
        self.report.buckets = len(names)
        with self._output.progress("catalog", None) as advance:
            for name in names:
                async for found in walk_bucket(self._catalog, manifests, name):
                    self._count_holder(found)
                    for extent in found.extents:
                        problem = await self._extent_problem(extent)
                        if problem is not None:
                            suspects.append(Dangling(found.holder, extent, *problem))
                        else:
                            by_ledger[extent.ledger_id].append((found.holder, extent))
                    advance(1)
        return by_ledger, suspects

    def _count_holder(self, found: Found) -> None:
        report = self.report
        if found.manifest_error:
            report.unreadable_manifests.append(
                {**found.holder.to_json(), "error": found.manifest_error}
            )
            report.unreferenced_checked = False  # some extents unknown
        if found.holder.upload_id:
            report.parts += 1
        else:
            report.object_versions += 1
        report.extents += len(found.extents)

    async def _check_entries(self, by_ledger: _References) -> tuple[list[EntryCheck], set[int]]:
        """Read every copy of every referenced entry (each entry once, however many
        extents share it): (the entries with a problem, in order; the ledgers deleted
        while their entries were checked)."""
        ranges = {ledger_id: _merged_ranges(refs) for ledger_id, refs in by_ledger.items()}
        entry_count = sum(last - first + 1 for r in ranges.values() for first, last in r)
        problems: list[EntryCheck] = []
        vanished: set[int] = set()

        async def check(key: tuple[int, int]) -> None:
            result = await self._checked_entry(*key)
            if result is None:
                vanished.add(key[0])
            elif _has_problem(result):
                problems.append(result)

        keys = (
            (ledger_id, entry_id)
            for ledger_id in sorted(ranges)
            for first, last in ranges[ledger_id]
            for entry_id in range(first, last + 1)
        )
        with self._output.progress("entries", entry_count) as advance:
            await for_each(keys, check, self._concurrency, advance)
        problems.sort(key=lambda e: (e.ledger_id, e.entry_id))
        return problems, vanished

    async def _checked_entry(self, ledger_id: int, entry_id: int) -> EntryCheck | None:
        """One entry checked and counted; None if its ledger is gone."""
        result = await self._check_entry(ledger_id, entry_id)
        if result is None:
            return None
        if _has_problem(result):
            # The ledger may have changed while we read (an ensemble change of an
            # open ledger, a deletion): look again with fresh metadata.
            result = await self._recheck(result)
            if result is None:
                return None
        self.report.entries_checked += 1
        self.report.copies_checked += len(result.copies)
        self.report.corrupt_copies += sum(1 for o in result.copies.values() if o == CORRUPT)
        return result

    async def _confirm_dangling(self, manifests: ManifestReader, suspects: list[Dangling]) -> None:
        """Report each dangling reference the catalog as it is now still holds."""
        seen: set[tuple[Holder, Extent]] = set()
        for suspect in suspects:
            if (suspect.holder, suspect.extent) in seen:
                continue
            seen.add((suspect.holder, suspect.extent))
            if not await still_references(self._catalog, manifests, suspect.holder, suspect.extent):
                continue
            if suspect.kind == LEDGER_MISSING and await self._ledger_now_exists(
                suspect.extent.ledger_id
            ):
                continue
            self.report.dangling.append(suspect)

    async def _load_metadata(self, ledger_id: int) -> None:
        try:
            self._metadata[ledger_id] = (await self._manager.read(ledger_id)).value
        except NoSuchLedgerError:
            self._metadata[ledger_id] = None
        except MetadataFormatError as e:
            self._metadata[ledger_id] = None
            if all(b["ledger_id"] != ledger_id for b in self.report.bad_metadata):
                self.report.bad_metadata.append({"ledger_id": ledger_id, "error": str(e)})

    async def _metadata_for(self, ledger_id: int) -> LedgerMetadata | None:
        if ledger_id not in self._metadata:  # created after the listing
            await self._load_metadata(ledger_id)
        return self._metadata[ledger_id]

    async def _ledger_now_exists(self, ledger_id: int) -> bool:
        await self._load_metadata(ledger_id)
        return self._metadata[ledger_id] is not None

    async def _extent_problem(self, extent: Extent) -> tuple[str, str] | None:
        """(kind, reason) when the extent cannot be read from its ledger's metadata."""
        metadata = await self._metadata_for(extent.ledger_id)
        if metadata is None:
            return LEDGER_MISSING, f"ledger {extent.ledger_id} does not exist"
        if metadata.closed and extent.last_entry > metadata.last_entry_id:
            return BEYOND_END, (
                f"ledger {extent.ledger_id} ends at entry {metadata.last_entry_id}, "
                f"extent runs to {extent.last_entry}"
            )
        return None

    async def _check_entry(self, ledger_id: int, entry_id: int) -> EntryCheck | None:
        """Every copy of one entry read and verified; None if the ledger is gone (deleted
        while fsck runs: its references are confirmed against the catalog later)."""
        metadata = self._metadata.get(ledger_id)
        if metadata is None:
            return None
        bookies = write_set_bookies(
            entry_id, metadata.ensemble_for(entry_id), metadata.write_quorum
        )
        result = EntryCheck(ledger_id, entry_id, metadata.write_quorum)
        digests: set[bytes] = set()

        async def read_copy(bookie_id: str) -> None:
            outcome, data = await read_verified(self._pool, bookie_id, ledger_id, entry_id)
            result.copies[bookie_id] = outcome
            if data is not None:
                # Payload only: a recovery re-adds entries with the LAC it knows, so
                # good copies may differ in their header's LAC, never in their bytes.
                digests.add(hashlib.sha256(memoryview(data)[ENTRY_HEADER_BYTES:]).digest())

        await asyncio.gather(*(read_copy(b) for b in bookies))
        result.divergent = len(digests) > 1
        return result

    async def _recheck(self, result: EntryCheck) -> EntryCheck | None:
        """The entry checked again against fresh metadata; None if its ledger is gone."""
        await self._load_metadata(result.ledger_id)  # replaces the cached copy
        if self._metadata[result.ledger_id] is None:
            return None
        return await self._check_entry(result.ledger_id, result.entry_id)

    async def _classify_ledgers(self, referenced: set[int]) -> None:
        try:
            live_writers = set(await self._zk.get_children(GATEWAYS_PATH))
        except NoNodeError:
            live_writers = set()
        for ledger_id, metadata in sorted(self._metadata.items()):
            if metadata is None:
                continue
            if not metadata.closed:
                writer = metadata.custom.get("writer", "")
                self.report.open_ledgers.append(
                    {
                        "ledger_id": ledger_id,
                        "state": metadata.state,
                        "writer": writer,
                        "writer_alive": writer in live_writers,
                        "purpose": metadata.custom.get("purpose", ""),
                    }
                )
            elif self.report.unreferenced_checked and ledger_id not in referenced:
                self.report.unreferenced.append(
                    {
                        "ledger_id": ledger_id,
                        "length": metadata.length,
                        "entries": metadata.last_entry_id + 1,
                        "purpose": metadata.custom.get("purpose", ""),
                        "ctime": metadata.ctime,
                    }
                )


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.concurrency <= CONCURRENCY_MAX:
        raise UsageError(f"--concurrency must be 1..{CONCURRENCY_MAX}")
    output = Output(args.json)

    async def main() -> FsckReport:
        async with admin_session(args.zk) as zk:
            op = FsckOp(
                zk,
                output,
                bucket=args.bucket,
                strict=args.strict,
                concurrency=args.concurrency,
            )
            report = await op.run()
            if args.queue_repairs:
                report.repairs_queued = await queue_repairs(zk, report)
            return report

    report = run_async(main)
    if output.json_mode:
        output.emit_json(report.to_json())
    else:
        render(output, report)
        if report.repairs_queued is not None:
            output.note(f"{report.repairs_queued} copies queued for repair")
    return 0 if report.healthy else 1


async def queue_repairs(zk: ZooKeeperClient, report: FsckReport) -> int:
    """Add the missing and corrupt copies of under-replicated entries to the
    under-replicated set; how many copies."""
    reasons = {MISSING: urs.MISSING, CORRUPT: urs.DIGEST_MISMATCH}
    grouped: dict[tuple[int, str, str], list[int]] = defaultdict(list)
    for check in report.under_replicated:
        for bookie, outcome in check.copies.items():
            if outcome in reasons:
                grouped[(check.ledger_id, bookie, reasons[outcome])].append(check.entry_id)
    now = time.time()
    for (ledger_id, bookie, reason), entry_ids in sorted(grouped.items()):
        for found in urs.split_reports(ledger_id, bookie, entry_ids, reason, "fsck", now):
            await underreplication.add(zk, found)
    return sum(len(ids) for ids in grouped.values())


def render(output: Output, report: FsckReport) -> None:
    output.table(
        "fsck summary", ["check", "count", "status"], summary_rows(report), right_align=["count"]
    )
    _render_dangling(output, report)
    _render_entries(output, report)
    _render_ledgers(output, report)
    shown = max(len(report.dangling), len(report.under_replicated), len(report.unreferenced))
    if shown > TABLE_ROWS_MAX:
        output.note(f"(tables show the first {TABLE_ROWS_MAX} rows; --json lists all)")
    output.note(
        f"fsck: {'healthy' if report.healthy else 'PROBLEMS FOUND'} "
        f"({report.entries_checked} entries, {report.copies_checked} copies, "
        f"{report.seconds:.1f}s)"
    )


def summary_rows(report: FsckReport) -> list[tuple[str, Any, str]]:
    """The summary table: (check, count, status) for each check."""
    summary = report.summary()
    return [
        ("buckets", summary["buckets"], ""),
        ("object versions", summary["object_versions"], ""),
        ("upload parts", summary["upload_parts"], ""),
        ("extents", summary["extents"], ""),
        ("ledgers", summary["ledgers"], ""),
        ("entries checked", summary["entries_checked"], ""),
        ("copies read", summary["copies_checked"], ""),
        ("dangling references", len(report.dangling), _flag(not report.dangling)),
        (
            "under-replicated entries",
            len(report.under_replicated),
            _flag(not report.under_replicated),
        ),
        ("corrupt copies", report.corrupt_copies, _flag(not report.corrupt_copies)),
        ("divergent entries", len(report.divergent), _flag(not report.divergent)),
        ("bad ledger metadata", len(report.bad_metadata), _flag(not report.bad_metadata)),
        (
            "unreadable manifests",
            len(report.unreadable_manifests),
            _flag(not report.unreadable_manifests),
        ),
        (
            "unreferenced ledgers",
            len(report.unreferenced) if report.unreferenced_checked else "not checked",
            _unreferenced_status(report, summary["unreferenced_bytes"]),
        ),
        ("open ledgers", len(report.open_ledgers), "info"),
    ]


def _unreferenced_status(report: FsckReport, unreferenced_bytes: int) -> str:
    """Unreferenced ledgers are garbage, a problem only with --strict."""
    if report.strict or not report.unreferenced:
        status = _flag(not report.unreferenced)
    else:
        status = "garbage"
    if report.unreferenced:
        status += f" ({human_bytes(unreferenced_bytes)})"
    return status


def _render_dangling(output: Output, report: FsckReport) -> None:
    if report.dangling:
        output.table(
            "dangling references",
            ["object or part", "ledger", "entries", "reason"],
            [
                (d.holder.describe(), d.extent.ledger_id, _range(d.extent), d.reason)
                for d in report.dangling[:TABLE_ROWS_MAX]
            ],
        )


def _render_entries(output: Output, report: FsckReport) -> None:
    """The under-replicated and the divergent entries, and the unreadable manifests."""
    for title, checks in (
        ("under-replicated entries", report.under_replicated),
        ("divergent entries", report.divergent),
    ):
        if checks:
            output.table(
                title,
                ["ledger", "entry", "good / WQ", "copies"],
                [
                    (
                        c.ledger_id,
                        c.entry_id,
                        f"{c.good} / {c.write_quorum}",
                        ", ".join(f"{b}={o}" for b, o in sorted(c.copies.items())),
                    )
                    for c in checks[:TABLE_ROWS_MAX]
                ],
            )
    if report.unreadable_manifests:
        output.table(
            "unreadable manifests (their objects' extents are unknown)",
            ["object", "error"],
            [
                (f"{m['bucket']}/{m['key']} version {m['version_id']}", m["error"])
                for m in report.unreadable_manifests[:TABLE_ROWS_MAX]
            ],
        )


def _render_ledgers(output: Output, report: FsckReport) -> None:
    """The unreferenced and the open ledgers."""
    if report.unreferenced:
        output.table(
            "unreferenced ledgers (garbage for `blobstore maintain`)",
            ["ledger", "bytes", "entries", "purpose"],
            [
                (u["ledger_id"], u["length"], u["entries"], u["purpose"])
                for u in report.unreferenced[:TABLE_ROWS_MAX]
            ],
            right_align=["bytes", "entries"],
        )
    if report.open_ledgers:
        output.table(
            "open ledgers",
            ["ledger", "state", "writer", "writer alive"],
            [
                (o["ledger_id"], o["state"], o["writer"], "yes" if o["writer_alive"] else "no")
                for o in report.open_ledgers[:TABLE_ROWS_MAX]
            ],
        )


def _merged_ranges(refs: list[tuple[Holder, Extent]]) -> list[tuple[int, int]]:
    """The entry ranges the extents cover, sorted and merged (overlaps counted once)."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted((e.first_entry, e.last_entry) for _, e in refs):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _has_problem(check: EntryCheck) -> bool:
    return check.good < check.write_quorum or check.divergent


def entry_findings(
    problems: list[EntryCheck], by_ledger: _References
) -> tuple[list[Dangling], list[EntryCheck], list[EntryCheck]]:
    """What the entries with a problem mean: (the references to an entry with no good
    copy, the under-replicated entries, the divergent entries)."""
    lost: list[Dangling] = []
    under_replicated: list[EntryCheck] = []
    divergent: list[EntryCheck] = []
    for result in problems:
        if result.good == 0:
            outcomes = ", ".join(f"{b}={o}" for b, o in sorted(result.copies.items()))
            reason = f"entry {result.entry_id} has no good copy ({outcomes})"
            lost += [
                Dangling(holder, extent, ENTRY_LOST, reason)
                for holder, extent in by_ledger[result.ledger_id]
                if extent.first_entry <= result.entry_id <= extent.last_entry
            ]
        elif result.good < result.write_quorum:
            under_replicated.append(result)
        if result.divergent:
            divergent.append(result)
    return lost, under_replicated, divergent


def vanished_references(vanished: set[int], by_ledger: _References) -> list[Dangling]:
    """The references to ledgers deleted while fsck checked them."""
    return [
        Dangling(holder, extent, LEDGER_MISSING, f"ledger {ledger_id} was deleted")
        for ledger_id in sorted(vanished)
        for holder, extent in by_ledger[ledger_id]
    ]


def _flag(ok: bool) -> str:
    return "ok" if ok else "PROBLEM"


def _range(extent: Extent) -> str:
    return f"{extent.first_entry}..{extent.last_entry}"
