"""The journal's write path under ENOSPC, EIO and short writes.

Faults come from `FaultyWrites` (tests/bookie/faulty_file_writes.py), the stand-in for
the system calls the journal writes its records and fsyncs through: in-process against a
real `Journal`, and in real bookie processes started through its launcher (journal
faults from `<root>/journal-faults.json`). The invariants: the add whose write or fsync
failed, the adds queued behind it and every later add are answered READ_ONLY (the code
writers replace a bookie on), never acknowledged; the bookie turns read-only (its
registration and /health say so) and on a full disk keeps serving reads, while on EIO or
a short write it stops with exit code 6; after a restart every acknowledged entry reads
back byte-identical, the journal replays without error, a torn tail record is dropped and
no refused entry is ever read back other than whole.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import random
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from blobstore.ledger import LedgerClient
from blobstore.wire import zk_layout
from blobstore.wire.protocol import Status
from bookie.bookie import EXIT_JOURNAL_FAILED
from bookie.journal import (
    RECORD_PREFIX,
    Journal,
    JournalRecord,
    JournalUnavailableError,
    RecordKind,
    replay,
)
from bookie.ledger_dirs_monitor import journal_error_action
from tests.bookie.faulty_file_writes import (
    JOURNAL_CONTROL_FILE_NAME,
    Fault,
    FaultyWrites,
    write_control_file,
)
from tests.bookie.raw_client import KEY, RawBookie, entry_bytes, http_get, payload_for, seed
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.ledger.conftest import ledger_client, payload, run
from tests.waiting import wait_until, wait_until_async

WAIT_S = 30.0
CHECKPOINT_ARGS = ["--checkpoint-interval-s", "0.3", "--disk-check-interval-s", "0.3"]
PAYLOAD_BYTES = 20_000
Plan = list[tuple[int, int, bytes]]


def record_bytes(ledger_id: int, entry_id: int, payload: bytes) -> int:
    """The size of one add's journal record."""
    return RECORD_PREFIX.size + len(entry_bytes(ledger_id, entry_id, payload))


# A budget that runs out in the middle of the eleventh record: the write that crosses it
# is short, so a torn record is left on disk.
BUDGET_BYTES = record_bytes(1, 0, bytes(PAYLOAD_BYTES)) * 21 // 2


# ---------------------------------------------------------------------- decision


@pytest.mark.parametrize(
    ("error_number", "action"),
    [
        (errno.ENOSPC, "read_only"),  # a full disk: reads go on, restart once space is freed
        (errno.EDQUOT, "read_only"),
        (errno.EIO, "stop"),  # a failing disk (and a short write that cannot be finished)
        (errno.EROFS, "stop"),
        (None, "stop"),  # not an OSError: a record that could not be applied, a bug
    ],
)
def test_a_full_journal_disk_turns_read_only_and_any_other_failure_stops(
    error_number: int | None, action: str
) -> None:
    assert journal_error_action(error_number) == action


# ---------------------------------------------------------------------- in-process


def add_record(ledger_id: int, entry_id: int) -> JournalRecord:
    payload = payload_for(seed(), ledger_id, entry_id, PAYLOAD_BYTES)
    return JournalRecord(
        RecordKind.ADD, ledger_id, entry_id, KEY, entry_bytes(ledger_id, entry_id, payload)
    )


async def submit_all(journal: Journal, records: list[JournalRecord]) -> list[BaseException | None]:
    """Submit each record as its own queue item; the outcome of each."""
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[BaseException | None]] = []
    for record in records:
        future: asyncio.Future[BaseException | None] = loop.create_future()
        encoded = record.encode()
        journal.submit([encoded, b""], len(encoded), None, future.set_result)
        futures.append(future)
    return list(await asyncio.gather(*futures))


JOURNAL_FAULTS = {
    "disk-fills-short-write-then-enospc": (
        [Fault("pwritev", "ENOSPC", budget_bytes=BUDGET_BYTES)],
        errno.ENOSPC,
        True,
    ),
    "eio-on-fdatasync": ([Fault("fdatasync", "EIO")], errno.EIO, False),
    "short-write-that-makes-no-progress": (
        [Fault("pwritev", budget_bytes=BUDGET_BYTES)],
        errno.EIO,
        True,
    ),
}


