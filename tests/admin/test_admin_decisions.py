"""The pure decisions of the admin tools: what fsck's findings mean, the du tables and
warnings, and the decommission document. Plain records in, plain values out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from blobstore.admin._catalog_scan import Holder
from blobstore.admin.decommission import decommission_document
from blobstore.admin.du import BucketUsage, du_rows, du_warnings, usage_totals
from blobstore.admin.fsck import (
    ENTRY_LOST,
    LEDGER_MISSING,
    Dangling,
    EntryCheck,
    FsckReport,
    entry_findings,
    summary_rows,
    vanished_references,
)
from blobstore.catalog.records import Extent
from blobstore.ledger.replicas import CORRUPT, MISSING, OK, UNAVAILABLE
from blobstore.recovery.decommission import DecommissionOp, LedgerOutcome

LEDGER = 7
OBJECT = Holder("b", "k", version_id="v1")
PART = Holder("b", "u", upload_id="u1", part_number=2)

_References = dict[int, list[tuple[Holder, Extent]]]


def _extent(first: int, last: int, ledger_id: int = LEDGER) -> Extent:
    return Extent(ledger_id, first, last, length=last - first + 1, entry_size=1)


def _check(entry_id: int, outcomes: list[str], *, divergent: bool = False) -> EntryCheck:
    """An entry of LEDGER written to len(outcomes) bookies (WQ), with these outcomes."""
    copies = {f"bookie-{i}": outcome for i, outcome in enumerate(outcomes)}
    return EntryCheck(LEDGER, entry_id, len(outcomes), copies, divergent)


def _references(*extents: tuple[Holder, int, int]) -> _References:
    """References to LEDGER, as fsck's catalog walk collects them (a defaultdict)."""
    by_ledger: _References = defaultdict(list)
    for holder, first, last in extents:
        by_ledger[LEDGER].append((holder, _extent(first, last)))
    return by_ledger


# ---------------------------------------------------------------- fsck: entry_findings


def _kinds(
    findings: tuple[list[Dangling], list[EntryCheck], list[EntryCheck]],
) -> tuple[list[int], list[int], list[int]]:
    """(the lost entries, by the one-entry extents referencing them; the under-replicated
    entries; the divergent entries)."""
    lost, under_replicated, divergent = findings
    return (
        [d.extent.first_entry for d in lost],
        [c.entry_id for c in under_replicated],
        [c.entry_id for c in divergent],
    )


@pytest.mark.parametrize(
    ("problems", "lost", "under_replicated", "divergent"),
    [
        pytest.param([], [], [], [], id="no-problem-no-finding"),
        pytest.param([_check(0, [OK, OK, OK])], [], [], [], id="wq-good-copies-is-healthy"),
        pytest.param(
            [_check(0, [OK, OK, MISSING])], [], [0], [], id="one-below-wq-is-under-replicated"
        ),
        pytest.param(
            [_check(0, [OK, CORRUPT, UNAVAILABLE])], [], [0], [], id="one-good-copy-is-not-lost"
        ),
        pytest.param(
            [_check(0, [MISSING, CORRUPT, UNAVAILABLE])], [0], [], [], id="no-good-copy-is-lost"
        ),
        pytest.param(
            [_check(0, [OK, OK, OK], divergent=True)], [], [], [0], id="divergent-at-full-wq"
        ),
        pytest.param(
            [_check(0, [OK, OK, MISSING], divergent=True)],
            [],
            [0],
            [0],
            id="divergent-and-under-replicated-both-reported",
        ),
        pytest.param(
            [
                _check(0, [OK, MISSING]),
                _check(1, [MISSING, MISSING]),
                _check(2, [OK, OK], divergent=True),
            ],
            [1],
            [0],
            [2],
            id="each-entry-classified-on-its-own",
        ),
    ],
)
def test_entry_findings_classify_by_good_copies(
    problems: list[EntryCheck], lost: list[int], under_replicated: list[int], divergent: list[int]
) -> None:
    """0 good copies: lost; fewer than WQ: under-replicated; divergent: reported as well."""
    by_ledger = _references((OBJECT, 0, 0), (OBJECT, 1, 1), (OBJECT, 2, 2))  # one per entry
    assert _kinds(entry_findings(problems, by_ledger)) == (lost, under_replicated, divergent)


@pytest.mark.parametrize(
    ("first", "last", "references_entry"),
    [
        pytest.param(5, 5, True, id="extent-of-the-entry-alone"),
        pytest.param(5, 9, True, id="entry-is-the-first-of-the-extent"),
        pytest.param(0, 5, True, id="entry-is-the-last-of-the-extent"),
        pytest.param(6, 9, False, id="extent-starts-one-past-the-entry"),
        pytest.param(0, 4, False, id="extent-ends-one-before-the-entry"),
    ],
)
def test_a_lost_entry_dangles_every_extent_covering_it(
    first: int, last: int, references_entry: bool
) -> None:
    """A lost entry makes a dangling reference of each extent whose range includes it."""
    by_ledger = _references((OBJECT, first, last))
    lost, _, _ = entry_findings([_check(5, [MISSING, MISSING])], by_ledger)
    assert [(d.holder, d.extent) for d in lost] == (
        [(OBJECT, _extent(first, last))] if references_entry else []
    )


