"""The asyncio ZooKeeper bridge against a real ZooKeeper: ordered dispatch of watch events
and replies, the shared `fresh_view()` sync, and `WatchedCache` never keeping a value a
watch event has outdated (including the event arriving while the read is in flight)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

import pytest
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent
from prometheus_client import REGISTRY

from blobstore.cli.zookeeper_server import four_letter_word
from blobstore.runtime.zk import WatchedCache, ZooKeeperClient
from tests.catalog.helpers import seed
from tests.cluster.tls import zk_tls
from tests.waiting import wait_until_async


@contextlib.asynccontextmanager
async def _two_sessions(zk_connect: str) -> AsyncIterator[tuple[ZooKeeperClient, ZooKeeperClient]]:
    """A reader and a writer on separate ZooKeeper sessions."""
    reader, writer = ZooKeeperClient(zk_connect), ZooKeeperClient(zk_connect)
    await reader.start()
    await writer.start()
    try:
        yield reader, writer
    finally:
        await reader.stop()
        await writer.stop()


def _run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 120))  # type: ignore[arg-type]


def test_watched_cache_follows_writes_of_another_session(zk_connect: str) -> None:
    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            await writer.ensure_path("/cache")
            paths = [f"/cache/n{i}" for i in range(4)]
            for path in paths:
                await writer.create(path, b"0")
            cache: WatchedCache[tuple[bytes, int]] = WatchedCache(
                reader, lambda _p, data, version: (data, version), capacity=3, name="test"
            )
            hits = REGISTRY.get_sample_value(
                "blobstore_zk_cache_lookups_total", {"cache": "test", "result": "hit"}
            )
            rng = random.Random(seed())
            stale = 0
            for i in range(300):
                path = rng.choice(paths)
                # Reads in flight while the write lands: its event may arrive between a
                # reply and the reading task resuming.
                reads = [asyncio.ensure_future(cache.get(rng.choice(paths))) for _ in range(3)]
                await asyncio.sleep(0)
                await writer.set(path, str(i).encode())
                await asyncio.gather(*reads)
                await reader.fresh_view()
                for candidate in paths:
                    kept = cache.peek(candidate)
                    current = await writer.get(candidate)
                    if kept is not None and kept[1] != current.version:
                        stale += 1
            assert stale == 0
            assert len(cache) <= 3
            assert (
                REGISTRY.get_sample_value(
                    "blobstore_zk_cache_lookups_total", {"cache": "test", "result": "hit"}
                )
                or 0
            ) > (hits or 0), "hits are counted"
            assert REGISTRY.get_sample_value(
                "blobstore_zk_cache_invalidations_total", {"cache": "test"}
            ), "watch-driven drops are counted"
            await writer.delete("/cache/n0")
            await reader.fresh_view()
            try:
                await cache.get("/cache/n0")
            except NoNodeError:
                pass
            else:
                raise AssertionError("a deleted znode was served from the cache")

    _run(main())


def test_fresh_view_is_shared_and_orders_after_earlier_writes(zk_connect: str) -> None:
    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            await writer.create("/fresh", b"0")
            views = REGISTRY.get_sample_value("blobstore_zk_fresh_views_total") or 0
            syncs = REGISTRY.get_sample_value("blobstore_zk_syncs_total") or 0
            # 50 waiters that start in one turn of the loop share one sync.
            await asyncio.gather(*(reader.fresh_view() for _ in range(50)))
            assert REGISTRY.get_sample_value("blobstore_zk_fresh_views_total") == views + 50
            assert REGISTRY.get_sample_value("blobstore_zk_syncs_total") == syncs + 1
            # A later turn gets a sync of its own.
            await reader.fresh_view()
            assert REGISTRY.get_sample_value("blobstore_zk_syncs_total") == syncs + 2
            for i in range(20):
                await writer.set("/fresh", str(i).encode())
                await reader.fresh_view()
                assert (await reader.get("/fresh")).value == str(i).encode()
            # Pipelined: the read goes out right behind the sync, before it completes,
            # and still sees every write acknowledged before the view started.
            for i in range(20, 40):
                await writer.set("/fresh", str(i).encode())
                view = reader.fresh_view_started()
                read = asyncio.ensure_future(reader.get("/fresh"))
                assert (await read).value == str(i).encode()
                assert view.done()

    _run(main())


def test_views_started_while_a_sync_is_in_flight_share_the_next_one(zk_connect: str) -> None:
    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            await writer.create("/coalesce", b"0")
            cache: WatchedCache[bytes] = WatchedCache(
                reader, lambda _p, data, _v: data, capacity=4, name="coalesce"
            )
            # 200 views started one turn of the loop apart while the first one's sync is
            # unanswered (the reader stops reading its socket meanwhile, so whatever the
            # machine's timing): all the later ones share the one next sync.
            connection = reader._session._connection
            assert connection is not None and connection.transport is not None
            syncs = REGISTRY.get_sample_value("blobstore_zk_syncs_total") or 0
            connection.transport.pause_reading()
            try:
                views = [reader.fresh_view_started()]
                for _ in range(199):
                    await asyncio.sleep(0)
                    views.append(reader.fresh_view_started())
            finally:
                connection.transport.resume_reading()
            await asyncio.gather(*views)
            sent = (REGISTRY.get_sample_value("blobstore_zk_syncs_total") or 0) - syncs
            assert sent == 2, sent
            # A view not sent yet still sees every write acknowledged before it started,
            # and a cache miss behind it reads after its sync.
            # The reader stops reading its socket meanwhile, so its sync stays unanswered
            # here whatever the timing: the view started after the write is held back.
            for i in range(1, 6):
                connection.transport.pause_reading()
                try:
                    in_flight = reader.fresh_view_started()
                    await writer.set("/coalesce", str(i).encode())
                    view = reader.fresh_view_started()
                    assert not reader.view_sent(view), "a view started during a sync was sent"
                finally:
                    connection.transport.resume_reading()
                cache.invalidate("/coalesce")
                assert await cache.get("/coalesce", view) == str(i).encode()
                await in_flight

    _run(main())


def test_watched_cache_forgets_everything_when_the_session_is_interrupted(
    zk_connect: str,
) -> None:
    """Watch events may be missed while disconnected: every entry goes, and a read that
    was in flight when the session was interrupted is not kept."""
    from kazoo.protocol.states import KazooState

    async def main() -> None:
        zk = ZooKeeperClient(zk_connect)
        await zk.start()
        try:
            await zk.create("/interrupted", b"v")
            cache: WatchedCache[bytes] = WatchedCache(zk, lambda _p, d, _v: d, 4, name="test")
            assert await cache.get("/interrupted") == b"v"
            assert cache.peek("/interrupted") == b"v"
            await zk.create("/in-flight", b"x")
            in_flight = asyncio.ensure_future(cache.get("/in-flight"))
            await asyncio.sleep(0)  # the read is sent
            zk._state_changed(KazooState.SUSPENDED)  # as the session does on a lost connection
            assert await in_flight == b"x"  # the caller gets its value...
            await asyncio.sleep(0.05)
            assert len(cache) == 0  # ...but nothing from before the interruption is kept
            await zk.create("/kept-later", b"w")
            read = asyncio.ensure_future(cache.get("/kept-later"))
            zk._state_changed(KazooState.CONNECTED)  # a later state change does not clear
            assert await read == b"w"
            await asyncio.sleep(0.05)
            assert cache.peek("/kept-later") == b"w"
        finally:
            await zk.stop()

    _run(main())


def test_watched_cache_fresh_read_replaces_the_entry_without_dropping_it(
    zk_connect: str,
) -> None:
    """`fresh=True` reads from the server and keeps the result; until it arrives the
    cached entry still serves other readers (no stampede of concurrent misses)."""

    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            await writer.create("/refresh", b"1")
            cache: WatchedCache[tuple[bytes, int]] = WatchedCache(
                reader, lambda _p, data, version: (data, version), 4, name="refresh"
            )
            first = await cache.get("/refresh")
            refreshed = asyncio.ensure_future(cache.get("/refresh", fresh=True))
            await asyncio.sleep(0)  # the fresh read is in flight
            assert cache.peek("/refresh") is first
            assert await cache.get("/refresh") is first  # a hit, not a second read
            second = await refreshed
            assert second == (b"1", 0) and second is not first
            assert cache.peek("/refresh") is second

    _run(main())


def test_watched_cache_concurrent_misses_share_one_read(zk_connect: str) -> None:
    """Concurrent plain misses of one path send one read; a caller arriving after a
    change of the path does not join a read sent before it; a cancelled reader leaves
    the others to read for themselves."""

    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            await writer.create("/shared", b"old")
            decoded: list[bytes] = []

            def decode(_path: str, data: bytes, _version: int) -> bytes:
                decoded.append(data)
                return data

            cache: WatchedCache[bytes] = WatchedCache(reader, decode, 4, name="shared-test")
            values = await asyncio.gather(*(cache.get("/shared") for _ in range(20)))
            assert values == [b"old"] * 20
            assert decoded == [b"old"]  # one transfer for twenty callers

            # A change's event reaches the reader while a read sent before it is in
            # flight: a caller after the event sends its own read.
            cache.invalidate("/shared")
            decoded.clear()
            await writer.set("/shared", b"new")
            before = asyncio.ensure_future(cache.get("/shared"))
            await asyncio.sleep(0)  # sent
            cache._changed(WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/shared"))
            after = asyncio.ensure_future(cache.get("/shared"))
            assert list(await asyncio.gather(before, after)) == [b"new", b"new"]
            assert len(decoded) == 2

            # The first reader is cancelled: the one sharing its read is not.
            cache.invalidate("/shared")
            first = asyncio.ensure_future(cache.get("/shared"))
            await asyncio.sleep(0)
            second = asyncio.ensure_future(cache.get("/shared"))
            await asyncio.sleep(0)
            first.cancel()
            assert await second == b"new"
            assert first.cancelled()

    _run(main())


def _server_watch_count(zk_connect: str) -> int:
    """`zk_watch_count` from the server's mntr: watches it holds for all sessions."""
    host, _, port = zk_connect.split("/", 1)[0].rpartition(":")
    text = four_letter_word(host, int(port), b"mntr", timeout_s=10, tls=zk_tls())
    for line in text.decode().splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_watch_count":
            return int(value)
    raise AssertionError("no zk_watch_count in mntr")


