"""The scrubber in-process, against a real `LedgerStorage` (entry logs and RocksDB index
in a temporary directory): it verifies every indexed entry, finds flipped bytes, an
index record past its log's end and one naming a log that is gone, reports them to the
under-replicated set (a recording stand-in for ZooKeeper), and keeps to its rate."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from blobstore.wire import protocol
from blobstore.wire import underreplicated as urs
from bookie.entry_logger import RECORD_LENGTH, location, split_location
from bookie.http_admin import BadRequestError, parse_scrub_query
from bookie.ledger_storage import LedgerStorage
from bookie.scrubber import (
    Scrubber,
    first_wait_s,
    pause_for_rate,
    read_last_done_at,
)
from tests.bookie.raw_client import seed
from tests.bookie.test_entry_log_faults import (
    MASTER_KEY,
    Expected,
    add_entries,
    checkpoint,
    open_storage,
)

BOOKIE_ID = "127.0.0.1:3181"


class RecordingZk:
    """What the scrubber asks of ZooKeeper: sequential creates, recorded."""

    def __init__(self) -> None:
        self.created: list[tuple[str, bytes]] = []

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        assert sequence and makepath and not ephemeral
        self.created.append((path, value))
        return f"{path}{len(self.created):010d}"


def _stored(tmp_path: Path) -> tuple[LedgerStorage, Expected]:
    storage = open_storage(tmp_path)
    expected: Expected = {}
    add_entries(storage, random.Random(seed()), [3, 5, 8], 40, expected)
    checkpoint(storage, 1)
    return storage, expected


def _payload_keys(storage: LedgerStorage, expected: Expected) -> list[tuple[int, int]]:
    """Indexed entries with a payload, in key order."""
    return [
        (ledger_id, entry_id)
        for ledger_id, entry_id, _ in storage.index.locations()
        if len(expected[(ledger_id, entry_id)]) > protocol.ENTRY_HEADER_BYTES + 10
    ]


def _flip_byte(storage: LedgerStorage, ledger_id: int, entry_id: int) -> None:
    loc = storage.index.get_location(ledger_id, entry_id)
    assert loc is not None
    log_id, offset = split_location(loc)
    at = offset + RECORD_LENGTH.size + protocol.ENTRY_HEADER_BYTES + 5
    with open(storage.entry_logger.path(log_id), "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 1]))


def _point_index_at(storage: LedgerStorage, ledger_id: int, entry_id: int, loc: int) -> None:
    storage.index.write([(ledger_id, entry_id, loc)], {}, {}, None, sync=False)


def _scrub(storage: LedgerStorage, zk: RecordingZk) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        scrubber = Scrubber(
            zk,  # type: ignore[arg-type]
            storage,
            lambda: BOOKIE_ID,
            interval_s=0.0,
            rate_bytes_per_s=0.0,
        )
        try:
            return (await scrubber.scrub("admin", 0.0)).to_json()
        finally:
            await scrubber.close()

    return asyncio.run(run())


def test_scrub_verifies_every_entry_and_reports_the_bad_ones(tmp_path: Path) -> None:
    storage, expected = _stored(tmp_path)
    try:
        zk = RecordingZk()
        clean = _scrub(storage, zk)
        assert clean["entries_verified"] == len(expected)
        assert clean["bytes_verified"] == sum(len(d) for d in expected.values())
        assert clean["errors"] == 0 and zk.created == []

        flipped, past_end, log_gone = _payload_keys(storage, expected)[:3]
        _flip_byte(storage, *flipped)
        log_id, _ = split_location(storage.index.get_location(*past_end) or 0)
        _point_index_at(
            storage, *past_end, location(log_id, storage.entry_logger.log_bytes(log_id) + 64)
        )
        _point_index_at(storage, *log_gone, location(0xFFFF, 16))
        result = _scrub(storage, zk)
        # A repair wrote the flipped entry again: its copy in the write cache replaces
        # the indexed one at the next checkpoint, so the bad one is not reported again.
        storage.apply_add(*flipped, MASTER_KEY, expected[flipped])
        after_repair = _scrub(storage, zk)
        checkpoint(storage, 2)
        after_checkpoint = _scrub(storage, zk)
    finally:
        asyncio.run(storage.close())
    assert after_repair["errors"] == 2 and after_checkpoint["errors"] == 2
    assert {(f["ledger_id"], f["entry_id"]) for f in after_checkpoint["findings"]} == {
        past_end,
        log_gone,
    }
    found = {(f["ledger_id"], f["entry_id"], f["reason"]) for f in result["findings"]}
    assert found == {
        (*flipped, urs.DIGEST_MISMATCH),
        (*past_end, urs.UNREADABLE),
        (*log_gone, urs.UNREADABLE),
    }
    assert result["errors"] == 3 and result["state"] == "done"
    reports = [urs.Report.decode(value) for _, value in zk.created[:2]]
    reported = {(r.ledger_id, e, r.reason) for r in reports for e in r.entry_ids()}
    assert reported == found
    assert {r.bookie for r in reports} == {BOOKIE_ID}
    assert all(
        path == urs.report_path_prefix(r.ledger_id)
        for (path, _), r in zip(zk.created[:2], reports, strict=True)
    )


def test_scrub_keeps_to_its_rate(tmp_path: Path) -> None:
    storage, expected = _stored(tmp_path)
    slept: list[float] = []
    now = [0.0]

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    total = sum(len(d) for d in expected.values())
    rate = total / 20  # the pass must take 20 s
    try:

        async def run() -> None:
            scrubber = Scrubber(
                RecordingZk(),  # type: ignore[arg-type]
                storage,
                lambda: BOOKIE_ID,
                interval_s=0.0,
                rate_bytes_per_s=rate,
                clock=lambda: now[0],
                sleep=sleep,
            )
            try:
                await scrubber.scrub("periodic", rate)
            finally:
                await scrubber.close()

        asyncio.run(run())
    finally:
        asyncio.run(storage.close())
    assert len(slept) > 1, slept
    # Paced batch by batch: the pass ends when the last batch's bytes are due.
    assert sum(slept) == pytest.approx(20.0), slept


def test_pause_for_rate() -> None:
    assert pause_for_rate(10_000_000, 0.5, 0.0) == 0.0  # not limited
    assert pause_for_rate(10_000_000, 0.5, 10e6) == pytest.approx(0.5)
    assert pause_for_rate(10_000_000, 2.0, 10e6) == 0.0  # behind already


def test_parse_scrub_query() -> None:
    assert parse_scrub_query("") is None
    assert parse_scrub_query("rate_mb_s=2.5") == 2.5e6
    assert parse_scrub_query("rate_mb_s=0") == 0.0
    for bad in (
        "rate_mb_s=-1",
        "rate_mb_s=nan",
        "rate_mb_s=x",
        "speed=1",
        "rate_mb_s=1&rate_mb_s=2",
    ):
        with pytest.raises(BadRequestError):
            parse_scrub_query(bad)


def test_first_wait_after_a_start() -> None:
    day = 86400.0
    assert first_wait_s(None, 1e9, day, 0.0) == day / 2  # never scrubbed: half to whole
    assert first_wait_s(None, 1e9, day, 0.999) == pytest.approx(day, rel=1e-3)
    assert first_wait_s(1e9 - 1000, 1e9, day, 0.0) == day - 1000  # counted from the last
    assert first_wait_s(1e9 - 2 * day, 1e9, day, 0.0) == 0.0  # overdue: now
    assert first_wait_s(1e9 - 2 * day, 1e9, day, 0.5) == pytest.approx(0.025 * day)


def test_a_finished_pass_is_recorded(tmp_path: Path) -> None:
    storage, _ = _stored(tmp_path)
    try:
        assert read_last_done_at(str(tmp_path)) is None
        _scrub(storage, RecordingZk())
    finally:
        asyncio.run(storage.close())
    recorded = read_last_done_at(str(tmp_path))
    assert recorded is not None and recorded > 1e9