def test_a_lost_entry_names_every_holder_and_its_copies_in_bookie_order() -> None:
    """Every holder of a lost entry gets an ENTRY_LOST reference; the reason lists the
    outcome of each copy, sorted by bookie."""
    by_ledger = _references((OBJECT, 0, 3), (PART, 2, 2), (OBJECT, 4, 8))
    check = EntryCheck(LEDGER, 2, 2, {"z": MISSING, "a": CORRUPT})
    lost, under_replicated, divergent = entry_findings([check], by_ledger)
    reason = "entry 2 has no good copy (a=corrupt, z=missing)"
    assert lost == [
        Dangling(OBJECT, _extent(0, 3), ENTRY_LOST, reason),
        Dangling(PART, _extent(2, 2), ENTRY_LOST, reason),
    ]
    assert under_replicated == [] and divergent == []


# ----------------------------------------------------------- fsck: vanished_references


@pytest.mark.parametrize(
    ("vanished", "ledgers"),
    [
        pytest.param(set(), [], id="nothing-vanished-nothing-dangles"),
        pytest.param({8}, [8, 8], id="every-reference-of-a-vanished-ledger"),
        pytest.param({9, 7}, [7, 9], id="in-ledger-order"),
        pytest.param({7, 8, 9}, [7, 8, 8, 9], id="all-vanished"),
    ],
)
def test_vanished_references_are_the_references_to_deleted_ledgers(
    vanished: set[int], ledgers: list[int]
) -> None:
    """Each reference to a ledger deleted during the check dangles, by ledger id; the
    references to ledgers still there do not."""
    by_ledger: _References = {
        7: [(OBJECT, _extent(0, 1, 7))],
        8: [(OBJECT, _extent(0, 1, 8)), (PART, _extent(2, 3, 8))],
        9: [(PART, _extent(0, 0, 9))],
    }
    found = vanished_references(vanished, by_ledger)
    assert [d.extent.ledger_id for d in found] == ledgers
    assert all(d.kind == LEDGER_MISSING for d in found)
    assert [d.reason for d in found] == [f"ledger {ledger} was deleted" for ledger in ledgers]
    expected_pairs = [pair for ledger in sorted(vanished) for pair in by_ledger[ledger]]
    assert [(d.holder, d.extent) for d in found] == expected_pairs


# ------------------------------------------------------------------ fsck: summary_rows

SUMMARY_CHECKS = [
    "buckets",
    "object versions",
    "upload parts",
    "extents",
    "ledgers",
    "entries checked",
    "copies read",
    "dangling references",
    "under-replicated entries",
    "corrupt copies",
    "divergent entries",
    "bad ledger metadata",
    "unreadable manifests",
    "unreferenced ledgers",
    "open ledgers",
]


def _unreferenced(length: int) -> dict[str, Any]:
    return {"ledger_id": 3, "length": length, "entries": 1, "purpose": "", "ctime": 0}


def _statuses(report: FsckReport) -> dict[str, tuple[Any, str]]:
    return {check: (count, status) for check, count, status in summary_rows(report)}


def test_summary_rows_list_every_check_once_in_order() -> None:
    """The summary table has one row per check, in a fixed order."""
    assert [check for check, _, _ in summary_rows(FsckReport(strict=False))] == SUMMARY_CHECKS


def test_a_healthy_report_flags_every_problem_check_ok() -> None:
    """With no finding every problem check is "ok" with a count of 0; counters are plain."""
    report = FsckReport(strict=False, buckets=2, extents=5, entries_checked=9, copies_checked=27)
    rows = _statuses(report)
    assert rows["buckets"] == (2, "") and rows["extents"] == (5, "")
    assert rows["entries checked"] == (9, "") and rows["copies read"] == (27, "")
    problem_checks = SUMMARY_CHECKS[7:14]
    assert {check: rows[check] for check in problem_checks} == dict.fromkeys(
        problem_checks, (0, "ok")
    )
    assert rows["open ledgers"] == (0, "info")


DANGLING = Dangling(OBJECT, _extent(0, 0), LEDGER_MISSING, "gone")