def test_watched_cache_removes_the_watches_of_what_it_evicts(zk_connect: str) -> None:
    """A cache of 5 reading 60 znodes leaves the server with 5 of its watches, not 60;
    an evicted znode read again is watched again (its next change drops it)."""

    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            await writer.ensure_path("/evict")
            paths = [f"/evict/n{i:02d}" for i in range(60)]
            for path in paths:
                await writer.create(path, b"0")
            cache: WatchedCache[bytes] = WatchedCache(
                reader, lambda _p, data, _v: data, capacity=5, name="evict"
            )
            await reader.fresh_view()
            before = _server_watch_count(zk_connect)
            removed = REGISTRY.get_sample_value("blobstore_zk_watches_removed_total") or 0
            for path in paths:
                await cache.get(path)
            await reader.fresh_view()  # the removals were sent before this sync
            assert _server_watch_count(zk_connect) - before == 5
            assert (REGISTRY.get_sample_value("blobstore_zk_watches_removed_total") or 0) == (
                removed + 55
            )
            assert await cache.get(paths[0]) == b"0"  # evicted, read and watched again
            await writer.set(paths[0], b"1")
            await reader.fresh_view()
            assert cache.peek(paths[0]) is None, "the change of a re-read znode dropped it"
            assert await cache.get(paths[0]) == b"1"

    _run(main())


