"""The ledger client against real ZooKeeper and real bookie processes: placement,
write/read/close, open without recovery, tailing, repeatable reads, deletion."""

from __future__ import annotations

import asyncio
import random

import pytest

from blobstore.ledger import (
    EntryNotFoundError,
    LedgerClosedError,
    LedgerUnauthorizedError,
    NoSuchLedgerError,
    PendingAddsFullError,
)
from blobstore.ledger.bookie_client import (
    BookieClientPool,
    NoSuchEntryError,
    NoSuchLedgerOnBookieError,
)
from blobstore.ledger.distribution_schedule import write_set_bookies
from blobstore.wire import protocol
from tests.conftest import BookieFactory
from tests.ledger.conftest import ledger_client, payload, run


def test_each_entry_sits_exactly_on_its_write_set(bookies: BookieFactory, zk_connect: str) -> None:
    started = bookies(5)
    all_ids = [b.bookie_id for b in started]

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client, BookieClientPool() as direct:
            for e, wq, aq in ((3, 2, 2), (5, 3, 2)):
                handle = await client.create_ledger(e, wq, aq, b"pw")
                entry_count = 2 * e + 3
                futures = [
                    handle.append(b"%d-%d" % (handle.ledger_id, i)) for i in range(entry_count)
                ]
                assert await asyncio.gather(*futures) == list(range(entry_count))
                await handle.close()
                ensemble = handle.metadata.last_ensemble
                assert len(handle.metadata.ensembles) == 1
                for entry_id in range(entry_count):
                    expected = set(write_set_bookies(entry_id, ensemble, wq))
                    assert len(expected) == wq
                    for bookie_id in all_ids:
                        try:
                            response = await direct.read_entry(
                                bookie_id, handle.ledger_id, entry_id
                            )
                        except (NoSuchEntryError, NoSuchLedgerOnBookieError):
                            assert bookie_id not in expected, (entry_id, bookie_id, e, wq)
                            continue
                        assert bookie_id in expected, (entry_id, bookie_id, e, wq)
                        entry = protocol.Entry.decode(response.entry)
                        assert entry.payload == b"%d-%d" % (handle.ledger_id, entry_id)
                        assert entry.last_add_confirmed < entry_id

    run(scenario())


def test_an_entry_appended_in_pieces_keeps_its_bytes(
    bookies: BookieFactory, zk_connect: str
) -> None:
    """Pieces are sent as they are, not joined; one whose bytes may change (a view of a
    bytearray) is copied first, so changing it after the append changes nothing."""
    bookies(3)
    head, tail = b"h" * 300_000, bytearray(b"t" * 500_000)

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client:
            handle = await client.create_ledger(3, 2, 2, b"pw", {})
            added = handle.append_pieces([head, memoryview(tail)[1000:], tail])
            tail[:] = b"x" * len(tail)  # before a byte of the entry was written
            assert await added == 0
            expected = head + b"t" * 499_000 + b"t" * 500_000
            assert await handle.read_entries(0, 0) == [expected]
            await handle.close()

    run(scenario())


def test_write_read_close_reopen_delete(bookies: BookieFactory, zk_connect: str) -> None:
    bookies(3)
    rng = random.Random(7)
    sizes = [0, 1, 1000, 1 << 20, 17, 65536] * 10
    payloads = [payload(rng, i, size) for i, size in enumerate(sizes)]

    async def scenario() -> None:
        async with ledger_client(zk_connect, pending_adds_max=16) as client:
            handle = await client.create_ledger(3, 2, 2, b"pw", {"owner": "test"})
            ids = []
            for data in payloads[:40]:
                ids.append(await handle.add_entry(data))
            futures = []
            for data in payloads[40:]:
                await handle.wait_for_capacity()
                futures.append(handle.append(data))
            ids += await asyncio.gather(*futures)
            assert ids == list(range(len(payloads)))
            assert handle.last_add_confirmed == len(payloads) - 1
            assert handle.length == sum(len(p) for p in payloads)
            assert await handle.read_entries(0, len(payloads) - 1) == payloads
            with pytest.raises(EntryNotFoundError):
                await handle.read_entries(0, len(payloads))
            closed = await handle.close()
            assert closed.value.state == "CLOSED"
            assert closed.value.last_entry_id == len(payloads) - 1
            assert closed.value.length == handle.length
            with pytest.raises(LedgerClosedError):
                handle.append(b"late")

            reader = await client.open_ledger(handle.ledger_id, b"pw", recovery=False)
            assert reader.is_closed
            assert reader.metadata.custom == {"owner": "test"}
            assert [
                p async for p in reader.iter_entries(0, len(payloads) - 1, window=3)
            ] == payloads
            with pytest.raises(EntryNotFoundError):
                await reader.read_unconfirmed_entries(len(payloads), len(payloads))
            with pytest.raises(LedgerClosedError):
                reader.append(b"x")
            with pytest.raises(LedgerUnauthorizedError):
                await client.open_ledger(handle.ledger_id, b"wrong")

            assert handle.ledger_id in await client.list_ledger_ids()
            await client.delete_ledger(handle.ledger_id)
            assert handle.ledger_id not in await client.list_ledger_ids()
            with pytest.raises(NoSuchLedgerError):
                await client.get_metadata(handle.ledger_id)
            with pytest.raises(NoSuchLedgerError):
                await client.open_ledger(handle.ledger_id, b"pw")

    run(scenario())