@pytest.mark.parametrize(
    ("changes", "check", "row"),
    [
        pytest.param({"dangling": [DANGLING]}, "dangling references", (1, "PROBLEM")),
        pytest.param(
            {"under_replicated": [_check(0, [OK, MISSING])]},
            "under-replicated entries",
            (1, "PROBLEM"),
        ),
        pytest.param({"corrupt_copies": 1}, "corrupt copies", (1, "PROBLEM")),
        pytest.param(
            {"divergent": [_check(0, [OK, OK], divergent=True)] * 2},
            "divergent entries",
            (2, "PROBLEM"),
        ),
        pytest.param({"bad_metadata": [{"ledger_id": 1}]}, "bad ledger metadata", (1, "PROBLEM")),
        pytest.param(
            {"unreadable_manifests": [{"key": "k"}]}, "unreadable manifests", (1, "PROBLEM")
        ),
        pytest.param({"open_ledgers": [{"ledger_id": 1}]}, "open ledgers", (1, "info")),
        pytest.param(
            {"unreferenced": [_unreferenced(1024)]},
            "unreferenced ledgers",
            (1, "garbage (1.0 KiB)"),
            id="unreferenced-is-garbage-without-strict",
        ),
        pytest.param(
            {"unreferenced": [_unreferenced(1024)], "strict": True},
            "unreferenced ledgers",
            (1, "PROBLEM (1.0 KiB)"),
            id="unreferenced-is-a-problem-with-strict",
        ),
        pytest.param(
            {"unreferenced": [_unreferenced(1000), _unreferenced(24)]},
            "unreferenced ledgers",
            (2, "garbage (1.0 KiB)"),
            id="unreferenced-bytes-are-summed",
        ),
        pytest.param(
            {"strict": True},
            "unreferenced ledgers",
            (0, "ok"),
            id="no-unreferenced-is-ok-with-strict",
        ),
        pytest.param(
            {"unreferenced_checked": False},
            "unreferenced ledgers",
            ("not checked", "ok"),
            id="unreferenced-not-checked",
        ),
    ],
)
def test_summary_rows_flag_each_finding(
    changes: dict[str, Any], check: str, row: tuple[Any, str]
) -> None:
    """A finding shows its count and flags its row (PROBLEM, garbage or info)."""
    report = FsckReport(**{"strict": False, **changes})
    assert _statuses(report)[check] == row


# ----------------------------------------------------------------------------- du


def _usage(bucket: str, ledgers: dict[int, int] | None = None, **counts: int) -> BucketUsage:
    usage = BucketUsage(bucket, ledgers=ledgers or {})
    for name, value in counts.items():
        setattr(usage, name, value)
    return usage


EMPTY_TOTALS = {
    "buckets": 0,
    "objects": 0,
    "versions": 0,
    "logical_bytes": 0,
    "stored_bytes": 0,
    "tiered_bytes": 0,
    "ledgers_used": 0,
}


@pytest.mark.parametrize(
    ("usages", "totals"),
    [
        pytest.param([], EMPTY_TOTALS, id="no-bucket"),
        pytest.param([_usage("a")], {**EMPTY_TOTALS, "buckets": 1}, id="one-empty-bucket"),
        pytest.param(
            [
                _usage("a", {1: 10, 2: 5}, objects=1, versions=2, logical_bytes=15),
                _usage("b", {2: 7, 3: 1}, objects=3, versions=3, stored_bytes=24, tiered_bytes=4),
            ],
            {
                "buckets": 2,
                "objects": 4,
                "versions": 5,
                "logical_bytes": 15,
                "stored_bytes": 24,
                "tiered_bytes": 4,
                "ledgers_used": 3,
            },
            id="sums-and-a-shared-ledger-counted-once",
        ),
    ],
)
def test_usage_totals_sum_the_buckets(usages: list[BucketUsage], totals: dict[str, Any]) -> None:
    """Totals are sums over buckets; a ledger several buckets use counts once."""
    assert usage_totals(usages) == totals


def test_du_rows_of_no_bucket_are_a_zero_total() -> None:
    """Without buckets the table is the TOTAL row alone, all zero."""
    assert du_rows([], usage_totals([])) == [("TOTAL", 0, 0, 0, "0 B", "0 B", "0 B", "0 / 0 B", 0)]


def test_du_rows_are_one_row_per_bucket_then_the_total() -> None:
    """A row per bucket in the given order, bytes made human; the TOTAL row sums them,
    counting a shared ledger once."""
    usages = [
        _usage(
            "b",
            {1: 1, 2: 1},
            objects=2,
            versions=3,
            delete_markers=1,
            logical_bytes=1024,
            stored_bytes=3072,
            tiered_bytes=1023,
            uploads=1,
            upload_bytes=2048,
        ),
        _usage("a", {2: 1}, delete_markers=2, uploads=2, upload_bytes=1 << 20),
    ]
    assert du_rows(usages, usage_totals(usages)) == [
        ("b", 2, 3, 1, "1.0 KiB", "3.0 KiB", "1023 B", "1 / 2.0 KiB", 2),
        ("a", 0, 0, 2, "0 B", "0 B", "0 B", "2 / 1.0 MiB", 1),
        ("TOTAL", 2, 3, 3, "1.0 KiB", "3.0 KiB", "1023 B", "3 / 1.0 MiB", 2),
    ]