def test_a_watch_is_kept_while_a_watching_read_waits_to_be_sent(zk_connect: str) -> None:
    """Forgetting a watch while a read that arms it again waits behind a paused
    connection must not remove it on the server: the removal would follow the read,
    and the client would arm a watch the server no longer has (changes then missed)."""

    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            await writer.create("/waiting", b"0")
            events: list[WatchedEvent] = []
            await reader.get("/waiting", watch=events.append)
            connection = reader._session._connection
            assert connection is not None
            removed = REGISTRY.get_sample_value("blobstore_zk_watches_removed_total") or 0
            connection.pause_writing()  # as when its write buffer is full
            again = asyncio.ensure_future(reader.get("/waiting", watch=events.append))
            await asyncio.sleep(0)
            assert reader._session._waiting, "the read should wait for the connection"
            reader.forget_data_watch("/waiting", events.append)
            assert (REGISTRY.get_sample_value("blobstore_zk_watches_removed_total") or 0) == (
                removed
            )
            connection.resume_writing()
            assert (await again).value == b"0"
            await writer.set("/waiting", b"1")
            await wait_until_async(lambda: events, 30, message="the watch fired", interval_s=0.01)
            assert events[0].type == EventType.CHANGED

    _run(main())


def test_watch_started_arms_a_watch_that_can_be_forgotten(zk_connect: str) -> None:
    """`watch_started` arms a data watch without waiting (its reply is the stat, or None
    for a missing znode); forgetting it removes the server's watch, whether the znode
    existed (a data watch) or not (an existence watch)."""

    async def main() -> None:
        async with _two_sessions(zk_connect) as (watcher, writer):
            await writer.create("/armed", b"0")
            events: list[WatchedEvent] = []
            stat = await watcher.watch_started("/armed", events.append)
            assert stat is not None and stat.version == 0
            await writer.set("/armed", b"1")
            await wait_until_async(lambda: events, 30, message="the watch fired", interval_s=0.01)
            assert events[0].type == EventType.CHANGED

            await watcher.fresh_view()
            before = _server_watch_count(zk_connect)
            assert await watcher.watch_started("/armed", events.append) is not None
            assert await watcher.watch_started("/missing", events.append) is None
            await watcher.fresh_view()
            assert _server_watch_count(zk_connect) - before == 2
            watcher.forget_data_watch("/armed", events.append)
            watcher.forget_data_watch("/missing", events.append)
            await watcher.fresh_view()  # the removals were sent before this sync
            assert _server_watch_count(zk_connect) == before
            await writer.set("/armed", b"2")
            await writer.create("/missing", b"")
            await writer.fresh_view()
            await watcher.fresh_view()
            assert len(events) == 1, "a forgotten watch fired"

    _run(main())


