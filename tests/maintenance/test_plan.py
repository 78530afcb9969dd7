"""The maintenance job's pure decisions: which ledgers to delete, absolve, condemn and
compact; the rows a record becomes; the rate limit; the options' checks."""

from __future__ import annotations

import pytest

from blobstore.catalog.condemned import TOMBSTONE_S, Condemnation
from blobstore.catalog.records import Extent, ObjectRecord
from blobstore.ledger.ledger_metadata import LedgerMetadata
from blobstore.maintenance import scan
from blobstore.maintenance.execute import RateLimit, remapped
from blobstore.maintenance.lifecycle import AbortUpload
from blobstore.maintenance.options import MaintainOptions, parse_now, parse_phases
from blobstore.maintenance.plan import (
    GcInputs,
    LedgerStat,
    fully_released,
    orphans,
    plan_compaction,
    plan_gc,
)
from blobstore.runtime.errors import UsageError

NOW = 1_800_000_000.0


def closed(ledger_id: int, length: int = 1000, live: int = 0, **kw: object) -> LedgerStat:
    return LedgerStat(ledger_id, "CLOSED", "objects", length, 2, live, live > 0, **kw)  # type: ignore[arg-type]


def inputs(
    stats: list[LedgerStat],
    condemned: dict[int, Condemnation] | None = None,
    covered_zxid: int = 100,
    grace_s: float = 0.0,
    blocked: bool = False,
) -> GcInputs:
    by_id = {s.ledger_id: s for s in stats}
    referenced = frozenset(s.ledger_id for s in stats if s.referenced)
    return GcInputs(by_id, referenced, condemned or {}, covered_zxid, NOW, grace_s, blocked)


def test_unreferenced_closed_object_ledgers_are_condemned_others_not() -> None:
    stats = [
        closed(1),
        closed(2, live=10),
        LedgerStat(3, "OPEN", "objects", 0, 2),
        LedgerStat(4, "CLOSED", "other", 100, 2),
    ]
    plan = plan_gc(inputs(stats))
    assert plan.condemn == [1] and plan.delete == []


def test_a_covered_condemnation_past_its_grace_is_deleted() -> None:
    condemned = {1: Condemnation(1, NOW - 10, czxid=50)}
    assert [c.ledger_id for c in plan_gc(inputs([closed(1)], condemned)).delete] == [1]
    # Not covered: the condemnation was made after the scan's generation was read.
    late = {1: Condemnation(1, NOW - 10, czxid=150)}
    plan = plan_gc(inputs([closed(1)], late))
    assert plan.delete == [] and plan.waiting == [1] and plan.condemn == []
    # Covered but within the grace period.
    plan = plan_gc(inputs([closed(1)], condemned, grace_s=60))
    assert plan.delete == [] and plan.waiting == [1]


def test_a_condemned_ledger_found_referenced_is_absolved_only_by_a_covering_scan() -> None:
    stats = [closed(1, live=10)]
    assert plan_gc(inputs(stats, {1: Condemnation(1, NOW, czxid=50)})).absolve == [1]
    assert plan_gc(inputs(stats, {1: Condemnation(1, NOW, czxid=150)})).absolve == []


def test_tombstones_are_written_for_gone_ledgers_and_forgotten_after_a_week() -> None:
    condemned = {
        1: Condemnation(1, NOW - 5, czxid=50),  # metadata gone, no tombstone yet
        2: Condemnation(2, NOW - 5, NOW - TOMBSTONE_S - 1, czxid=50),
        3: Condemnation(3, NOW - 5, NOW - 60, czxid=50),
    }
    plan = plan_gc(inputs([], condemned))
    assert [c.ledger_id for c in plan.tombstone] == [1]
    assert plan.forget == [2]


def test_a_blocked_scan_deletes_and_condemns_nothing() -> None:
    condemned = {1: Condemnation(1, NOW - 10, czxid=50)}
    plan = plan_gc(inputs([closed(1), closed(2)], condemned, blocked=True))
    assert plan.delete == [] and plan.condemn == []


def test_compaction_takes_the_emptiest_unpinned_ledgers_within_the_byte_bound() -> None:
    stats = [
        closed(1, length=1000, live=100),
        closed(2, length=1000, live=500),
        closed(3, length=1000, live=900),  # over the threshold
        closed(4, length=1000, live=50, pinned=True),
        closed(5, length=1000, live=990),
        closed(6, length=100, live=10),  # too little garbage
        closed(7, length=1000, live=200),
    ]
    choice = plan_compaction(stats, {7: Condemnation(7, NOW)}, 0.8, 200, 10_000)
    assert choice.ledger_ids == [1, 2]
    assert (choice.live_bytes, choice.garbage_bytes) == (600, 1400)
    assert plan_compaction(stats, {}, 0.8, 200, 650).ledger_ids == [1, 7]


