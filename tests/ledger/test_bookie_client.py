"""BookieClientPool against an in-process server speaking blobstore/wire/protocol.py: status
mapping, pipelining with out-of-order answers, timeouts, lost connections, reconnect."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import REGISTRY

from blobstore.ledger import bookie_client
from blobstore.ledger.bookie_client import (
    BookieClientPool,
    BookieTimeoutError,
    BookieUnavailableError,
    FencedError,
    NoSuchEntryError,
    error_for_status,
    parse_bookie_id,
)
from blobstore.ledger.errors import EntryNotFoundError
from blobstore.ledger.pending_read_op import PendingReadOp
from blobstore.runtime.ledger_tls import server_context_from_env
from blobstore.wire import protocol
from blobstore.wire.protocol import Op, Status
from tests.waiting import wait_until_async


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


Handler = Callable[[protocol.Frame], Awaitable[tuple[int, bytes] | None]]


def run(coro: Awaitable[None], timeout_s: float = 30.0) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(coro, timeout_s)

    asyncio.run(bounded())


class FrameServer:
    """Answers each request frame with handler(frame) -> (status, body) or None (no answer)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.server: asyncio.Server | None = None
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, ssl=server_context_from_env()
        )
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        tasks = set()
        try:
            while (frame := await protocol.read_frame(reader)) is not None:
                task = asyncio.create_task(self._answer(frame, writer))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(self, frame: protocol.Frame, writer: asyncio.StreamWriter) -> None:
        answer = await self.handler(frame)
        if answer is None or writer.is_closing():
            return
        status, body = answer
        writer.write(protocol.encode_frame(Op(frame.op), status, frame.request_id, body))

    def drop_connections(self) -> None:
        for writer in self.writers:
            # A TLS transport already closed has nothing left to abort (and raises).
            if not writer.transport.is_closing():
                writer.transport.abort()
        self.writers.clear()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        self.drop_connections()
        await self.server.wait_closed()


def test_parse_bookie_id() -> None:
    assert parse_bookie_id("127.0.0.1:3181") == ("127.0.0.1", 3181)
    assert parse_bookie_id("[::1]:80") == ("::1", 80)
    for bad in ("", "host", "host:", ":80", "host:0", "host:99999", "host:x1"):
        with pytest.raises(ValueError):
            parse_bookie_id(bad)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (Status.FENCED, bookie_client.FencedError),
        (Status.UNAUTHORIZED, bookie_client.UnauthorizedError),
        (Status.NO_SUCH_LEDGER, bookie_client.NoSuchLedgerOnBookieError),
        (Status.NO_SUCH_ENTRY, bookie_client.NoSuchEntryError),
        (Status.READ_ONLY, bookie_client.ReadOnlyBookieError),
        (Status.TOO_LARGE, bookie_client.TooLargeError),
        (Status.BAD_REQUEST, bookie_client.BadRequestError),
        (Status.BAD_VERSION, bookie_client.BadRequestError),
        (Status.BAD_DIGEST, bookie_client.BadDigestError),
        (Status.TIMEOUT, bookie_client.LongPollTimeoutError),
        (Status.INTERNAL_ERROR, bookie_client.BookieInternalError),
        (250, bookie_client.BookieInternalError),
    ],
)
def test_status_maps_to_typed_error(status: int, cls: type[Exception]) -> None:
    error = error_for_status(status, "b:1", Op.ADD_ENTRY)
    assert type(error) is cls
    assert isinstance(error, bookie_client.BookieError)
    assert error.bookie_id == "b:1"


def test_pipelined_requests_complete_out_of_order() -> None:
    async def scenario() -> None:
        async def handler(frame: protocol.Frame) -> tuple[int, bytes]:
            request = protocol.AddRequest.decode(frame.body)
            # Later entries answer first.
            await asyncio.sleep(0.002 * (20 - request.entry_id))
            return Status.OK, protocol.AddResponse(request.ledger_id, request.entry_id).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=5) as pool:
            key = protocol.master_key(b"")
            entries = [protocol.Entry(7, e, e - 1, e + 1, b"x").encode() for e in range(20)]
            await asyncio.gather(
                *(pool.add_entry(bookie_id, 7, e, key, (entries[e],)) for e in range(20))
            )
        assert server.connections == 1
        await server.stop()

    run(scenario())