MISSING_WARNING = "warning: {} referenced in missing ledgers: run fsck"
UNREADABLE_WARNING = (
    "warning: {} object versions whose part list could not be read are "
    "counted without their data: run fsck"
)


@pytest.mark.parametrize(
    ("usages", "warnings"),
    [
        pytest.param([], [], id="no-bucket-no-warning"),
        pytest.param([_usage("a", logical_bytes=5)], [], id="clean-bucket-no-warning"),
        pytest.param(
            [_usage("a", missing_ledger_bytes=1)],
            [MISSING_WARNING.format("1 B")],
            id="one-missing-byte-warns",
        ),
        pytest.param(
            [_usage("a", unreadable_manifests=1)],
            [UNREADABLE_WARNING.format(1)],
            id="one-unreadable-manifest-warns",
        ),
        pytest.param(
            [
                _usage("a", missing_ledger_bytes=1000, unreadable_manifests=1),
                _usage("b", missing_ledger_bytes=24, unreadable_manifests=2),
            ],
            [MISSING_WARNING.format("1.0 KiB"), UNREADABLE_WARNING.format(3)],
            id="summed-over-buckets-missing-first",
        ),
    ],
)
def test_du_warnings_name_what_the_totals_leave_out(
    usages: list[BucketUsage], warnings: list[str]
) -> None:
    """Bytes in missing ledgers and unreadable manifests each give one summed warning."""
    assert du_warnings(usages) == warnings


# ------------------------------------------------------------------- decommission


@dataclass(slots=True)
class _FinishedPass:
    """The fields of a finished DecommissionOp that its document reads."""

    bookie_id: str = "bookie-1:3181"
    safe_to_remove: bool = False
    bytes_copied: int = 0
    outcomes: list[LedgerOutcome] = field(default_factory=list)
    remaining: list[int] = field(default_factory=list)


def _document(finished: _FinishedPass) -> dict[str, Any]:
    return decommission_document(cast(DecommissionOp, finished))


MOVED_A = LedgerOutcome(1, "moved", segments_moved=2, entries_copied=10, replacements=["x"])
MOVED_B = LedgerOutcome(4, "moved", segments_moved=1, entries_copied=3, replacements=["y"])
FAILED = LedgerOutcome(2, "failed", "no good copy", segments_moved=1, entries_copied=5)
SKIPPED = LedgerOutcome(3, "skipped", "open", entries_copied=7)
NOT_ON_BOOKIE = LedgerOutcome(5, "not_on_bookie")


@pytest.mark.parametrize(
    ("outcomes", "ledgers_moved", "segments_moved", "entries_copied"),
    [
        pytest.param([], 0, 0, 0, id="nothing-touched"),
        pytest.param([MOVED_A], 1, 2, 10, id="one-moved"),
        pytest.param([FAILED, SKIPPED, NOT_ON_BOOKIE], 0, 0, 0, id="only-moved-ledgers-count"),
        pytest.param([MOVED_A, FAILED, SKIPPED, MOVED_B], 2, 3, 13, id="moved-summed"),
    ],
)
def test_decommission_document_counts_only_moved_ledgers(
    outcomes: list[LedgerOutcome], ledgers_moved: int, segments_moved: int, entries_copied: int
) -> None:
    """Moved ledgers, segments and entries count the "moved" outcomes alone; every
    outcome is listed, in the pass's order."""
    document = _document(_FinishedPass(outcomes=outcomes))
    assert (
        document["ledgers_moved"],
        document["segments_moved"],
        document["entries_copied"],
    ) == (ledgers_moved, segments_moved, entries_copied)
    assert document["ledgers"] == [o.to_json() for o in outcomes]


@pytest.mark.parametrize(
    ("safe_to_remove", "remaining"),
    [pytest.param(True, [], id="safe"), pytest.param(False, [2, 3], id="not-safe-yet")],
)
def test_decommission_document_reports_the_pass_as_it_ended(
    safe_to_remove: bool, remaining: list[int]
) -> None:
    """The bookie, whether it is safe to remove, the bytes copied and the ledgers still
    naming it are reported as the pass left them."""
    finished = _FinishedPass("bookie-9:3181", safe_to_remove, 4096, [MOVED_A, FAILED], remaining)
    assert _document(finished) == {
        "bookie": "bookie-9:3181",
        "safe_to_remove": safe_to_remove,
        "ledgers_moved": 1,
        "segments_moved": 2,
        "entries_copied": 10,
        "bytes_copied": 4096,
        "remaining_ledgers": remaining,
        "ledgers": [MOVED_A.to_json(), FAILED.to_json()],
    }