def test_ledgers_whose_every_holder_was_released_and_orphans() -> None:
    assert fully_released({1: (3, 3), 2: (3, 2), 3: (0, 0)}) == [1]
    stats = [
        LedgerStat(1, "OPEN", "objects", 0, 2, writer="gone"),
        LedgerStat(2, "OPEN", "objects", 0, 2, writer="alive"),
        LedgerStat(3, "IN_RECOVERY", "objects", 0, 2, writer="gone"),
        LedgerStat(4, "OPEN", "other", 0, 2, writer="gone"),
        closed(5, writer="gone"),
    ]
    assert orphans(stats, {"alive"}) == [1, 3]


def test_plain_records_are_packed_by_ledger_manifest_records_pin_their_ledgers() -> None:
    objects = scan.ObjectExtents()
    plain = ObjectRecord("b", "k", "v1", size=10, extents=(Extent(7, 0, 1, 10, 8),))
    assert list(scan.record_rows(plain, objects)) == []
    two = (Extent(7, 2, 2, 5, 8), Extent(6, 0, 0, 3, 8))
    assert list(scan.record_rows(ObjectRecord("b", "k2", "v9", size=8, extents=two), objects)) == []
    big = ObjectRecord(
        "b", "k", "v2", size=10, manifest=(Extent(9, 3, 3, 50, 64),), manifest_ledgers=(7, 8)
    )
    rows = list(scan.record_rows(big, objects))
    assert [(r[1], r[6]) for r in rows] == [
        (9, scan.ROLE_MANIFEST),
        (7, scan.ROLE_NAMED),
        (8, scan.ROLE_NAMED),
    ]
    assert rows[0] == ("e", 9, 3, 3, 50, 64, "manifest", "b", "k", "v2", "", 0, 1, None, None)
    packed = {r[1]: r for r in objects.rows("b")}
    assert sorted(packed) == [6, 7]
    column = scan.ROW_COLUMNS.index
    seven = packed[7]
    assert (seven[column("length")], seven[column("holders")]) == (15, 2)
    assert (seven[column("role")], seven[column("bucket")]) == (scan.ROLE_OBJECT, "b")
    assert scan.unpacked(seven[column("detail")]) == [
        ("k", "v1", 0, 1, 10, 8),
        ("k2", "v9", 2, 2, 5, 8),
    ]
    assert all(len(r) == len(scan.ROW_COLUMNS) for r in [*rows, *packed.values()])


def test_a_ledger_with_many_extents_packs_into_bounded_rows_counting_holders_once() -> None:
    objects = scan.ObjectExtents()
    count = scan.PACKED_EXTENTS_MAX + 10
    for n in range(count):
        objects.add(f"k{n // 2}", "v", [[5, n, n, 1, 1]])  # two extents per version
    rows = list(objects.rows("b"))
    column = scan.ROW_COLUMNS.index
    assert [len(scan.unpacked(r[column("detail")])) for r in rows] == [scan.PACKED_EXTENTS_MAX, 10]
    assert sum(r[column("holders")] for r in rows) == count // 2
    assert sum(r[column("length")] for r in rows) == count


def test_released_versions_are_found_in_packed_extents() -> None:
    objects = scan.ObjectExtents()
    objects.add("a", "v1", [[1, 0, 0, 4, 4], [2, 0, 0, 4, 4]])
    objects.add("b", "v1", [[1, 1, 1, 4, 4]])
    objects.add("c", "v1", [[2, 1, 1, 4, 4]])
    column = scan.ROW_COLUMNS.index
    rows = [
        (r[column("ledger_id")], r[column("bucket")], r[column("detail")])
        for r in objects.rows("bk")
    ]
    released = scan.ReleasedVersions(
        [(-1, "bk", "a", "v1", ""), (2, "bk", "c", "v1", ""), (1, "bk", "c", "v1", "")]
    )
    found = sorted(released.found_in(rows))
    assert found == [(1, "bk", "a", "v1"), (2, "bk", "a", "v1"), (2, "bk", "c", "v1")]
    assert list(scan.ReleasedVersions([(-1, "other", "a", "v1", "")]).found_in(rows)) == []


def test_every_kind_of_row_has_the_scan_frames_columns() -> None:
    metadata = LedgerMetadata(5, 3, 2, 2, "", ((0, ("a:1", "b:1", "c:1")),))
    rows = [
        scan.count_row(3),
        scan.unresolved_row("b", "k", "v"),
        scan.ledger_row(metadata, 1.5),
        scan.abort_row("b", AbortUpload("k", "u1", "rule", "why")),
    ]
    assert [len(r) for r in rows] == [len(scan.ROW_COLUMNS)] * len(rows)
    assert scan.count_row(3)[scan.ROW_COLUMNS.index("length")] == 3