def test_read_errors_carry_the_response_lac() -> None:
    async def scenario() -> None:
        async def handler(frame: protocol.Frame) -> tuple[int, bytes]:
            if frame.op == Op.GET_BOOKIE_INFO:
                return Status.OK, json.dumps({"bookie_id": "x", "read_only": False}).encode()
            if frame.op == Op.READ_LAC:
                return Status.OK, protocol.ReadLacResponse(3, 41).encode()
            request = protocol.ReadRequest.decode(frame.body)
            if frame.flags_or_status & protocol.ReadFlag.FENCE:
                return Status.FENCED, b""
            if request.entry_id == 5:
                entry = protocol.Entry(3, 5, 4, 10, b"hello").encode()
                return Status.OK, protocol.ReadResponse(3, 5, 4, entry).encode()
            return Status.NO_SUCH_ENTRY, protocol.ReadResponse(3, request.entry_id, 4).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=5) as pool:
            response = await pool.read_entry(bookie_id, 3, 5)
            assert protocol.Entry.decode(response.entry).payload == b"hello"
            with pytest.raises(NoSuchEntryError) as info:
                await pool.read_entry(bookie_id, 3, 6)
            assert info.value.response is not None
            assert info.value.response.last_add_confirmed == 4
            with pytest.raises(FencedError):
                await pool.read_entry(bookie_id, 3, -1, fence_key=bytes(20))
            assert await pool.read_lac(bookie_id, 3) == 41
            assert (await pool.get_bookie_info(bookie_id))["read_only"] is False
        await server.stop()

    run(scenario())


def test_silent_bookie_times_out_and_connection_survives() -> None:
    async def scenario() -> None:
        async def handler(frame: protocol.Frame) -> tuple[int, bytes] | None:
            request = protocol.ReadLacRequest.decode(frame.body)
            if request.ledger_id == 1:
                return None  # never answers
            return Status.OK, protocol.ReadLacResponse(request.ledger_id, 0).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=0.2) as pool:
            with pytest.raises(BookieTimeoutError):
                await pool.read_lac(bookie_id, 1)
            assert await pool.read_lac(bookie_id, 2) == 0
        assert server.connections == 1
        await server.stop()

    run(scenario())


def test_each_request_keeps_its_own_deadline() -> None:
    """Deadlines are tracked per connection without a timer per request: a short timeout
    sent after long ones still expires on time, answered requests never time out, and
    an answer arriving after its deadline is dropped."""

    async def scenario() -> None:
        release = asyncio.Event()

        async def handler(frame: protocol.Frame) -> tuple[int, bytes] | None:
            request = protocol.ReadLacRequest.decode(frame.body)
            if request.ledger_id >= 100:
                await release.wait()  # answers late, after every deadline below
            return Status.OK, protocol.ReadLacResponse(request.ledger_id, 7).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        loop = asyncio.get_running_loop()
        async with BookieClientPool(request_timeout_s=5.0) as pool:
            slow = [asyncio.ensure_future(pool.read_lac(bookie_id, 100 + i)) for i in range(50)]
            answered = [asyncio.ensure_future(pool.read_lac(bookie_id, i)) for i in range(50)]
            await asyncio.sleep(0.05)
            started = loop.time()
            with pytest.raises(BookieTimeoutError, match="op=READ_LAC"):
                await pool.read_lac(bookie_id, 200, timeout_s=0.3)
            assert 0.25 <= loop.time() - started < 2.0
            assert await asyncio.gather(*answered) == [7] * 50
            assert not any(s.done() for s in slow)
            with pytest.raises(BookieTimeoutError):
                await asyncio.gather(*slow)
            release.set()  # the late answers find nobody waiting
            assert await pool.read_lac(bookie_id, 3) == 7
        assert server.connections == 1
        await server.stop()

    run(scenario())


def test_lost_connection_fails_in_flight_then_reconnects() -> None:
    async def scenario() -> None:
        answer = asyncio.Event()

        async def handler(frame: protocol.Frame) -> tuple[int, bytes] | None:
            request = protocol.ReadLacRequest.decode(frame.body)
            if request.ledger_id == 1:
                await answer.wait()
                return None
            return Status.OK, protocol.ReadLacResponse(request.ledger_id, 9).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=5) as pool:
            in_flight = asyncio.create_task(pool.read_lac(bookie_id, 1))
            await asyncio.sleep(0.05)
            server.drop_connections()
            with pytest.raises(BookieUnavailableError):
                await in_flight
            assert await pool.read_lac(bookie_id, 2) == 9
        assert server.connections == 2
        answer.set()
        await server.stop()

    run(scenario())


