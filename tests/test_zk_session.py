"""The asyncio ZooKeeper session against a real ZooKeeper server of its own: a server
killed with -9 and restarted (same session, watches re-armed, requests made meanwhile
sent after), an expired session (LOST, watches fired and dropped, a new session), and a
stream that breaks the framing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent
from prometheus_client import REGISTRY

from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, start_zookeeper
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.runtime.zk_session import (
    SET_WATCHES_BYTES_MAX,
    ZooKeeperSession,
    parse_hosts,
    set_watches_batches,
)
from tests.cluster.tls import zk_tls
from tests.waiting import wait_until_async

TIMEOUT_S = 120.0
EVENT_WAIT_S = 60.0


def _count(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = start_zookeeper(tmp_path / "zk", free_port(), heap_mb=256, tls=zk_tls())
    try:
        yield server
    finally:
        server.stop()


def _run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))  # type: ignore[arg-type]


def test_parse_hosts() -> None:
    assert parse_hosts("a:1,b:2/root/x/") == ([("a", 1), ("b", 2)], "/root/x")
    assert parse_hosts("127.0.0.1:2181") == ([("127.0.0.1", 2181)], "")
    assert parse_hosts("[::1]:7,h") == ([("::1", 7), ("h", 2181)], "")
    assert parse_hosts("[::1]") == ([("::1", 2181)], "")
    with pytest.raises(ValueError):
        parse_hosts("/chroot-only")


def test_server_killed_and_restarted_keeps_the_session_and_its_watches(
    own_server: ZooKeeperServer,
) -> None:
    server = own_server

    async def main() -> None:
        nonlocal server
        zk = ZooKeeperClient(server.connect_string, session_timeout_s=30.0)
        await zk.start()
        states: list[KazooState] = []
        zk.add_state_listener(states.append)
        events: list[WatchedEvent] = []
        session = zk.session_id
        connections = _count("blobstore_zk_connections_total")
        losses = _count("blobstore_zk_connection_losses_total")
        try:
            await zk.create("/watched", b"0")
            await zk.get("/watched", watch=events.append)
            await zk.create("/mine", b"", ephemeral=True)

            server.kill()
            await wait_until_async(
                lambda: KazooState.SUSPENDED in states, EVENT_WAIT_S, message="suspended"
            )
            during = asyncio.ensure_future(zk.create("/made-while-away", b"x"))
            await asyncio.sleep(0.5)
            assert not during.done()
            server = start_zookeeper(server.data_dir, server.port, heap_mb=256, tls=zk_tls())

            assert await during == "/made-while-away"
            assert states[-1] == KazooState.CONNECTED
            assert zk.session_id == session  # the same session: its ephemeral is there
            assert _count("blobstore_zk_connections_total") == connections + 1
            assert _count("blobstore_zk_connection_losses_total") == losses + 1
            assert await zk.exists("/mine") is not None

            other = ZooKeeperClient(server.connect_string)
            await other.start()
            try:
                await other.set("/watched", b"1")
            finally:
                await other.stop()
            await wait_until_async(
                lambda: events, EVENT_WAIT_S, message="the watch armed before the restart fired"
            )
            assert events == [WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/watched")]
        finally:
            await zk.stop()
            server.stop()

    _run(main())


def test_expired_session_fires_watches_and_opens_a_new_session(
    own_server: ZooKeeperServer,
) -> None:
    async def main() -> None:
        zk = ZooKeeperClient(own_server.connect_string, session_timeout_s=4.0)
        await zk.start()
        states: list[KazooState] = []
        zk.add_state_listener(states.append)
        events: list[WatchedEvent] = []
        try:
            await zk.create("/node", b"")
            await zk.get("/node", watch=events.append)
            await zk.create("/ephemeral", b"", ephemeral=True)
            old = zk.session_id
            expirations = _count("blobstore_zk_session_expirations_total")
            # A process frozen past its session timeout (no pings): the server expires
            # the session, and tells the client when it reconnects.
            time.sleep(zk._session.negotiated_timeout_s + 3.0)

            await wait_until_async(lambda: KazooState.LOST in states, EVENT_WAIT_S, message="lost")
            await wait_until_async(lambda: zk.connected, EVENT_WAIT_S, message="connected again")
            assert zk.session_id not in (None, old)
            assert _count("blobstore_zk_session_expirations_total") == expirations + 1
            assert events == [WatchedEvent(EventType.NONE, KeeperState.EXPIRED_SESSION, None)]
            assert await zk.exists("/ephemeral") is None
            with pytest.raises(NoNodeError):
                await zk.get("/missing")
        finally:
            await zk.stop()

    _run(main())


def test_broken_framing_drops_the_connection_and_start_times_out() -> None:
    """A peer whose first frame claims 2 GiB: the connection is dropped (nothing that
    size is allocated), retried, and start() fails in bounded time."""
    connections = 0

    async def main() -> None:
        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            with contextlib.suppress(Exception):
                await reader.read(1024)
                writer.write(struct.pack("!i", 2**31 - 1) + b"\0" * 64)
                await writer.drain()
                await reader.read(1024)
            writer.close()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        session = ZooKeeperSession(f"127.0.0.1:{port}", 10.0)
        try:
            with pytest.raises(KazooTimeoutError):
                await session.start(1.5)
        finally:
            server.close()
        assert connections >= 2  # dropped, then tried again
        assert not session.connected

    _run(main())


def test_set_watches_are_cut_into_bounded_frames() -> None:
    data = [f"/d/{n:06d}" + "x" * 80 for n in range(3000)]
    exist = [f"/e/{n:06d}" for n in range(500)]
    child = ["/c"]
    batches = set_watches_batches(42, data, exist, child)
    assert len(batches) > 1
    assert all(len(b.serialize()) <= SET_WATCHES_BYTES_MAX + 200 for b in batches)
    assert [p for b in batches for p in b.data] == data
    assert [p for b in batches for p in b.exist] == exist
    assert [p for b in batches for p in b.child] == child
    assert {b.zxid for b in batches} == {42}
    assert set_watches_batches(1, [], [], []) == []


def test_a_request_that_cannot_be_encoded_fails_its_caller_at_once() -> None:
    """Even while no connection is up: it never joins the requests waiting for one
    (where encoding it later would break the reconnection)."""
    from kazoo.protocol.serialization import Exists, SetData

    async def main() -> None:
        session = ZooKeeperSession("127.0.0.1:1", 10.0)  # not started: nothing connected
        with pytest.raises(Exception):  # noqa: B017,PT011 - kazoo's encoder decides which
            session.submit(SetData("/x", "not bytes", -1))
        waiting = session.submit(Exists("/x", False))
        assert not waiting.done()
        assert len(session._waiting) == 1
        await session.close()
        with pytest.raises(ConnectionClosedError):
            await waiting

    _run(main())


def test_a_request_past_the_servers_limit_fails_alone(own_server: ZooKeeperServer) -> None:
    """A request longer than jute.maxbuffer (4 MiB on this server) makes the server drop
    the connection (and with it every request in flight). With the limit set to the server's,
    the request is refused before it is sent: its caller gets the error, the requests
    beside it are answered and the connection stays."""
    from blobstore.runtime.zk_session import ZooKeeperRequestTooLargeError

    async def main() -> None:
        loose = ZooKeeperClient(own_server.connect_string, request_bytes_max=8 << 20)
        await loose.start()
        await loose.create("/big", b"")
        before = _count("blobstore_zk_connections_total")
        with pytest.raises(ConnectionLoss):
            await loose.set("/big", b"x" * (5 << 20))
        await loose.get("/big")  # on a new connection
        await loose.stop()

        client = ZooKeeperClient(own_server.connect_string)  # the default: 4 MiB
        assert client.request_bytes_max == 4 << 20
        await client.start()
        connections = _count("blobstore_zk_connections_total")
        assert connections == before + 2  # the loose client's reconnection, and this one
        beside = asyncio.ensure_future(client.get("/big"))
        with pytest.raises(ZooKeeperRequestTooLargeError, match="passes the limit of 4194304"):
            await client.set("/big", b"x" * (5 << 20))
        with pytest.raises(ZooKeeperRequestTooLargeError):
            await client.multi([("set", ("/big", b"y" * (3 << 20), -1))] * 2)
        assert (await beside).value == b""
        await client.set("/big", b"z" * (3 << 20))  # under the limit: written
        assert len((await client.get("/big")).value) == 3 << 20
        assert _count("blobstore_zk_connections_total") == connections
        await client.stop()

    _run(main())


def test_request_limit_from_the_environment() -> None:
    from blobstore.runtime.errors import UsageError
    from blobstore.runtime.zk_session import request_bytes_max_from_env

    assert request_bytes_max_from_env({}) == 4 << 20
    assert request_bytes_max_from_env({"BLOBSTORE_ZK_REQUEST_BYTES_MAX": "1048575"}) == 1048575
    for bad in ("1mb", "-5", "1000"):
        with pytest.raises(UsageError, match="BLOBSTORE_ZK_REQUEST_BYTES_MAX"):
            request_bytes_max_from_env({"BLOBSTORE_ZK_REQUEST_BYTES_MAX": bad})


def test_more_watches_than_one_frame_holds_are_armed_again_after_a_restart(
    own_server: ZooKeeperServer,
) -> None:
    """Watches re-armed after a reconnection travel in several SetWatches frames: as one
    frame, these (over 4 MiB of paths, past the server's jute.maxbuffer) would make the
    server stop answering the connection."""
    server = own_server

    async def main() -> None:
        nonlocal server
        zk = ZooKeeperClient(server.connect_string, session_timeout_s=30.0)
        await zk.start()
        fired: list[WatchedEvent] = []
        paths = [f"/absent-{n:06d}-" + "p" * 80 for n in range(48_000)]
        try:
            for start in range(0, len(paths), 2000):
                await asyncio.gather(
                    *(zk.exists(p, watch=fired.append) for p in paths[start : start + 2000])
                )
            assert sum(len(p) + 4 for p in paths) > 4 * 1024 * 1024
            states: list[KazooState] = []
            zk.add_state_listener(states.append)
            server.kill()
            await wait_until_async(
                lambda: KazooState.SUSPENDED in states, EVENT_WAIT_S, message="suspended"
            )
            server = start_zookeeper(server.data_dir, server.port, heap_mb=256, tls=zk_tls())
            await wait_until_async(
                lambda: states[-1] == KazooState.CONNECTED, EVENT_WAIT_S, message="reconnected"
            )
            await zk.create(paths[-1], b"")
            await wait_until_async(
                lambda: fired, EVENT_WAIT_S, message="the watch armed before the restart fired"
            )
            assert fired == [WatchedEvent(EventType.CREATED, KeeperState.CONNECTED, paths[-1])]
            assert await zk.exists("/") is not None
        finally:
            await zk.stop()
            server.stop()

    _run(main())


def test_a_stalled_event_loop_does_not_drop_a_healthy_connection(
    own_server: ZooKeeperServer,
) -> None:
    """A loop blocked past two thirds of the session timeout (but within it) has heard
    nothing because it read nothing: the session asks the server again rather than
    calling the connection dead."""

    async def main() -> None:
        zk = ZooKeeperClient(own_server.connect_string, session_timeout_s=6.0)
        await zk.start()
        states: list[KazooState] = []
        zk.add_state_listener(states.append)
        try:
            timeout_s = zk._session.negotiated_timeout_s
            time.sleep(timeout_s * 0.75)  # past the read timeout (2/3), within the session's
            await asyncio.sleep(timeout_s * 0.5)
            assert states == []
            assert await zk.exists("/") is not None
        finally:
            await zk.stop()

    _run(main())


def test_a_server_that_stops_reading_does_not_grow_the_write_buffer() -> None:
    """Requests beyond the transport's high-water mark wait in the session's queue (their
    callers' timeouts bound them) and are sent, in order, once the server reads again."""
    from kazoo.protocol.serialization import SetData

    async def main() -> None:
        reading = asyncio.Event()
        received = 0

        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal received
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            await reader.readexactly(length)  # the ConnectRequest
            body = struct.pack("!iiq", 0, 30_000, 0x5E55) + struct.pack("!i", 16) + b"\0" * 17
            writer.write(struct.pack("!i", len(body)) + body)
            await writer.drain()
            await reading.wait()  # not reading: the client's writes back up
            while chunk := await reader.read(1 << 20):
                received += len(chunk)
            writer.close()

        tls = zk_tls()  # `make test-tls`: the session speaks TLS, so does this server
        context = None if tls is None else tls.server_context()
        server = await asyncio.start_server(peer, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        session = ZooKeeperSession(f"127.0.0.1:{port}", 30.0)
        try:
            await session.start(10.0)
            connection = session._connection
            assert connection is not None and connection.transport is not None
            value = b"v" * (1 << 20)
            futures = [session.submit(SetData(f"/n{i}", value, -1)) for i in range(200)]
            await wait_until_async(lambda: connection.paused, EVENT_WAIT_S, message="paused")
            buffered = connection.transport.get_write_buffer_size()
            assert buffered < 64 << 20, buffered  # not the 200 MiB submitted
            assert len(session._waiting) > 100
            reading.set()
            await wait_until_async(
                lambda: not session._waiting, EVENT_WAIT_S, message="sent once the server reads"
            )
            await wait_until_async(
                lambda: received >= 200 << 20,
                EVENT_WAIT_S,
                message="every request reached the server",
            )
            assert not any(f.done() for f in futures)  # unanswered, not lost
        finally:
            await session.close()
            server.close()

    _run(main())


def test_an_unreachable_server_is_logged_once_then_its_return(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reconnect attempts to a server that is down are not logged one by one: the first
    failure is, then at most one line per UNREACHABLE_LOG_INTERVAL_S with the count, and
    one line when the server answers again."""
    port = free_port()
    caplog.set_level(logging.INFO, logger="blobstore.runtime.zk_session")

    async def main() -> None:
        session = ZooKeeperSession(f"127.0.0.1:{port}", 10.0)
        start = asyncio.ensure_future(session.start(60.0))
        await wait_until_async(
            lambda: session._unreachable.get(("127.0.0.1", port), [0])[0] >= 4,
            EVENT_WAIT_S,
            message="4 tries",
        )
        unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(unreachable) == 1, [r.getMessage() for r in unreachable]
        server = await asyncio.to_thread(
            start_zookeeper, tmp_path / "zk", port, heap_mb=256, tls=zk_tls()
        )
        try:
            try:
                await start
                assert session.connected
                back = [
                    r.getMessage() for r in caplog.records if "reachable again" in r.getMessage()
                ]
                assert len(back) == 1 and "failed attempts" in back[0], back
                assert ("127.0.0.1", port) not in session._unreachable
            finally:
                await session.close()
        finally:  # whatever failed above, the server goes
            await asyncio.to_thread(server.stop)

    _run(main())