@pytest.mark.parametrize(
    ("faults", "error_number", "torn"), list(JOURNAL_FAULTS.values()), ids=list(JOURNAL_FAULTS)
)
def test_a_failed_write_refuses_every_add_after_the_last_fsync_and_replays_clean(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    faults: list[Fault],
    error_number: int,
    torn: bool,
) -> None:
    writes = FaultyWrites()
    told: list[BaseException] = []
    acknowledged = [add_record(1, i) for i in range(5)]
    failing = [add_record(1, i) for i in range(5, 35)]

    async def main() -> list[BaseException | None]:
        journal = Journal(
            str(tmp_path),
            max_group_wait_ms=2,
            buffered_writes_threshold_bytes=64 * 1024,
            file_bytes_max=64 << 20,
            queue_entries_max=100_000,
            file_writes=writes,
        )
        journal.open_new_file()
        journal.write_failed = told.append
        journal.start()
        assert await submit_all(journal, acknowledged) == [None] * len(acknowledged)
        writes.set_faults(faults)
        outcomes = await submit_all(journal, failing)
        later = await submit_all(journal, [add_record(1, 35)])
        assert isinstance(later[0], JournalUnavailableError), "a later add was taken"
        await asyncio.wait_for(journal.close(), WAIT_S)
        return outcomes

    outcomes = asyncio.run(main())
    refused = [o for o in outcomes if o is not None]
    assert refused and all(isinstance(o, JournalUnavailableError) for o in refused), outcomes
    # Acknowledged adds come first: none is acknowledged after the first refused one.
    assert outcomes == [None] * (len(outcomes) - len(refused)) + refused
    assert len(told) == 1 and isinstance(told[0], OSError), told
    assert told[0].errno == error_number, told[0]

    caplog.set_level(logging.INFO, logger="bookie.journal")
    replayed = [record for record, _ in replay(str(tmp_path), (0, 0))]
    taken = acknowledged + failing[: len(outcomes) - len(refused)]
    assert replayed[: len(taken)] == taken, "an acknowledged record is missing"
    # Past them only whole records, in order, never acknowledged (a failed fsync's).
    assert (
        replayed[len(taken) :]
        == failing[len(outcomes) - len(refused) :][: len(replayed) - len(taken)]
    )
    assert ("journal_torn_tail" in caplog.text) == torn, caplog.text
    assert [record for record, _ in replay(str(tmp_path), (0, 0))] == replayed  # cut: clean


# ---------------------------------------------------------------------- bookie processes


@pytest.fixture
def faulty_bookies(bookies: BookieFactory, monkeypatch: pytest.MonkeyPatch) -> BookieFactory:
    """`bookies`, started through the fault-injecting launcher (journal faults off until
    a test writes `set_journal_faults(bookie, ...)`)."""
    monkeypatch.setattr(
        "tests.cluster.processes.blobstore_command",
        lambda *args: [sys.executable, "-m", "tests.bookie.faulty_file_writes", *args],
    )
    return bookies


def set_journal_faults(bookie: BookieProcess, faults: list[Fault]) -> None:
    write_control_file(bookie.root, faults, JOURNAL_CONTROL_FILE_NAME)


def plan_for(ledger_id: int, entries: range) -> Plan:
    return [(ledger_id, e, payload_for(seed(), ledger_id, e, PAYLOAD_BYTES)) for e in entries]


async def add_all(port: int, plan: Plan) -> list[Status | None]:
    """Each add's answer; None for one whose answer was lost because the bookie closed
    the connection (it stops on a journal EIO as soon as it has answered what it held:
    the rest of a pipeline may never be read)."""
    client = await RawBookie.connect(port)
    try:
        answers = await asyncio.gather(
            *(client.add(ledger, entry, data) for ledger, entry, data in plan),
            return_exceptions=True,
        )
    finally:
        await client.close()
    statuses: list[Status | None] = []
    for answer in answers:
        if isinstance(answer, ConnectionError):
            statuses.append(None)
        elif isinstance(answer, BaseException):
            raise answer
        else:
            statuses.append(answer)
    return statuses