def test_requests_are_timed_by_type(zk_connect: str) -> None:
    """`blobstore_zk_request_seconds{op}` counts each request and its latency, failed ones
    too (a read of a missing znode is still a round trip)."""

    def count(op: str) -> float:
        return REGISTRY.get_sample_value("blobstore_zk_request_seconds_count", {"op": op}) or 0

    async def main() -> None:
        async with _two_sessions(zk_connect) as (reader, writer):
            before = {op: count(op) for op in ("GetData", "Transaction")}
            await writer.create("/timed", b"0")
            await writer.multi([("set", ("/timed", b"1", 0))])
            assert (await reader.get("/timed")).value == b"1"
            with contextlib.suppress(NoNodeError):
                await reader.get("/timed-missing")
            assert count("GetData") - before["GetData"] == 2
            assert count("Transaction") - before["Transaction"] == 1
            total = REGISTRY.get_sample_value("blobstore_zk_request_seconds_sum", {"op": "GetData"})
            assert total is not None and total > 0

    _run(main())


def test_multi_on_success_runs_before_the_caller_resumes_and_never_on_failure(
    zk_connect: str,
) -> None:
    """`multi(..., on_success)` is called in the step that reads a successful reply,
    before the awaiting coroutine resumes; a rolled-back multi never calls it."""

    async def main() -> None:
        async with _two_sessions(zk_connect) as (zk, _):
            await zk.ensure_path("/hook")
            calls: list[str] = []
            result = await zk.multi(
                [("create", ("/hook/a", b"1"))], on_success=lambda: calls.append("hook")
            )
            calls.append("resumed")
            assert calls == ["hook", "resumed"] and len(result) == 1
            with pytest.raises(BadVersionError):
                await zk.multi(
                    [("set", ("/hook/a", b"2", 7))], on_success=lambda: calls.append("bad")
                )
            assert calls == ["hook", "resumed"]

    _run(main())