def test_unreachable_bookie_fails_fast_during_backoff() -> None:
    async def scenario() -> None:
        server = FrameServer(lambda frame: asyncio.sleep(0, result=None))
        bookie_id = await server.start()
        await server.stop()  # nothing listens on that port any more
        async with BookieClientPool(request_timeout_s=5, connect_timeout_s=1) as pool:
            with pytest.raises(BookieUnavailableError):
                await pool.read_lac(bookie_id, 1)
            assert pool.is_unreachable(bookie_id)
            with pytest.raises(BookieUnavailableError, match="next connect"):
                await pool.read_lac(bookie_id, 1)

    run(scenario())


def test_read_with_no_other_replica_connects_during_backoff() -> None:
    """A bookie back from a restart answers reads at once: a read whose last replica is
    held in backoff by an earlier failed connect tries to connect instead of failing."""

    async def scenario() -> None:
        entry = protocol.Entry(7, 0, -1, 7, b"payload").encode()

        async def handler(frame: protocol.Frame) -> tuple[int, bytes]:
            request = protocol.ReadRequest.decode(frame.body)
            return Status.OK, protocol.ReadResponse(request.ledger_id, 0, -1, entry).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        port = int(bookie_id.rsplit(":", 1)[1])
        await server.stop()
        async with BookieClientPool(request_timeout_s=5, connect_timeout_s=1) as pool:
            with pytest.raises(BookieUnavailableError):
                await pool.read_lac(bookie_id, 7)
            assert pool.is_unreachable(bookie_id)
            restarted = await asyncio.start_server(
                server._serve, "127.0.0.1", port, ssl=server_context_from_env()
            )
            try:
                read = PendingReadOp(pool, 7, 0, [bookie_id], speculative_read_timeout_s=1)
                assert (await read.run()).payload == b"payload"
            finally:
                restarted.close()
                await restarted.wait_closed()

    run(scenario())


def test_in_flight_is_bounded() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        seen = 0

        async def handler(frame: protocol.Frame) -> tuple[int, bytes]:
            nonlocal seen
            seen += 1
            await release.wait()
            return Status.OK, protocol.ReadLacResponse(1, 0).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=0.3, in_flight_max=2) as pool:
            calls = [asyncio.create_task(pool.read_lac(bookie_id, 1)) for _ in range(3)]
            await asyncio.sleep(0.1)
            assert seen == 2
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert all(isinstance(r, BookieTimeoutError) for r in results), results
        release.set()
        await server.stop()

    run(scenario())


def test_frame_parts_equal_the_protocol_encoding() -> None:
    entry = protocol.Entry(1, 2, 1, 5, b"hello").encode()
    body = protocol.AddRequest(1, 2, bytes(20), entry).encode()
    expected = protocol.encode_frame(Op.ADD_ENTRY, 1, 7, body)
    prefix = protocol.AddRequest(1, 2, bytes(20), b"").encode()
    parts = bookie_client._frame_parts(Op.ADD_ENTRY, 1, 7, (prefix, entry))
    assert b"".join(parts) == expected
    assert parts[-1] is entry


class RawAnswerServer:
    """Reads request frames and answers them with whatever bytes `answer(frames)` builds,
    written one byte per send when `trickle` (frames cut at every possible point)."""

    def __init__(self, batch: int, build: Callable[[list[protocol.Frame]], bytes]) -> None:
        self.batch = batch
        self.build = build
        self.trickle = False
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, ssl=server_context_from_env()
        )
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                frames = []
                for _ in range(self.batch):
                    frame = await protocol.read_frame(reader)
                    if frame is None:
                        return
                    frames.append(frame)
                data = self.build(frames)
                if self.trickle:
                    for i in range(len(data)):
                        writer.write(data[i : i + 1])
                        await writer.drain()
                else:
                    writer.write(data)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def lac_answers(frames: list[protocol.Frame]) -> bytes:
    return b"".join(
        protocol.encode_frame(
            Op.READ_LAC,
            Status.OK,
            f.request_id,
            protocol.ReadLacResponse(
                protocol.ReadLacRequest.decode(f.body).ledger_id, 100 + f.request_id
            ).encode(),
        )
        for f in frames
    )


def test_answers_split_anywhere_or_coalesced_reach_their_requests() -> None:
    async def scenario() -> None:
        server = RawAnswerServer(8, lac_answers)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=10) as pool:
            for trickle in (False, True):
                server.trickle = trickle
                lacs = await asyncio.gather(*(pool.read_lac(bookie_id, n) for n in range(8)))
                assert len(set(lacs)) == 8 and all(lac > 100 for lac in lacs)
        assert server.connections == 1
        await server.stop()

    run(scenario())