def test_append_refuses_beyond_the_in_flight_bound(bookies: BookieFactory, zk_connect: str) -> None:
    bookies(3)

    async def scenario() -> None:
        async with ledger_client(zk_connect, pending_adds_max=4) as client:
            handle = await client.create_ledger(3, 3, 2)
            futures = [handle.append(b"x") for _ in range(4)]
            with pytest.raises(PendingAddsFullError):
                handle.append(b"y")
            assert await asyncio.gather(*futures) == [0, 1, 2, 3]
            assert await handle.add_entry(b"z") == 4
            await handle.close()
        # The byte bound: refused once reached (it may be passed by one entry).
        async with ledger_client(zk_connect, pending_add_bytes_max=3000) as client:
            handle = await client.create_ledger(3, 2, 2)
            futures = [handle.append(bytes(2000)), handle.append(bytes(2000))]
            with pytest.raises(PendingAddsFullError):
                handle.append(bytes(1))
            await asyncio.gather(*futures)
            big = [asyncio.create_task(handle.add_entry(bytes(5000))) for _ in range(4)]
            assert sorted(await asyncio.gather(*big)) == [2, 3, 4, 5]
            await handle.close()

    run(scenario())


def test_tailing_reader_follows_the_lac(bookies: BookieFactory, zk_connect: str) -> None:
    bookies(3)

    async def scenario() -> None:
        async with (
            ledger_client(zk_connect) as writer_client,
            ledger_client(zk_connect) as reader_client,
        ):
            writer = await writer_client.create_ledger(3, 2, 2, b"pw")
            for i in range(5):
                await writer.add_entry(b"e%d" % i)
            reader = await reader_client.open_ledger(writer.ledger_id, b"pw", recovery=False)
            # Entry 4's confirmation travels with the next add: the bookies know LAC 3.
            assert reader.last_add_confirmed == 3
            assert await reader.read_entries(0, 3) == [b"e0", b"e1", b"e2", b"e3"]
            assert await reader.read_unconfirmed_entries(4, 4) == [b"e4"]
            with pytest.raises(EntryNotFoundError):
                await reader.read_entries(4, 4)

            waiting = asyncio.create_task(reader.wait_for_lac(3, timeout_s=20))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await writer.add_entry(b"e5")
            assert await waiting >= 4
            assert await reader.wait_for_lac(100, timeout_s=0.3) == reader.last_add_confirmed

            await writer.close()
            assert await reader.wait_for_lac(4, timeout_s=20) == 5
            assert await reader.read_entries(5, 5) == [b"e5"]

    run(scenario())


def test_readers_with_different_replica_orders_see_the_same_entries(
    bookies: BookieFactory, zk_connect: str
) -> None:
    bookies(4)
    rng = random.Random(11)
    payloads = [payload(rng, i, rng.randrange(1, 3000)) for i in range(120)]

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client:
            writer = await client.create_ledger(4, 3, 2, b"pw")
            # Each add carries the LAC of its send time: the second burst confirms the first.
            await asyncio.gather(*(writer.append(p) for p in payloads[:60]))
            await asyncio.gather(*(writer.append(p) for p in payloads[60:]))
            # Half the readers read while the ledger is open, half after it closed.
            seen = []
            for order in ("write_set", "random", "random"):
                async with ledger_client(zk_connect, read_replica_order=order) as reader_client:
                    reader = await reader_client.open_ledger(
                        writer.ledger_id, b"pw", recovery=False
                    )
                    last = reader.last_add_confirmed
                    assert last >= 59
                    seen.append(await reader.read_entries(0, last))
            await writer.close()
            for order in ("random", "write_set"):
                async with ledger_client(
                    zk_connect, read_replica_order=order, read_window=3
                ) as reader_client:
                    reader = await reader_client.open_ledger(writer.ledger_id, b"pw")
                    seen.append(
                        [p async for p in reader.iter_entries(0, reader.last_add_confirmed)]
                    )
            for sequence in seen:
                assert sequence == payloads[: len(sequence)]
            assert len(seen[-1]) == len(payloads)

    run(scenario())


def test_placement_spreads_write_sets_over_racks(bookies: BookieFactory, zk_connect: str) -> None:
    racks = {}
    for rack in ("/rack-a", "/rack-b"):
        for bookie in bookies(2, extra_args=["--rack", rack]):
            racks[bookie.bookie_id] = rack

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client:
            assert {b.rack for b in await client.writable_bookies()} == {"/rack-a", "/rack-b"}
            for _ in range(5):
                handle = await client.create_ledger(4, 2, 2)
                ensemble = handle.metadata.last_ensemble
                for entry_id in range(4):
                    write_set = write_set_bookies(entry_id, ensemble, 2)
                    assert {racks[b] for b in write_set} == {"/rack-a", "/rack-b"}, ensemble
                await handle.close()

    run(scenario())
