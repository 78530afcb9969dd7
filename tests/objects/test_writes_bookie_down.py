"""Writes with bookies down, against real bookies: with one of three stopped, new writer
ledgers go on the two left (E2/WQ2/AQ2); with one left, a PUT is refused (too few bookies
for two acknowledged copies) unless single copies are allowed, which is logged loudly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from blobstore.catalog.records import ObjectRecord
from blobstore.ledger import LedgerClient, NotEnoughBookiesError
from blobstore.objects import ObjectStore, ObjectStoreConfig
from blobstore.objects.store import drain
from blobstore.runtime.zk import ZooKeeperClient
from tests.conftest import BookieFactory
from tests.waiting import wait_until_async

ENTRY = 1024
BUCKET = "bucket-down"


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


def config(**overrides: object) -> ObjectStoreConfig:
    values: dict[str, object] = {"entry_size_bytes": ENTRY, "sweep_interval_s": 3600.0}
    values.update(overrides)
    return ObjectStoreConfig(**values)  # type: ignore[arg-type]


async def put(store: ObjectStore, key: str, body: bytes) -> ObjectRecord:
    result = await store.put_object(
        ObjectRecord(bucket=BUCKET, key=key), chunks(body), size_max=1 << 20
    )
    return result.record


async def writable(client: LedgerClient, count: int) -> None:
    async def seen() -> bool:
        return len(await client.writable_bookies()) == count

    await wait_until_async(seen, 30, message=f"{count} writable bookies registered")


async def quorums(client: LedgerClient, record: ObjectRecord) -> set[tuple[int, int, int]]:
    """(E, WQ, AQ) of the ledgers holding `record`."""
    found = set()
    for extent in record.extents:
        metadata = await client.get_metadata(extent.ledger_id)
        ensemble = metadata.ensembles[-1][1]
        found.add((len(ensemble), metadata.write_quorum, metadata.ack_quorum))
    return found


def test_writes_go_on_with_a_bookie_down_and_refuse_one_copy(
    zk_connect: str, bookies: BookieFactory, caplog: pytest.LogCaptureFixture
) -> None:
    started = bookies(3)

    async def scenario() -> None:
        zk = ZooKeeperClient(zk_connect)
        await zk.start()
        client = LedgerClient(zk)
        await client.start()
        try:
            started[0].stop()
            await writable(client, 2)
            store = ObjectStore(zk_connect, config())
            await store.start()
            try:
                await store.catalog.create_bucket(BUCKET, "owner")
                for index in range(4):
                    body = bytes([index]) * (3 * ENTRY + index)
                    record = await put(store, f"two-{index}", body)
                    assert await quorums(client, record) == {(2, 2, 2)}
                    assert await drain(store.read(record, 0, len(body) - 1)) == body
            finally:
                await store.close()
            assert "single_copy" not in caplog.text

            started[1].stop()
            await writable(client, 1)
            store = ObjectStore(zk_connect, config())
            await store.start()
            try:
                with pytest.raises(NotEnoughBookiesError, match="1 writable bookie, 2 needed"):
                    await put(store, "refused", b"x" * ENTRY)
            finally:
                await store.close()

            caplog.clear()
            with caplog.at_level(logging.WARNING):
                store = ObjectStore(zk_connect, config(allow_single_copy=1))
                await store.start()
                try:
                    record = await put(store, "one-copy", b"y" * ENTRY)
                    assert await quorums(client, record) == {(1, 1, 1)}
                finally:
                    await store.close()
            events = [r.getMessage().split()[0] for r in caplog.records]
            assert "event=single_copy_allowed" in events, events
            assert "event=single_copy_ledger" in events, events
        finally:
            await client.close()
            await zk.stop()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_an_idle_ledger_on_a_stopped_bookie_is_not_written_again(
    zk_connect: str, bookies: BookieFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A ledger left idle on three bookies, one of which stops: the next PUT does not
    wait for an ensemble change that has no bookie to go to (it would fail after
    ensemble_change_timeout_s); the ledger is retired and the PUT goes to a new one."""
    started = bookies(3)

    async def scenario() -> None:
        zk = ZooKeeperClient(zk_connect)
        await zk.start()
        client = LedgerClient(zk)
        await client.start()
        store = ObjectStore(zk_connect, config())
        await store.start()
        try:
            await store.catalog.create_bucket(BUCKET, "owner")
            first = await put(store, "before", b"a" * (2 * ENTRY))
            assert await quorums(client, first) == {(3, 2, 2)}
            started[2].stop()
            await writable(client, 2)
            with caplog.at_level(logging.INFO, logger="blobstore.objects.writer_pool"):
                body = b"b" * (3 * ENTRY)
                after = await put(store, "after", body)
            assert {e.ledger_id for e in after.extents}.isdisjoint(
                {e.ledger_id for e in first.extents}
            )
            assert await quorums(client, after) == {(2, 2, 2)}
            assert await drain(store.read(after, 0, len(body) - 1)) == body
            assert "event=writer_ledger_stranded" in caplog.text
        finally:
            await store.close()
            await client.close()
            await zk.stop()

    asyncio.run(asyncio.wait_for(scenario(), 120))
