"""The bookie's TCP server: frames in, requests handled concurrently, responses by id.

Each connection is an asyncio BufferedProtocol: the transport reads into its receive
buffer in place (`blobstore/wire/receive_buffer.py`) and frames are parsed there.
Adds are checked and queued to the journal without a task per request (their response is
written from the journal's completion callback); reads, fences, LAC and info requests run
as tasks. At most `connection_in_flight_max` requests of one connection are in flight:
beyond that, and while the socket's send buffer is full, the connection stops reading
(back-pressure travels to the client through TCP).

An add (or explicit LAC) the journal cannot take, because a journal write failed or the
bookie is stopping, is answered READ_ONLY, as is every add once the bookie is read-only:
the code writers take as "this bookie takes no writes", so they replace it (an ensemble
change) and go on with the others.

A malformed frame (absurd length, unknown version or op, short body) gets an error
response when its request id could be read, then that connection is closed. Nothing about
it reaches storage.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import struct
import time
from collections.abc import Callable
from typing import Any

from blobstore.runtime.batched_metrics import BatchedCounter, BatchedHistogram, batched_counter
from blobstore.wire import protocol
from blobstore.wire.protocol import STATUS_NAMES, Op, Status
from blobstore.wire.receive_buffer import ReceiveBuffer
from bookie.direct_adds import DirectAdd, DirectAdds
from bookie.journal import Journal, JournalUnavailableError, RecordKind, encode_parts
from bookie.ledger_storage import LedgerState, LedgerStorage, ReadWouldWait
from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

HEADER_BYTES = protocol.FRAME_LENGTH.size + protocol.FRAME_HEADER_BYTES
ADD_BODY = struct.Struct(f">QQ{protocol.MASTER_KEY_BYTES}s")
ENTRY_BYTES_MAX = protocol.ENTRY_PAYLOAD_BYTES_MAX + protocol.ENTRY_HEADER_BYTES
RESPONSE_HEADER = struct.Struct(">IBBHQ")
ADD_RESPONSE = struct.Struct(">IBBHQQQ")  # frame header + AddResponse (ledger_id, entry_id)
OPS = frozenset(int(op) for op in Op)
# Per-request updates, batched (blobstore.runtime.batched_metrics): a prometheus_client update
# per add or read is a visible share of a bookie's CPU.
ADDS_OK = BatchedCounter(METRICS.adds.labels(Status.OK.name))
# An add the journal could not take (it failed or is closing): answered READ_ONLY, the
# code writers take as "this bookie takes no writes" (they replace it).
ADDS_REFUSED = BatchedCounter(METRICS.adds.labels(Status.READ_ONLY.name))
ADD_BYTES = BatchedCounter(METRICS.add_bytes)
ADD_SECONDS = BatchedHistogram(METRICS.add_seconds)
READ_SECONDS = BatchedHistogram(METRICS.read_seconds)


class AddBatch:
    """Valid adds parsed from one read of a connection, journaled together; the large
    ones (`direct`) written to a direct entry log first (bookie/direct_adds.py)."""

    __slots__ = ("records", "pieces", "nbytes", "entry_bytes", "direct", "direct_bytes")

    def __init__(self) -> None:
        # (ledger_id, entry_id, master_key, entry, lac, request_id, received_at)
        self.records: list[tuple[int, int, bytes, bytes, int, int, float]] = []
        self.pieces: list[bytes] = []
        self.nbytes = 0
        self.entry_bytes = 0
        self.direct: list[DirectAdd] = []
        self.direct_bytes = 0


# Plain ints: `int & IntFlag` builds a flag object, a measurable cost per request.
_LONG_POLL = int(protocol.ReadFlag.LONG_POLL)
_READ_ENTRY = int(Op.READ_ENTRY)
# Bytes of responses queued on one connection past which reads stop being answered
# inline and go through tasks (with their in-flight bounds) instead.
INLINE_OUT_BYTES_MAX = 4 << 20


@functools.cache
def _request_counter(op: Op, status: int) -> BatchedCounter:
    """The bookie_requests_total child of (op, status), resolved once (labels() per
    request is a visible share of a bookie's CPU under small reads) and batched."""
    return batched_counter(METRICS.requests, op.name, STATUS_NAMES[int(status)])


@functools.cache
def _read_counter(status: int) -> BatchedCounter:
    return batched_counter(METRICS.reads, STATUS_NAMES[int(status)])


def _wanted_entry(state: LedgerState, entry_id: int) -> int:
    """The entry a read names: itself, or for LAST_ENTRY the ledger's last one (NO_ENTRY
    when it has none)."""
    return state.last_entry_id if entry_id == protocol.LAST_ENTRY else entry_id


def _is_long_poll(op: int, flags: int) -> bool:
    return op == _READ_ENTRY and bool(flags & _LONG_POLL)


async def _lac_changed_within(state: LedgerState, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for the ledger's next LAC change; False when none came."""
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    state.lac_waiters.append(waiter)
    try:
        await asyncio.wait_for(waiter, timeout_s)
    except TimeoutError:
        return False
    finally:
        if waiter in state.lac_waiters:
            state.lac_waiters.remove(waiter)
    return True


def _unblock(blocked: set[BookieConnection]) -> None:
    """A bookie-wide bound has room again: the connections it stopped read and handle
    their buffered frames (one that hits a bound again rejoins a set)."""
    connections = list(blocked)
    blocked.clear()
    for connection in connections:
        connection.unblock()


class BookieServer:
    """Request handling shared by all connections."""

    def __init__(
        self,
        *,
        bookie_id: str,
        storage: LedgerStorage,
        journal: Journal,
        connections_max: int,
        connection_in_flight_max: int,
        connection_reads_in_flight_max: int,
        in_flight_bytes_max: int,
        long_poll_waiters_max: int,
        reads_in_flight_max: int,
        frame_stall_timeout_s: float,
        info: Callable[[], dict[str, Any]],
        checkpoint_soon: Callable[[], None],
        direct_adds: DirectAdds | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self.storage = storage
        self.journal = journal
        self.direct_adds = direct_adds
        self.connections_max = connections_max
        self.connection_in_flight_max = connection_in_flight_max
        # Reads hold whole entries until the socket takes them: fewer of them at once.
        self.connection_reads_in_flight_max = connection_reads_in_flight_max
        # ... and over all connections together (a bound on the bookie's read memory,
        # whatever the number of connections): reads, LAC requests, info; not long polls.
        self.reads_in_flight_max = reads_in_flight_max
        self.reads_in_flight = 0
        # Connections that stopped reading because all of them together read too much.
        self.blocked_on_reads: set[BookieConnection] = set()
        self.in_flight_bytes_max = in_flight_bytes_max
        self.in_flight_bytes = 0
        # Connections that stopped reading because all of them together hold too many bytes.
        self.blocked_on_bytes: set[BookieConnection] = set()
        self.long_poll_waiters_max = long_poll_waiters_max
        self.frame_stall_timeout_s = frame_stall_timeout_s
        self.info = info
        self.checkpoint_soon = checkpoint_soon
        self.read_only = False
        self.connections: set[BookieConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.in_flight = 0
        self.long_poll_waiters = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def new_connection(self) -> BookieConnection:
        return BookieConnection(self)

    def close_stalled_connections(self) -> int:
        """Close connections that hold part of a frame and got no byte for
        frame_stall_timeout_s while reading (a connection paused by back pressure holds
        whole frames and is not stalled). Returns how many were closed."""
        now = time.monotonic()
        stalled = [
            c
            for c in self.connections
            if c.buffer
            and not c.reading_paused
            and now - c.last_data_at > self.frame_stall_timeout_s
        ]
        for connection in stalled:
            logger.warning(
                "connection closed: part of a frame (%d bytes) stalled for %.0fs peer=%s",
                len(connection.buffer),
                now - connection.last_data_at,
                connection.peer,
            )
            METRICS.stalled_connections.inc()
            connection.abort()
        return len(stalled)

    def request_started(self, count: int = 1) -> None:
        self.in_flight += count
        self._idle.clear()

    def request_finished(self, count: int = 1) -> None:
        self.in_flight -= count
        assert self.in_flight >= 0, self.in_flight
        if self.in_flight == 0:
            self._idle.set()

    def bytes_released(self, count: int) -> None:
        self.in_flight_bytes -= count
        assert self.in_flight_bytes >= 0, self.in_flight_bytes
        if self.blocked_on_bytes and self.in_flight_bytes < self.in_flight_bytes_max:
            _unblock(self.blocked_on_bytes)

    def read_finished(self) -> None:
        self.reads_in_flight -= 1
        assert self.reads_in_flight >= 0, self.reads_in_flight
        if self.blocked_on_reads and self.reads_in_flight < self.reads_in_flight_max:
            _unblock(self.blocked_on_reads)

    async def drain(self, timeout_s: float) -> None:
        """Stop reading requests, wait (bounded) for in-flight ones, then close connections."""
        self.draining = True
        for connection in list(self.connections):
            connection.stop_reading()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            logger.warning("shutdown with requests in flight count=%d", self.in_flight)
        for task in list(self.tasks):
            task.cancel()
        for connection in list(self.connections):
            connection.close()

    # ------------------------------------------------------------------ helpers

    def fence_durably(
        self, ledger_id: int, master_key: bytes, done: Callable[[BaseException | None], None]
    ) -> None:
        state = self.storage.state_for(ledger_id, master_key)
        state.fenced = True
        self.storage.dirty.add(ledger_id)
        prefix, _ = encode_parts(RecordKind.FENCE, ledger_id, -1, master_key, b"")
        self.journal.submit([prefix, b""], len(prefix), None, done)

    def journal_future(self) -> tuple[asyncio.Future[None], Callable[[BaseException | None], None]]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(error: BaseException | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        return future, done


class BookieConnection(asyncio.BufferedProtocol):
    def __init__(self, server: BookieServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = ReceiveBuffer()
        self.in_flight = 0
        self.tasks_in_flight = 0
        # A read request waits in the buffer for room (this connection's or the bookie's).
        self.read_waiting = False
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False
        self.peer = "?"
        self.last_data_at = time.monotonic()
        self._out: list[bytes] = []
        self._out_bytes = 0  # entry bytes in _out

    # ------------------------------------------------------------------ transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport
        self.peer = str(transport.get_extra_info("peername"))
        if len(self.server.connections) >= self.server.connections_max:
            logger.warning("connection refused: too many connections peer=%s", self.peer)
            self.closed = True
            self.transport.abort()  # type: ignore[union-attr]
            return
        self.server.connections.add(self)
        METRICS.connections.set(len(self.server.connections))
        if self.server.draining:
            self.stop_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self.server.blocked_on_bytes.discard(self)
        self.server.blocked_on_reads.discard(self)
        METRICS.connections.set(len(self.server.connections))

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()
        self._process()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer.writable()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_data_at = time.monotonic()
        self.buffer.written(nbytes)
        self._process()

    def eof_received(self) -> bool | None:
        return False  # close our side too once the client is done

    def unblock(self) -> None:
        """A bookie-wide bound has room again: read and handle buffered frames."""
        if not self.closed:
            self._update_reading()
            if not self.reading_paused:
                self._process()

    def stop_reading(self) -> None:
        if not self.closed and self.transport is not None and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True

    def abort(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.buffer.clear()
            self.transport.abort()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self._flush_out()
            self.closed = True
            self.transport.close()

    # ------------------------------------------------------------------ framing

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        server = self.server
        over_bytes = server.in_flight_bytes >= server.in_flight_bytes_max
        if over_bytes:
            server.blocked_on_bytes.add(self)
        over_reads = self.read_waiting and server.reads_in_flight >= server.reads_in_flight_max
        if over_reads:
            server.blocked_on_reads.add(self)
        should_pause = (
            server.draining
            or self.writing_paused
            or over_bytes
            or over_reads
            or self.in_flight >= server.connection_in_flight_max
            or self.tasks_in_flight >= server.connection_reads_in_flight_max
        )
        if should_pause and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True
        elif not should_pause and self.reading_paused:
            self.transport.resume_reading()
            self.reading_paused = False

    def _process(self) -> None:
        """Handle the whole frames buffered, in order, while this connection and the
        bookie have room. The common path (an add, or a read with room) runs inline; a
        malformed frame and a read without room leave through helpers."""
        received = self.buffer
        buf = received.data
        pos = received.start
        size = received.end  # frames are parsed in place, at offsets into buf
        limit = self.server.connection_in_flight_max
        adds = AddBatch()
        try:
            while (
                not self.closed
                and self.in_flight < limit
                and not self.writing_paused
                and not self.server.draining
                and self.server.in_flight_bytes < self.server.in_flight_bytes_max
            ):
                if size - pos < protocol.FRAME_LENGTH.size:
                    break
                (length,) = protocol.FRAME_LENGTH.unpack_from(buf, pos)
                length_error = protocol.frame_length_error(length)
                if length_error is not None:
                    self._reject_length(buf, pos, size, length_error)
                    return
                end = pos + protocol.FRAME_LENGTH.size + length
                if size < end:
                    break
                version, op, flags, request_id = protocol.FRAME_HEADER.unpack_from(buf, pos + 4)
                body_start = pos + HEADER_BYTES
                if version != protocol.PROTOCOL_VERSION or op not in OPS:
                    self._reject_header(version, op, request_id)
                    return
                if op == Op.ADD_ENTRY:
                    ok = self._add(flags, request_id, buf, body_start, end, adds)
                elif not _is_long_poll(op, flags) and (
                    self.tasks_in_flight >= self.server.connection_reads_in_flight_max
                    or self.server.reads_in_flight >= self.server.reads_in_flight_max
                ):
                    self._wait_for_read_room()
                    break
                else:
                    self.read_waiting = False
                    with memoryview(buf) as view:
                        body = bytes(view[body_start:end])
                    if op == _READ_ENTRY:
                        ok = self._read(flags, request_id, body)
                    else:
                        ok = self._spawn(op, flags, request_id, body)
                if not ok:
                    return
                pos = end
        finally:
            self._processed(adds, pos)

    def _processed(self, adds: AddBatch, pos: int) -> None:
        """After a pass over the buffer: journal its adds, drop the frames handled (up
        to `pos`), and pause or resume reading."""
        if adds.records or adds.direct:
            self._submit_adds(adds)
        if not self.closed:
            self.buffer.consume_to(pos)
        self._update_reading()

    def _wait_for_read_room(self) -> None:
        """The next frame is a read and this connection or the bookie has no room for
        it: it stays buffered, and reading resumes when a read (of this connection, or
        of any for the bookie-wide bound) finishes."""
        if self.tasks_in_flight < self.server.connection_reads_in_flight_max:
            METRICS.read_waits.inc()
        self.read_waiting = True

    def _reject_length(
        self, buf: bytearray | memoryview, pos: int, size: int, error: protocol.ProtocolError
    ) -> None:
        """A frame length out of bounds: answered when its request id was received."""
        request_id = None
        if size - pos >= HEADER_BYTES:
            request_id = protocol.FRAME_HEADER.unpack_from(buf, pos + 4)[3]
        self._reject(Status.BAD_REQUEST, 0, request_id, str(error))

    def _reject_header(self, version: int, op: int, request_id: int) -> None:
        """A frame of an unknown protocol version or op."""
        if version != protocol.PROTOCOL_VERSION:
            self._reject(Status.BAD_VERSION, op, request_id, f"version {version}")
        else:
            self._reject(Status.BAD_REQUEST, op, request_id, f"unknown op {op}")

    def _reject(self, status: Status, op: int, request_id: int | None, why: str) -> None:
        METRICS.bad_frames.inc()
        logger.warning(
            "malformed frame peer=%s status=%s reason=%s: closing", self.peer, status.name, why
        )
        if request_id is not None and self.transport is not None:
            self.transport.write(
                protocol.encode_frame(Op(op) if op in OPS else Op.ADD_ENTRY, status, request_id)
            )
        self.buffer.clear()
        self.close()

    def respond(
        self, op: Op, status: int, request_id: int, body: bytes = b"", extra: bytes = b""
    ) -> None:
        """Write one response frame (`extra` is appended without copying)."""
        if self.closed or self.transport is None:
            return
        header = RESPONSE_HEADER.pack(
            protocol.FRAME_HEADER_BYTES + len(body) + len(extra),
            protocol.PROTOCOL_VERSION,
            op,
            status,
            request_id,
        )
        # Responses made in one loop turn (a group commit acks hundreds) leave in one
        # write: a send() per response would cost more than the add itself.
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush_out)
        self._out.append(header + body)
        if extra:
            self._out.append(extra)
            self._out_bytes += len(extra)

    def respond_add(self, status: int, request_id: int, ledger_id: int, entry_id: int) -> None:
        """An ADD_ENTRY response (an AddResponse body) packed in one go: the hot path."""
        if self.closed or self.transport is None:
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush_out)
        self._out.append(
            ADD_RESPONSE.pack(
                ADD_RESPONSE.size - protocol.FRAME_LENGTH.size,
                protocol.PROTOCOL_VERSION,
                Op.ADD_ENTRY,
                status,
                request_id,
                ledger_id,
                entry_id,
            )
        )

    def _flush_out(self) -> None:
        out, self._out = self._out, []
        self._out_bytes = 0
        if out and not self.closed and self.transport is not None:
            self.transport.writelines(out)

    def _started(self, count: int = 1) -> None:
        self.in_flight += count
        self.server.request_started(count)

    def _finished(self, count: int = 1) -> None:
        self.in_flight -= count
        self.server.request_finished(count)
        if self.reading_paused and not self.closed:
            self._update_reading()
            if not self.reading_paused:
                self._process()

    # ------------------------------------------------------------------ ADD_ENTRY

    def _add(
        self,
        flags: int,
        request_id: int,
        buf: bytearray | memoryview,
        start: int,
        end: int,
        adds: AddBatch,
    ) -> bool:
        """Check one add; a valid one joins `adds` (journaled when the read is parsed)."""
        if end - start < ADD_BODY.size + protocol.ENTRY_HEADER_BYTES:
            self._reject(Status.BAD_REQUEST, Op.ADD_ENTRY, request_id, "short add body")
            return False
        received = time.monotonic()
        ledger_id, entry_id, master_key = ADD_BODY.unpack_from(buf, start)
        with memoryview(buf) as view:  # one copy (a bytearray slice is another)
            entry = bytes(view[start + ADD_BODY.size : end])
        stored_ledger, stored_entry, lac, _ = protocol.ENTRY_HEADER.unpack_from(entry, 0)
        if stored_ledger != ledger_id or stored_entry != entry_id:
            status = Status.BAD_REQUEST
        else:
            status = self._check_add(flags, ledger_id, master_key, entry)
        if status != Status.OK:
            METRICS.adds.labels(STATUS_NAMES[status]).inc()
            self.respond_add(status, request_id, ledger_id, entry_id)
            return True
        self.server.storage.state_for(ledger_id, master_key)
        record = (ledger_id, entry_id, master_key, entry, lac, request_id, received)
        direct_adds = self.server.direct_adds
        if direct_adds is not None and direct_adds.wants(len(entry) - protocol.ENTRY_HEADER_BYTES):
            adds.direct.append(record)
            adds.direct_bytes += len(entry)
        else:
            prefix, _ = encode_parts(RecordKind.ADD, ledger_id, entry_id, master_key, entry)
            adds.records.append(record)
            adds.pieces.append(prefix)
            adds.pieces.append(entry)
            adds.nbytes += len(prefix) + len(entry)
            adds.entry_bytes += len(entry)
        self._started()
        self.server.in_flight_bytes += len(entry)
        return True

    def _submit_adds(self, adds: AddBatch) -> None:
        """Journal the adds parsed from one read as one queue item: one apply and one
        completion for all of them (the per-add cost is what bounds small adds). Large
        ones go to the direct write path, which journals their records once their
        entries are on disk; the small ones never wait for it."""
        server = self.server
        storage = server.storage
        records = adds.records
        if records:

            def apply() -> None:
                apply_add = storage.apply_add
                for ledger_id, entry_id, master_key, entry, lac, _, _ in records:
                    apply_add(ledger_id, entry_id, master_key, entry, lac)

            done = self._adds_done(records, adds.entry_bytes)
            server.journal.submit(adds.pieces, adds.nbytes, apply, done)
        if adds.direct:
            assert server.direct_adds is not None
            server.direct_adds.submit(adds.direct, self._adds_done(adds.direct, adds.direct_bytes))

    def _adds_done(
        self, records: list[DirectAdd], entry_bytes: int
    ) -> Callable[[BaseException | None], None]:
        """The completion of adds journaled together: answer each (OK once durable,
        READ_ONLY when a write failed), release their bytes and requests."""
        server = self.server
        storage = server.storage

        def done(error: BaseException | None) -> None:
            try:
                if error is None:
                    status = Status.OK
                    ADDS_OK.inc(len(records))
                    ADD_BYTES.inc(entry_bytes)
                else:
                    status = Status.READ_ONLY
                    ADDS_REFUSED.inc(len(records))
                now = time.monotonic()
                respond_add = self.respond_add
                observe = ADD_SECONDS.observe
                for ledger_id, entry_id, _, _, _, request_id, received in records:
                    observe(now - received)
                    respond_add(status, request_id, ledger_id, entry_id)
            finally:
                server.bytes_released(entry_bytes)
                self._finished(len(records))
                if storage.write_cache_full():
                    server.checkpoint_soon()

        return done

    def _check_add(self, flags: int, ledger_id: int, master_key: bytes, entry: bytes) -> Status:
        if len(entry) > ENTRY_BYTES_MAX:
            return Status.TOO_LARGE
        if not protocol.verify_entry(entry):
            return Status.BAD_DIGEST
        state = self.server.storage.states.get(ledger_id)
        if state is not None and state.master_key is not None and state.master_key != master_key:
            return Status.UNAUTHORIZED
        if state is not None and state.fenced and not flags & protocol.AddFlag.RECOVERY_ADD:
            return Status.FENCED
        if self.server.read_only:
            return Status.READ_ONLY
        return Status.OK

    # ------------------------------------------------------------------ other ops (tasks)

    def _read(self, flags: int, request_id: int, body: bytes) -> bool:
        """A READ_ENTRY. A plain one (no fence, no long poll) that memory can answer (write
        cache, read cache, entry log bytes in the page cache) is answered at once: no
        task, no in-flight accounting. Everything else runs as a task; one that memory
        could not answer goes straight to the disk there."""
        try:
            request = protocol.ReadRequest.decode(body)
        except protocol.ProtocolError as e:
            self._reject(Status.BAD_REQUEST, _READ_ENTRY, request_id, str(e))
            return False
        memory_tried = False
        if flags == 0 and self._out_bytes < INLINE_OUT_BYTES_MAX:
            received = time.monotonic()
            try:
                status = self._read_from_memory(request_id, request)
            except ReadWouldWait:
                memory_tried = True
            else:
                if status is not None:
                    _read_counter(status).inc()
                    _request_counter(Op.READ_ENTRY, status).inc()
                    READ_SECONDS.observe(time.monotonic() - received)
                    return True
        return self._start_task(
            _READ_ENTRY,
            flags,
            request_id,
            self._read_entry(flags, request_id, request, memory_tried),
        )

    def _read_from_memory(self, request_id: int, request: protocol.ReadRequest) -> Status | None:
        """Answer a plain read from memory; None (nothing sent) for the answers the task
        path gives (unknown ledger, bad entry id, no last entry); ReadWouldWait when
        only the disk has the entry."""
        state = self.server.storage.states.get(request.ledger_id)
        if state is None or request.entry_id < protocol.LAST_ENTRY:
            return None
        entry_id = _wanted_entry(state, request.entry_id)
        if entry_id == protocol.NO_ENTRY:
            return None
        entry = self.server.storage.read_now(request.ledger_id, entry_id)
        return self._respond_entry(request_id, request.ledger_id, entry_id, state, entry)

    def _respond_entry(
        self,
        request_id: int,
        ledger_id: int,
        entry_id: int,
        state: LedgerState,
        entry: bytes | None,
    ) -> Status:
        """The answer to a read of a stored ledger's entry: OK, or NO_SUCH_ENTRY."""
        status = Status.NO_SUCH_ENTRY if entry is None else Status.OK
        return self._respond_read(
            request_id, status, ledger_id, entry_id, state.last_add_confirmed, entry
        )

    def _respond_read(
        self,
        request_id: int,
        status: Status,
        ledger_id: int,
        entry_id: int,
        lac: int,
        entry: bytes | None = None,
    ) -> Status:
        body = protocol.ReadResponse(ledger_id, entry_id, lac).encode()
        self.respond(Op.READ_ENTRY, status, request_id, body, entry or b"")
        return status

    def _spawn(self, op: int, flags: int, request_id: int, body: bytes) -> bool:
        """READ_LAC, WRITE_LAC and GET_BOOKIE_INFO, each as a task."""
        try:
            if op == Op.READ_LAC:
                coro = self._read_lac(request_id, protocol.ReadLacRequest.decode(body))
            elif op == Op.WRITE_LAC:
                coro = self._write_lac(request_id, protocol.WriteLacRequest.decode(body))
            else:
                coro = self._bookie_info(request_id)
        except protocol.ProtocolError as e:
            self._reject(Status.BAD_REQUEST, op, request_id, str(e))
            return False
        return self._start_task(op, flags, request_id, coro)

    def _start_task(self, op: int, flags: int, request_id: int, coro: Any) -> bool:
        # A long poll may wait a minute: it counts against long_poll_waiters_max, not
        # against this connection's in-flight bounds (else a few tailing readers would
        # block the adds they are waiting for, sent on the same connection).
        counted = not _is_long_poll(op, flags)
        if counted:
            self._started()
            self.tasks_in_flight += 1
            self.server.reads_in_flight += 1
        task = asyncio.get_running_loop().create_task(
            self._guard(Op(op), request_id, coro, counted)
        )
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)
        return True

    async def _guard(self, op: Op, request_id: int, coro: Any, counted: bool) -> None:
        status = Status.INTERNAL_ERROR
        try:
            status = await coro
        except Exception:
            logger.exception(
                "request failed op=%s request_id=%d peer=%s", op.name, request_id, self.peer
            )
            self.respond(op, status, request_id)
        finally:
            _request_counter(op, status).inc()
            if counted:
                self.tasks_in_flight -= 1
                self.server.read_finished()
                self._finished()

    async def _read_entry(
        self, flags: int, request_id: int, request: protocol.ReadRequest, memory_tried: bool
    ) -> Status:
        received = time.monotonic()
        status = await self._do_read(flags, request_id, request, memory_tried)
        _read_counter(status).inc()
        READ_SECONDS.observe(time.monotonic() - received)
        return status

    async def _do_read(
        self, flags: int, request_id: int, request: protocol.ReadRequest, memory_tried: bool
    ) -> Status:
        """A READ_ENTRY as a task: fence first (FENCE flag), wait for the LAC to pass
        `previous_lac` (LONG_POLL flag), then read the entry."""
        storage = self.server.storage
        ledger_id = request.ledger_id

        def answer(status: Status, entry_id: int, lac: int, entry: bytes = b"") -> Status:
            return self._respond_read(request_id, status, ledger_id, entry_id, lac, entry)

        if request.entry_id < protocol.LAST_ENTRY:
            return answer(Status.BAD_REQUEST, request.entry_id, protocol.NO_ENTRY)
        if flags & protocol.ReadFlag.FENCE and not await self._fence_for_read(request):
            return answer(Status.UNAUTHORIZED, request.entry_id, protocol.NO_ENTRY)
        state = storage.states.get(ledger_id)
        if state is None:
            return answer(Status.NO_SUCH_LEDGER, request.entry_id, protocol.NO_ENTRY)
        if (
            flags & protocol.ReadFlag.LONG_POLL
            and state.last_add_confirmed <= request.previous_lac
            and not await self._wait_for_lac(state, request)
        ):
            return answer(Status.TIMEOUT, request.entry_id, state.last_add_confirmed)
        entry_id = _wanted_entry(state, request.entry_id)
        if entry_id == protocol.NO_ENTRY:
            return answer(Status.NO_SUCH_ENTRY, protocol.LAST_ENTRY, state.last_add_confirmed)
        if memory_tried:  # _read found it in no cache and not in the page cache
            entry = await storage.read_from_disk(ledger_id, entry_id)
        else:
            entry = await storage.read(ledger_id, entry_id)
        return self._respond_entry(request_id, ledger_id, entry_id, state, entry)

    async def _fence_for_read(self, request: protocol.ReadRequest) -> bool:
        """Fence the ledger durably (journaled) before the read; False, with nothing
        done, when the request's master key is not the ledger's."""
        server = self.server
        ledger_id = request.ledger_id
        state = server.storage.states.get(ledger_id)
        if (
            state is not None
            and state.master_key is not None
            and state.master_key != request.master_key
        ):
            return False
        future, done = server.journal_future()
        server.fence_durably(ledger_id, request.master_key, done)
        self._started()  # the fence must finish even when the reader goes away
        try:
            await future
        finally:
            self._finished()
        logger.info("ledger fenced ledger_id=%d peer=%s", ledger_id, self.peer)
        return True

    async def _wait_for_lac(self, state: LedgerState, request: protocol.ReadRequest) -> bool:
        """A long poll: wait (up to the request's timeout, bounded) until the ledger's LAC
        passes `previous_lac`. True when it did; False on timeout, when the ledger was
        dropped meanwhile, or when long_poll_waiters_max polls already wait."""
        server = self.server
        if server.long_poll_waiters >= server.long_poll_waiters_max:
            return False
        timeout_s = min(max(request.timeout_ms, 0), protocol.LONG_POLL_TIMEOUT_MS_MAX) / 1000.0
        deadline = time.monotonic() + timeout_s
        server.long_poll_waiters += 1
        try:
            while (
                state.last_add_confirmed <= request.previous_lac
                and server.storage.states.get(request.ledger_id) is state
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not await _lac_changed_within(state, remaining):
                    break
        finally:
            server.long_poll_waiters -= 1
        return state.last_add_confirmed > request.previous_lac

    async def _read_lac(self, request_id: int, request: protocol.ReadLacRequest) -> Status:
        state = self.server.storage.states.get(request.ledger_id)
        if state is None:
            status, lac = Status.NO_SUCH_LEDGER, protocol.NO_ENTRY
        else:
            status, lac = Status.OK, state.last_add_confirmed
        self.respond(
            Op.READ_LAC,
            status,
            request_id,
            protocol.ReadLacResponse(request.ledger_id, lac).encode(),
        )
        return status

    async def _write_lac(self, request_id: int, request: protocol.WriteLacRequest) -> Status:
        server = self.server
        storage = server.storage
        ledger_id = request.ledger_id
        state = storage.states.get(ledger_id)
        status = Status.OK
        if request.last_add_confirmed < protocol.NO_ENTRY:
            status = Status.BAD_REQUEST
        elif (
            state is not None
            and state.master_key is not None
            and state.master_key != request.master_key
        ):
            status = Status.UNAUTHORIZED
        else:
            storage.state_for(ledger_id, request.master_key)
            future, done = server.journal_future()
            prefix, _ = encode_parts(
                RecordKind.LAC, ledger_id, request.last_add_confirmed, request.master_key, b""
            )

            def apply() -> None:
                storage.state_for(ledger_id, request.master_key)
                storage.apply_explicit_lac(ledger_id, request.last_add_confirmed)

            server.journal.submit([prefix, b""], len(prefix), apply, done)
            try:
                await future
            except JournalUnavailableError:
                status = Status.READ_ONLY
        self.respond(
            Op.WRITE_LAC,
            status,
            request_id,
            protocol.ReadLacResponse(ledger_id, request.last_add_confirmed).encode(),
        )
        return status

    async def _bookie_info(self, request_id: int) -> Status:
        body = json.dumps(self.server.info(), sort_keys=True).encode()
        self.respond(Op.GET_BOOKIE_INFO, Status.OK, request_id, body)
        return Status.OK