async def read_all(port: int, plan: Plan) -> list[bytes | None]:
    client = await RawBookie.connect(port)
    try:
        return list(
            await asyncio.gather(*(client.read_payload(ledger, entry) for ledger, entry, _ in plan))
        )
    finally:
        await client.close()


def split_outcomes(plan: Plan, statuses: list[Status | None]) -> tuple[Plan, Plan]:
    """(acknowledged, refused): every answer is OK or READ_ONLY (or lost with the
    connection of a bookie that stopped: not acknowledged), and some are refused."""
    assert set(statuses) <= {Status.OK, Status.READ_ONLY, None}, statuses
    acked = [p for p, s in zip(plan, statuses, strict=True) if s == Status.OK]
    refused = [p for p, s in zip(plan, statuses, strict=True) if s != Status.OK]
    assert refused, "no add was refused"
    return acked, refused


def log_text(bookie: BookieProcess) -> str:
    return (bookie.root / "bookie.log").read_text(errors="replace")


def bookie_info(bookie: BookieProcess) -> dict[str, object]:
    status, body = http_get(bookie.http_port, "/info")
    assert status == 200, body
    return dict(json.loads(body))


def exit_code(bookie: BookieProcess) -> int:
    assert bookie.managed is not None and bookie.managed.process is not None
    return bookie.managed.process.wait(timeout=WAIT_S)


def restart_and_check(bookie: BookieProcess, acked: Plan, refused: Plan, torn: bool) -> None:
    """Restart without faults: the journal replays without error (a torn tail dropped),
    every acknowledged entry reads back, a refused one is absent or whole, and the bookie
    takes writes again."""
    set_journal_faults(bookie, [])
    log_before = len(log_text(bookie))
    bookie.start()
    since = log_text(bookie)[log_before:]
    assert ("journal_torn_tail" in since) == torn, since[-3000:]
    assert asyncio.run(read_all(bookie.port, acked)) == [data for _, _, data in acked]
    for (ledger, entry, data), got in zip(
        refused, asyncio.run(read_all(bookie.port, refused)), strict=True
    ):
        assert got in (None, data), f"refused entry {(ledger, entry)} read back other than whole"
    assert not bookie_info(bookie)["read_only"]
    after = plan_for(9, range(0, 5))
    assert asyncio.run(add_all(bookie.port, after)) == [Status.OK] * len(after)
    assert bookie.stop() == 0


def test_a_full_journal_disk_turns_the_bookie_read_only_and_a_restart_replays(
    faulty_bookies: BookieFactory, zk_client: KazooClient
) -> None:
    (bookie,) = faulty_bookies(1, CHECKPOINT_ARGS)
    before = plan_for(1, range(0, 20))
    assert asyncio.run(add_all(bookie.port, before)) == [Status.OK] * len(before)
    set_journal_faults(bookie, [Fault("pwritev", "ENOSPC", budget_bytes=BUDGET_BYTES)])
    failing = plan_for(1, range(20, 50))
    acked, refused = split_outcomes(failing, asyncio.run(add_all(bookie.port, failing)))

    assert bookie_info(bookie)["read_only"]
    wait_until(
        lambda: json.loads(zk_client.get(zk_layout.available_path(bookie.bookie_id))[0])[
            "read_only"
        ],
        WAIT_S,
        message="the registration says read-only",
    )
    assert http_get(bookie.http_port, "/health")[0] == 503
    assert asyncio.run(add_all(bookie.port, plan_for(2, range(1)))) == [Status.READ_ONLY]
    assert "journal_failed" in log_text(bookie) and "action=read_only" in log_text(bookie)
    # Checkpoints go on (up to the journal's last synced batch), reads are served, and
    # the disk checks do not turn it writable.
    wait_until(
        lambda: bookie_info(bookie)["write_cache_bytes"] == 0,
        WAIT_S,
        message="a checkpoint after the journal failed",
    )
    assert asyncio.run(read_all(bookie.port, before + acked)) == [
        data for _, _, data in before + acked
    ]
    assert bookie.alive() and bookie_info(bookie)["read_only"]

    assert bookie.stop() == 0
    restart_and_check(bookie, before + acked, refused, torn=True)