def test_absurd_answer_length_fails_in_flight_then_reconnects() -> None:
    async def scenario() -> None:
        broken = [True]

        def build(frames: list[protocol.Frame]) -> bytes:
            if broken[0]:
                broken[0] = False
                return protocol.FRAME_LENGTH.pack(protocol.FRAME_BYTES_MAX + 1) + b"\0" * 16
            return lac_answers(frames)

        server = RawAnswerServer(1, build)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=10) as pool:
            with pytest.raises(BookieUnavailableError, match="frame length"):
                await pool.read_lac(bookie_id, 1)
            assert await pool.read_lac(bookie_id, 2) > 100  # a fresh connection
        assert server.connections == 2
        await server.stop()

    run(scenario())


class ReadReplicas:
    """Two in-process bookies answering reads of entry 7 of ledger 7, each in the mode
    set for it: "good", "corrupt" (a flipped payload byte), "missing" (NO_SUCH_ENTRY) or
    "silent" (no answer until `release` is set)."""

    def __init__(self) -> None:
        self.good = protocol.Entry(7, 0, -1, 7, b"payload").encode()
        corrupt = bytearray(self.good)
        corrupt[-1] ^= 0xFF
        self.corrupt = bytes(corrupt)
        self.behaviour: dict[str, str] = {}
        self.release = asyncio.Event()
        self.servers = [self._server_for("a"), self._server_for("b")]

    def _server_for(self, name: str) -> FrameServer:
        async def handler(frame: protocol.Frame) -> tuple[int, bytes] | None:
            request = protocol.ReadRequest.decode(frame.body)
            mode = self.behaviour.get(name, "good")
            if mode == "silent":
                await self.release.wait()
            if mode == "missing":
                return Status.NO_SUCH_ENTRY, b""
            body = self.corrupt if mode == "corrupt" else self.good
            return Status.OK, protocol.ReadResponse(request.ledger_id, 0, -1, body).encode()

        return FrameServer(handler)

    async def start(self) -> list[str]:
        return [await server.start() for server in self.servers]

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop()


def _count_reads_sent_nowait(pool: BookieClientPool) -> list[int]:
    """Wrap the pool's `read_entry_nowait`; the one-item list counts the reads it sent."""
    sent_nowait = [0]
    real = pool.read_entry_nowait

    def counting(*args: object, **kwargs: object) -> bool:
        sent = real(*args, **kwargs)  # type: ignore[arg-type]
        sent_nowait[0] += sent
        return sent

    pool.read_entry_nowait = counting  # type: ignore[method-assign]
    return sent_nowait


async def _read_overtakes_a_silent_replica(
    replicas: ReadReplicas, read: Callable[[], PendingReadOp]
) -> None:
    replicas.behaviour["a"] = "silent"
    speculative = _sample("blobstore_ledger_speculative_reads_total")
    assert (await read().run()).payload == b"payload"
    assert _sample("blobstore_ledger_speculative_reads_total") == speculative + 1


async def _read_skips_a_corrupt_copy(
    replicas: ReadReplicas, read: Callable[[], PendingReadOp]
) -> None:
    replicas.behaviour["a"] = "corrupt"
    mismatches = _sample("blobstore_ledger_digest_mismatches_total")
    assert (await read().run()).payload == b"payload"
    assert _sample("blobstore_ledger_digest_mismatches_total") == mismatches + 1


async def _read_of_a_missing_entry_fails(
    replicas: ReadReplicas, read: Callable[[], PendingReadOp]
) -> None:
    replicas.behaviour["a"] = replicas.behaviour["b"] = "missing"
    with pytest.raises(EntryNotFoundError):
        await read().run()


