"""The object layer against real ZooKeeper and real bookies: streaming writes into shared
writer ledgers, ranged reads, ledger rolling, no commit on failure, and a read that finds
its ledger gone (moved by compaction) and continues from the re-read record."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from kazoo.protocol.states import KazooState

from blobstore.catalog.records import ObjectRecord
from blobstore.ledger.ledger_handle import LedgerHandle
from blobstore.objects import ObjectStore, ObjectStoreConfig
from blobstore.objects.append_object_op import entries_to_append
from blobstore.objects.store import drain
from blobstore.runtime.errors import UsageError
from tests.conftest import BookieFactory
from tests.waiting import wait_until_async

T = TypeVar("T")

ENTRY = 1024


async def chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for offset in range(0, len(data), size):
        yield data[offset : offset + size]
        await asyncio.sleep(0)


def config(**overrides: object) -> ObjectStoreConfig:
    values: dict[str, object] = {"entry_size_bytes": ENTRY, "sweep_interval_s": 3600.0}
    values.update(overrides)
    return ObjectStoreConfig(**values)  # type: ignore[arg-type]


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def test_put_read_ranges_and_shared_ledgers(zk_connect: str, bookies: BookieFactory) -> None:
    bookies(3)

    async def scenario() -> None:
        store = ObjectStore(zk_connect, config(ledger_bytes_max=64 * ENTRY))
        await store.start()
        try:
            await store.catalog.create_bucket("bucket-one", "owner")
            rng = random.Random(7)
            bodies = {f"k{i}": rng.randbytes(rng.randrange(0, 9 * ENTRY)) for i in range(12)}
            records = {}
            for key, body in bodies.items():
                result = await store.put_object(
                    ObjectRecord(bucket="bucket-one", key=key), chunks(body, 700), size_max=1 << 30
                )
                assert result.record.etag == hashlib.md5(body).hexdigest()
                records[key] = result.record
            ledgers = {e.ledger_id for r in records.values() for e in r.extents}
            assert 1 <= len(ledgers) < len(bodies), "small objects share writer ledgers"
            for key, body in bodies.items():
                record = await store.catalog.get_object("bucket-one", key)
                if not body:
                    assert record.extents == ()
                    continue
                assert await drain(store.read(record, 0, len(body) - 1)) == body
                assert await store.read_whole(record, 0, len(body) - 1) == body
                for _ in range(5):
                    start, end = sorted((rng.randrange(len(body)), rng.randrange(len(body))))
                    assert await drain(store.read(record, start, end)) == body[start : end + 1]
                    # Within one entry (read in place) or across entries (streamed).
                    assert await store.read_whole(record, start, end) == body[start : end + 1]
                    inside = (start // ENTRY) * ENTRY
                    last = min(inside + ENTRY, len(body)) - 1
                    assert await store.read_whole(record, inside, last) == body[inside : last + 1]
        finally:
            await store.close()

    run(scenario())


def test_failed_body_commits_nothing(zk_connect: str, bookies: BookieFactory) -> None:
    bookies(3)

    async def broken() -> AsyncIterator[bytes]:
        yield b"x" * (3 * ENTRY)
        raise ConnectionResetError("client went away")

    async def scenario() -> None:
        store = ObjectStore(zk_connect, config())
        await store.start()
        try:
            await store.catalog.create_bucket("bucket-two", "owner")
            await store.put_object(
                ObjectRecord(bucket="bucket-two", key="k"), chunks(b"old", 10), size_max=1 << 30
            )
            with pytest.raises(ConnectionResetError):
                await store.put_object(
                    ObjectRecord(bucket="bucket-two", key="k"), broken(), size_max=1 << 30
                )

            async def refuse(data: object) -> object:
                raise ValueError("checksum mismatch")

            with pytest.raises(ValueError):
                await store.put_object(
                    ObjectRecord(bucket="bucket-two", key="k"),
                    chunks(b"new" * 1000, 100),
                    size_max=1 << 30,
                    finish=refuse,  # type: ignore[arg-type]
                )
            record = await store.catalog.get_object("bucket-two", "k")
            assert await drain(store.read(record, 0, record.size - 1)) == b"old"
            # The pool's ledger stayed healthy: later writes succeed.
            await store.put_object(
                ObjectRecord(bucket="bucket-two", key="k2"), chunks(b"fine", 2), size_max=1 << 30
            )
        finally:
            await store.close()

    run(scenario())


def test_whole_entries_are_appended_in_batches_within_one_loop_step(
    zk_connect: str, bookies: BookieFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole entries go to the ledger `append_batch_bytes` at a time, in one step of the
    event loop (so their frames leave together); when the body ends, every whole entry
    left and the short tail go together. With batches below an entry, one by one."""
    bookies(3)
    appended: list[tuple[int, int]] = []  # (loop step, payload bytes) of each append
    step = [0]
    real_append = LedgerHandle.append_pieces

    def recording(self: LedgerHandle, pieces: Any, waiter: Any = None) -> Any:
        appended.append((step[0], sum(len(piece) for piece in pieces)))
        return real_append(self, pieces, waiter)

    monkeypatch.setattr(LedgerHandle, "append_pieces", recording)

    def tick() -> None:
        step[0] += 1
        asyncio.get_running_loop().call_soon(tick)

    async def put(batch_bytes: int, body: bytes) -> list[list[int]]:
        appended.clear()
        store = ObjectStore(zk_connect, config(append_batch_bytes=batch_bytes))
        await store.start()
        try:
            await store.catalog.create_bucket(f"bucket-batch-{batch_bytes}", "owner")
            asyncio.get_running_loop().call_soon(tick)
            result = await store.put_object(
                ObjectRecord(bucket=f"bucket-batch-{batch_bytes}", key="k"),
                chunks(body, 700),
                size_max=1 << 30,
            )
            assert await drain(store.read(result.record, 0, len(body) - 1)) == body
        finally:
            await store.close()
        steps: dict[int, list[int]] = {}
        for at, size in appended:
            steps.setdefault(at, []).append(size)
        return list(steps.values())

    body = random.Random(4).randbytes(10 * ENTRY + 100)
    assert run(put(4 * ENTRY, body)) == [[ENTRY] * 4, [ENTRY] * 4, [ENTRY, ENTRY, 100]]
    assert run(put(ENTRY // 2, body)) == [[ENTRY]] * 10 + [[100]]


def test_entries_to_append_now() -> None:
    # While the body streams: whole batches only.
    assert entries_to_append(3 * ENTRY + 5, ENTRY, 4, ended=False) == 0
    assert entries_to_append(9 * ENTRY, ENTRY, 4, ended=False) == 8
    assert entries_to_append(2 * ENTRY, ENTRY, 1, ended=False) == 2
    # Once it ended: every whole entry (the short tail goes after them).
    assert entries_to_append(3 * ENTRY + 5, ENTRY, 4, ended=True) == 3
    assert entries_to_append(ENTRY - 1, ENTRY, 4, ended=True) == 0


def test_append_batch_is_cut_to_the_window_and_to_whole_entries() -> None:
    assert config(append_batch_bytes=4 * ENTRY + 1).append_batch_entries == 4
    assert config(append_batch_bytes=0).append_batch_entries == 1
    small_window = config(append_window_bytes=2 * ENTRY, append_batch_bytes=8 * ENTRY)
    assert small_window.append_batch_entries == 2
    with pytest.raises(UsageError, match="BLOBSTORE_APPEND_BATCH_BYTES"):
        config(append_batch_bytes=-1)


def test_read_follows_a_record_moved_to_another_ledger(
    zk_connect: str, bookies: BookieFactory, caplog: pytest.LogCaptureFixture
) -> None:
    bookies(3)

    async def scenario() -> None:
        writer = ObjectStore(zk_connect, config())
        await writer.start()
        try:
            await writer.catalog.create_bucket("bucket-three", "owner")
            body = random.Random(3).randbytes(5 * ENTRY + 17)
            old = (
                await writer.put_object(
                    ObjectRecord(bucket="bucket-three", key="k"),
                    chunks(body, 512),
                    size_max=1 << 30,
                )
            ).record
        finally:
            await writer.close()
        # What compaction does: copy the bytes to a new ledger (another writer), swap the
        # record, then delete the old ledger.
        compactor = ObjectStore(zk_connect, config())
        await compactor.start()
        try:
            moved = await compactor.write_data(chunks(body, 4096), 1 << 30)
            assert {e.ledger_id for e in moved.extents}.isdisjoint(e.ledger_id for e in old.extents)
            assert await compactor.catalog.swap_object(old, replace(old, extents=moved.extents))
            for extent in old.extents:
                await compactor.ledgers.delete_ledger(extent.ledger_id)
            # A reader holding the old record finds the ledger gone and follows the record,
            # also when it reads a piece of one entry in place.
            assert await drain(compactor.read(old, 0, len(body) - 1)) == body
            piece = await compactor.read_whole(old, ENTRY + 3, 2 * ENTRY - 1)
            assert piece == body[ENTRY + 3 : 2 * ENTRY]
        finally:
            await compactor.close()

    with caplog.at_level("INFO", logger="blobstore.objects.store"):
        run(scenario())
    assert "event=read_record_reloaded" in caplog.text


def test_a_small_object_read_once_is_read_again_without_the_bookies(
    zk_connect: str, bookies: BookieFactory
) -> None:
    """The entry cache: a one-entry object read whole once comes from this process's memory
    the next time (the bookies all stopped here), another object still needs the bookies,
    and a store with the cache off keeps nothing."""
    started = bookies(3)

    async def scenario() -> None:
        store = ObjectStore(zk_connect, config())
        bare = ObjectStore(zk_connect, config(entry_cache_bytes=0))
        await store.start()
        await bare.start()
        try:
            await store.catalog.create_bucket("bucket-cache", "owner")
            bodies = {key: random.Random(key).randbytes(ENTRY - 24) for key in ("a", "b")}
            records = {}
            for key, body in bodies.items():
                put = ObjectRecord(bucket="bucket-cache", key=key)
                records[key] = (
                    await store.put_object(put, chunks(body, 512), size_max=1 << 20)
                ).record
            assert await store.read_whole(records["a"], 0, ENTRY - 25) == bodies["a"]
            assert await bare.read_whole(records["a"], 0, ENTRY - 25) == bodies["a"]
            for bookie in started:
                bookie.stop()
            # Ranges of a cached entry are cut from the cached payload.
            assert await store.read_whole(records["a"], 0, ENTRY - 25) == bodies["a"]
            assert await store.read_whole(records["a"], 5, 9) == bodies["a"][5:10]
            with pytest.raises(Exception):  # noqa: B017 - any read failure will do
                await store.read_whole(records["b"], 0, ENTRY - 25)
            with pytest.raises(Exception):  # noqa: B017
                await bare.read_whole(records["a"], 0, ENTRY - 25)
            # A lost session may end in another cluster (ledger ids are unique within
            # one): nothing cached survives it.
            store._session_state_changed(KazooState.LOST)
            with pytest.raises(Exception):  # noqa: B017
                await store.read_whole(records["a"], 0, ENTRY - 25)
        finally:
            await bare.close()
            await store.close()

    run(scenario())


def test_one_sweep_pass_per_interval_across_processes(
    zk_connect: str, bookies: BookieFactory
) -> None:
    """Four stores (as four gateway workers) sweeping every ~0.25-0.5 s share about one
    pass per interval, and an OPEN ledger of a writer that is gone is still recovered."""
    bookies(3)
    interval_s = 0.5

    async def scenario() -> None:
        from prometheus_client import REGISTRY

        from blobstore.objects.writer_pool import LEDGER_PASSWORD, PURPOSE

        def swept() -> float:
            value = REGISTRY.get_sample_value("blobstore_sweep_rounds_total", {"outcome": "swept"})
            return value or 0.0

        stores = [ObjectStore(zk_connect, config(sweep_interval_s=interval_s)) for _ in range(4)]
        for store in stores:
            await store.start()
        try:
            before = swept()
            window_s = 6.0
            await asyncio.sleep(window_s)
            passes = swept() - before
            # One process alone would sweep 12-24 times in the window; four, 48-96.
            assert 1 <= passes <= 2 * window_s / interval_s + 2, passes
            # A ledger left OPEN by a writer that never registered is recovered.
            ledgers = stores[0].ledgers
            orphan = await ledgers.create_ledger(
                3, 2, 2, LEDGER_PASSWORD, {"writer": "gone-gateway", "purpose": PURPOSE}
            )
            await orphan.append(b"left behind")

            async def recovered() -> bool:
                return (await ledgers.get_metadata(orphan.ledger_id)).state == "CLOSED"

            await wait_until_async(recovered, 30, message="orphan not recovered", interval_s=0.2)
        finally:
            for store in stores:
                await store.close()

    run(scenario())