def test_eio_on_a_journal_fsync_stops_the_bookie_and_a_restart_replays(
    faulty_bookies: BookieFactory,
) -> None:
    (bookie,) = faulty_bookies(1)
    before = plan_for(1, range(0, 20))
    assert asyncio.run(add_all(bookie.port, before)) == [Status.OK] * len(before)
    set_journal_faults(bookie, [Fault("fdatasync", "EIO")])
    failing = plan_for(1, range(20, 50))
    statuses = asyncio.run(add_all(bookie.port, failing))
    # Refused, or unanswered when the stopping bookie closed the connection first.
    assert set(statuses) <= {Status.READ_ONLY, None}, statuses
    assert exit_code(bookie) == EXIT_JOURNAL_FAILED, log_text(bookie)[-3000:]
    assert "action=stop" in log_text(bookie)
    restart_and_check(bookie, before, failing, torn=False)


def test_a_short_journal_write_that_cannot_finish_stops_the_bookie_and_a_restart_replays(
    faulty_bookies: BookieFactory,
) -> None:
    (bookie,) = faulty_bookies(1)
    before = plan_for(1, range(0, 20))
    assert asyncio.run(add_all(bookie.port, before)) == [Status.OK] * len(before)
    set_journal_faults(bookie, [Fault("pwritev", budget_bytes=BUDGET_BYTES)])
    failing = plan_for(1, range(20, 50))
    acked, refused = split_outcomes(failing, asyncio.run(add_all(bookie.port, failing)))
    assert exit_code(bookie) == EXIT_JOURNAL_FAILED, log_text(bookie)[-3000:]
    assert "made no progress" in log_text(bookie)
    restart_and_check(bookie, before + acked, refused, torn=True)


def test_writers_replace_a_bookie_whose_journal_failed_and_place_no_new_ledger_on_it(
    faulty_bookies: BookieFactory, zk_connect: str
) -> None:
    """Under a ledger client: the READ_ONLY answers make the writer replace the bookie
    (an ensemble change) and every append succeeds; its read-only registration keeps new
    ledgers off it."""
    by_id = {bookie.bookie_id: bookie for bookie in faulty_bookies(4)}
    rng = random.Random(seed())
    payloads = [payload(rng, i, rng.randrange(100, 20_000)) for i in range(300)]

    async def read_only_ids_are(client: LedgerClient, expected: set[str]) -> bool:
        bookies, _ = await client.placement_candidates(refresh=True)
        return {b.bookie_id for b in bookies if b.read_only} == expected

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client:
            # Every entry on every bookie, acknowledged by all: none completes without
            # the victim's replacement.
            handle = await client.create_ledger(3, 3, 3, b"pw")
            victim = handle.metadata.last_ensemble[0]
            in_flight: list[asyncio.Future[int]] = []
            for i, data in enumerate(payloads):
                if i == 100:
                    await asyncio.gather(*in_flight)
                    set_journal_faults(by_id[victim], [Fault("pwritev", "ENOSPC")])
                await handle.wait_for_capacity()
                in_flight.append(handle.append(data))
            assert await asyncio.gather(*in_flight) == list(range(len(payloads)))
            metadata = (await handle.close()).value
            assert victim in metadata.ensembles[0][1] and victim not in metadata.last_ensemble
            await wait_until_async(
                lambda: read_only_ids_are(client, {victim}),
                WAIT_S,
                message="the registration says read-only",
            )
            fresh = await client.create_ledger(3, 3, 2, b"pw")
            assert victim not in fresh.metadata.last_ensemble
            await fresh.close()
            reader = await client.open_ledger(handle.ledger_id, b"pw", recovery=False)
            assert await reader.read_entries(0, len(payloads) - 1) == payloads

    run(scenario())