async def _cancelled_read_frees_its_slots_once_answered(
    replicas: ReadReplicas, read: Callable[[], PendingReadOp], pool: BookieClientPool
) -> None:
    """Slots stay taken while the silent replicas hold the requests, then all come back."""
    replicas.behaviour["a"] = replicas.behaviour["b"] = "silent"
    task = asyncio.ensure_future(read().run())
    await wait_until_async(  # both replicas asked
        lambda: pool._slots.free == 8 - 3,
        2.0,
        message=lambda: f"{pool._slots.free} of 8 slots free",
        interval_s=0.01,
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool._slots.free == 8 - 3  # the first silent read and these two
    replicas.release.set()
    await wait_until_async(
        lambda: pool._slots.free == 8,
        2.0,
        message=lambda: f"{pool._slots.free} of 8 slots free",
        interval_s=0.01,
    )


def test_pending_read_on_the_fast_path_speculates_skips_bad_copies_and_frees_slots() -> None:
    """Reads sent without a task (connection up): a silent first replica is overtaken by a
    speculative read, a corrupt copy moves on to the next replica at once, replicas that
    all lack the entry give EntryNotFoundError, and a cancelled read leaves no slot
    taken once its requests are answered."""

    async def scenario() -> None:
        replicas = ReadReplicas()
        ids = await replicas.start()
        async with BookieClientPool(request_timeout_s=5, in_flight_max=8) as pool:
            sent_nowait = _count_reads_sent_nowait(pool)
            for bookie_id in ids:  # connect both: later reads take the fast path
                await pool.read_entry(bookie_id, 7, 0)

            def read() -> PendingReadOp:
                return PendingReadOp(pool, 7, 0, ids, speculative_read_timeout_s=0.05)

            await _read_overtakes_a_silent_replica(replicas, read)
            await _read_skips_a_corrupt_copy(replicas, read)
            await _read_of_a_missing_entry_fails(replicas, read)
            assert sent_nowait[0] >= 5
            await _cancelled_read_frees_its_slots_once_answered(replicas, read, pool)
        await replicas.stop()

    run(scenario())


def test_a_finished_read_leaves_nothing_to_the_cyclic_garbage_collector() -> None:
    """A read, speculative timer armed (two replicas), is freed by reference counting as
    soon as it returns: its closures once formed cycles that kept the read, its outcome
    and the entry's payload alive until the collector ran (~25 objects per small GET)."""

    async def scenario() -> None:
        good = protocol.Entry(7, 0, -1, 7, b"payload").encode()

        async def handler(frame: protocol.Frame) -> tuple[int, bytes]:
            request = protocol.ReadRequest.decode(frame.body)
            return Status.OK, protocol.ReadResponse(request.ledger_id, 0, -1, good).encode()

        a, b = FrameServer(handler), FrameServer(handler)
        ids = [await a.start(), await b.start()]
        async with BookieClientPool(request_timeout_s=5, in_flight_max=8) as pool:
            for bookie_id in ids:  # connected: reads take the fast path
                await pool.read_entry(bookie_id, 7, 0)
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for _ in range(20):
                    read = PendingReadOp(pool, 7, 0, ids, speculative_read_timeout_s=5)
                    assert (await read.run()).payload == b"payload"
                del read
                gc.collect()
                left = [type(o).__name__ for o in gc.garbage]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
            assert "PendingReadOp" not in left and "Entry" not in left, sorted(set(left))
        await a.stop()
        await b.stop()

    run(scenario())


def test_a_frame_queued_in_the_next_loop_iteration_joins_the_same_send() -> None:
    """Frames are written once the loop has polled and run one more iteration after the
    first: an add started by a callback of that iteration shares the first add's send."""

    async def scenario() -> None:
        async def handler(frame: protocol.Frame) -> tuple[int, bytes]:
            request = protocol.AddRequest.decode(frame.body)
            return Status.OK, protocol.AddResponse(request.ledger_id, request.entry_id).encode()

        server = FrameServer(handler)
        bookie_id = await server.start()
        async with BookieClientPool(request_timeout_s=5) as pool:
            key = protocol.master_key(b"")
            entries = [protocol.Entry(7, e, e - 1, e + 1, b"x").encode() for e in range(4)]
            await pool.add_entry(bookie_id, 7, 0, key, (entries[0],))  # connected now
            transport = pool._connections[bookie_id]._protocol.transport  # type: ignore[union-attr]
            assert transport is not None
            writes: list[int] = []
            write_lines = transport.writelines

            def counting(frames: list[bytes]) -> None:
                writes.append(len(frames))
                write_lines(frames)

            transport.writelines = counting  # type: ignore[method-assign]
            loop = asyncio.get_running_loop()
            answered: list[asyncio.Future[BaseException | None]] = []

            def add(entry_id: int) -> None:
                future = loop.create_future()
                answered.append(future)
                sent = pool.add_entry_nowait(
                    bookie_id, 7, entry_id, key, (entries[entry_id],), future.set_result
                )
                assert sent

            add(1)
            loop.call_soon(add, 2)  # runs in the next iteration, before the write
            assert await answered[0] is None  # answered: the write has gone out
            assert len(answered) == 2 and await answered[1] is None
            assert len(writes) == 1, writes  # one send for both adds
            # An add queued once the write went out gets a send of its own.
            add(3)
            await answered[-1]
            assert len(writes) == 2, writes
        await server.stop()

    run(scenario())
