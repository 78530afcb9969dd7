"""Decisions of replica repair, without processes: the under-replicated set's report
format, merging reports, the auditor's entry sampling and its settings, and read-repair
noting a bad copy only once a good one was served."""

from __future__ import annotations

import asyncio
import random

import pytest

from blobstore.ledger.bookie_client import NoSuchEntryError
from blobstore.ledger.ledger_metadata import STATE_CLOSED, LedgerMetadata
from blobstore.ledger.pending_read_op import PendingReadOp
from blobstore.recovery.replica_verifier import (
    ReplicaCheckSettings,
    sample_entries,
    segment_ranges,
)
from blobstore.recovery.underreplication import StoredReport, merge
from blobstore.runtime.errors import UsageError
from blobstore.wire import protocol
from blobstore.wire import underreplicated as urs


def test_entry_ranges_and_report_round_trip() -> None:
    assert urs.entry_ranges([7, 1, 2, 3, 9, 8, 2]) == [(1, 3), (7, 9)]
    report = urs.Report.of(12, "b:1", [0, 1, 2, 5], urs.MISSING, "reader", 1.5)
    assert report.ranges == ((0, 2), (5, 5)) and report.entry_count == 4
    assert urs.Report.decode(report.encode()) == report
    for bad in (b"{}", b"[1]", b'{"ledger_id": 1, "bookie": "b", "entries": [], "reason": "x"}',
                b'{"ledger_id": 1, "bookie": "b", "entries": [[3, 1]], "reason": "x"}'):  # fmt: skip
        with pytest.raises(ValueError):
            urs.Report.decode(bad)


def test_report_names_and_splitting() -> None:
    prefix = urs.report_path_prefix(42)
    name = prefix.rsplit("/", 1)[1] + "0000000007"
    assert urs.ledger_id_of(name) == 42
    with pytest.raises(ValueError):
        urs.ledger_id_of("lock")
    every_other = range(0, 4 * urs.REPORT_RANGES_MAX, 2)  # one range per entry
    reports = urs.split_reports(1, "b", every_other, urs.MISSING, "x", 0.0)
    assert [len(r.ranges) for r in reports] == [urs.REPORT_RANGES_MAX, urs.REPORT_RANGES_MAX]
    assert sum(r.entry_count for r in reports) == len(every_other)


def test_merge_groups_reports_by_ledger_and_bookie() -> None:
    def stored(name: str, ledger_id: int, bookie: str, ids: list[int], reason: str) -> StoredReport:
        return StoredReport(name, urs.Report.of(ledger_id, bookie, ids, reason, "t", 1.0))

    damage = merge(
        [
            stored("a", 9, "b1", [1, 2], urs.DIGEST_MISMATCH),
            stored("b", 4, "b2", [0], urs.MISSING),
            stored("c", 9, "b1", [2, 3], urs.MISSING),
            stored("d", 9, "b3", [5], urs.UNREADABLE),
        ]
    )
    assert [d.ledger_id for d in damage] == [4, 9]
    nine = damage[1]
    assert nine.entries == {"b1": {1, 2, 3}, "b3": {5}}
    assert nine.entry_count == 4 and len(nine.reports) == 3
    assert nine.to_json()["bookies"] == {"b1": [[1, 3]], "b3": [[5, 5]]}


def test_sample_entries() -> None:
    rng = random.Random(1)
    assert sample_entries(0, 9, 0, rng) == [0, 9]
    assert sample_entries(5, 5, 0, rng) == [5]
    assert sample_entries(3, 2, 100, rng) == []
    assert sample_entries(0, 9, 100, rng) == list(range(10))
    half = sample_entries(0, 101, 50, rng)
    assert len(half) == 2 + 50 and half[0] == 0 and half[-1] == 101


def test_segment_ranges_of_a_closed_ledger() -> None:
    metadata = LedgerMetadata(
        ledger_id=3,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        password_hash="",
        ensembles=((0, ("a", "b", "c")), (10, ("a", "d", "c")), (20, ("e", "d", "c"))),
        state=STATE_CLOSED,
        last_entry_id=12,
    )
    assert segment_ranges(metadata) == [(0, 9, ("a", "b", "c")), (10, 12, ("a", "d", "c"))]


def test_replica_check_settings_from_env() -> None:
    assert ReplicaCheckSettings.from_env({}) == ReplicaCheckSettings(86400.0, 0.0, True)
    settings = ReplicaCheckSettings.from_env(
        {
            "BLOBSTORE_AUDIT_VERIFY_INTERVAL_S": "60",
            "BLOBSTORE_AUDIT_VERIFY_PERCENT": "25",
            "BLOBSTORE_REPLICA_REPAIR": "0",
        }
    )
    assert settings == ReplicaCheckSettings(60.0, 25.0, False)
    for name, value in (
        ("BLOBSTORE_AUDIT_VERIFY_PERCENT", "101"),
        ("BLOBSTORE_AUDIT_VERIFY_INTERVAL_S", "-1"),
        ("BLOBSTORE_AUDIT_VERIFY_INTERVAL_S", "nan"),
        ("BLOBSTORE_AUDIT_VERIFY_PERCENT", "many"),
    ):
        with pytest.raises(UsageError):
            ReplicaCheckSettings.from_env({name: value})


class ScriptedPool:
    """Answers reads from a script: bookie -> an entry's bytes or an error."""

    def __init__(self, answers: dict[str, bytes | Exception]) -> None:
        self.answers = answers

    def allow_connect(self, bookie_id: str) -> None:
        pass

    def read_entry_nowait(self, bookie_id: str, ledger_id: int, entry_id: int, done) -> bool:  # type: ignore[no-untyped-def]
        answer = self.answers[bookie_id]
        loop = asyncio.get_running_loop()
        if isinstance(answer, Exception):
            loop.call_soon(done, None, answer)
        else:
            loop.call_soon(done, protocol.ReadResponse(ledger_id, entry_id, 0, answer), None)
        return True


def _read(answers: dict[str, bytes | Exception], *, closed: bool) -> list[tuple[str, str]]:
    noted: list[tuple[str, str]] = []
    op = PendingReadOp(
        ScriptedPool(answers),  # type: ignore[arg-type]
        7,
        2,
        list(answers),
        10.0,
        lambda ledger_id, entry_id, bookie, reason: noted.append((bookie, reason)),
        report_missing=closed,
    )
    asyncio.run(op.run())
    return noted


def test_read_repair_notes_bad_copies_once_a_good_one_is_served() -> None:
    good = protocol.Entry(7, 2, 1, 5, b"hello").encode()
    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    assert _read({"bad": bytes(corrupt), "good": good}, closed=True) == [
        ("bad", urs.DIGEST_MISMATCH)
    ]
    missing = NoSuchEntryError("no such entry")
    assert _read({"gone": missing, "good": good}, closed=True) == [("gone", urs.MISSING)]
    # An open ledger: a bookie outside the ack quorum may not have the entry yet.
    assert _read({"gone": missing, "good": good}, closed=False) == []
    assert _read({"good": good, "bad": bytes(corrupt)}, closed=True) == []