def test_ranges_are_dealt_in_contiguous_runs_and_the_rest_round_robin() -> None:
    ranges: list[scan.Task] = [
        scan.RangeTask("b", f"{i:02d}", f"{i + 1:02d}", "", ()) for i in range(10)
    ]
    others: list[scan.Task] = [scan.LedgersTask(str(i)) for i in range(3)]
    groups = scan.deal([*ranges, *others], 4)
    assert [g[: [isinstance(t, scan.RangeTask) for t in g].count(True)] for g in groups] == [
        ranges[0:3],
        ranges[3:6],
        ranges[6:8],
        ranges[8:10],
    ]
    assert [t for g in groups for t in g if t in others] == others
    assert [others[0]] == [t for t in groups[0] if t in others]
    assert scan.deal(others[:2], 8) == [[others[0]], [others[1]]]
    assert scan.deal([], 8) == []


def test_neighbouring_ranges_of_a_bucket_are_walked_as_one() -> None:
    a, b, c = (
        scan.RangeTask("b", lo, hi, "", ()) for lo, hi in (("", "m"), ("m", "t"), ("t", None))
    )
    other = scan.RangeTask("c", "", None, "", ())
    ledgers = scan.LedgersTask("d")
    assert scan.merged([a, b, c]) == [scan.RangeTask("b", "", None, "", ())]
    assert scan.merged([a, c, ledgers, other]) == [a, c, ledgers, other]
    assert scan.merged([a, b, other, c]) == [scan.RangeTask("b", "", "t", "", ()), other, c]


def test_remapped_replaces_only_moved_extents() -> None:
    a, b = Extent(1, 0, 0, 5, 5), Extent(2, 0, 0, 5, 5)
    record = ObjectRecord("b", "k", "v", size=10, extents=(a, b))
    moved = remapped(record, {a: Extent(9, 4, 4, 5, 5)})
    assert moved is not None and moved.extents == (Extent(9, 4, 4, 5, 5), b)
    assert remapped(record, {Extent(3, 0, 0, 5, 5): a}) is None


def test_rate_limit_waits_for_the_bytes_beyond_one_seconds_burst() -> None:
    clock = [0.0]
    limit = RateLimit(1000.0, clock=lambda: clock[0])
    assert limit.delay_for(1000) == 0.0
    assert limit.delay_for(500) == pytest.approx(0.5)
    clock[0] += 10.0  # idle: the allowance refills to one second's worth, no more
    assert limit.delay_for(1000) == 0.0
    assert limit.delay_for(1) > 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"zk": ""}, "--zk"),
        ({"master": "nonsense"}, "--master"),
        ({"compact_threshold": 0.0}, "--compact-threshold"),
        ({"compact_threshold": 1.5}, "--compact-threshold"),
        ({"grace_s": -1.0}, "--grace"),
        ({"bandwidth_mb_s": 0.0}, "--bandwidth"),
        ({"phases": ("gc", "archive")}, "--only"),
        ({"pages_per_task": 0}, "--pages-per-task"),
    ],
)
def test_bad_options_are_one_clear_error(changes: dict[str, object], message: str) -> None:
    settings: dict[str, object] = {"zk": "127.0.0.1:2181", **changes}
    with pytest.raises(UsageError, match=message):
        MaintainOptions(**settings)  # type: ignore[arg-type]


def test_good_options_and_parsers() -> None:
    for master in ("local[*]", "local[2]", "spark://h:7077", "k8s://https://h:443", "yarn"):
        MaintainOptions(zk="h:2181", master=master)
    assert parse_now("2026-12-01T00:00:00Z") == parse_now("2026-12-01T00:00:00")
    assert parse_phases("gc, lifecycle") == ("gc", "lifecycle")
    for bad in ("yesterday", "2026-13-01"):
        with pytest.raises(UsageError, match="--now"):
            parse_now(bad)
    with pytest.raises(UsageError, match="--only"):
        parse_phases("gc,foo")


def test_a_failed_run_keeps_the_last_success_time() -> None:
    from prometheus_client import generate_latest

    from blobstore.maintenance.report import Report, previous_success, registry_of

    ok = Report("r1", NOW, False, ["gc"], finished=NOW + 5, outcome="ok")
    text = generate_latest(registry_of(ok)).decode()
    assert previous_success(text) == NOW + 5
    failed = Report("r2", NOW + 60, False, ["gc"], finished=NOW + 65, outcome="failed")
    assert previous_success(generate_latest(registry_of(failed, NOW + 5)).decode()) == NOW + 5
    assert previous_success(generate_latest(registry_of(failed)).decode()) is None


def test_a_packed_row_unpacks_into_a_row_per_extent() -> None:
    objects = scan.ObjectExtents()
    objects.add("a", "v1", [[4, 0, 2, 30, 10], [4, 5, 5, 7, 10]])
    objects.add("b", "v2", [[4, 3, 4, 20, 10]])
    column = scan.ROW_COLUMNS.index
    (row,) = objects.rows("bk")
    packed = (row[column("ledger_id")], row[column("bucket")], row[column("detail")])
    assert list(scan.extent_rows_of(packed)) == [
        (4, 0, 2, 30, 10, "bk", "a", "v1"),
        (4, 5, 5, 7, 10, "bk", "a", "v1"),
        (4, 3, 4, 20, 10, "bk", "b", "v2"),
    ]
    assert (row[column("length")], row[column("holders")]) == (57, 2)
