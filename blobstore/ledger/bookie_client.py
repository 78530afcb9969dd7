"""The client side of the bookie wire protocol (`blobstore/wire/protocol.py`).

`BookieClientPool` keeps one TCP connection per bookie id ("host:port"), shared by every
ledger of the process. Requests are multiplexed on it by request id and pipelined: many
may be in flight, responses come back in any order.

Faults it tolerates and how they surface:

- connect refused / timed out, connection reset, stream ending inside a frame: every
  request in flight on that connection fails with `BookieUnavailableError`; the next
  request reconnects, but not before a bounded, jittered backoff since the last failed
  connect has passed (requests during the backoff fail fast, so ledger writers replace
  the bookie instead of queueing behind it).
- a bookie that stops answering (SIGSTOP, overload): each request has its own timeout
  and fails with `BookieTimeoutError` (a `BookieUnavailableError`): its outcome on the
  bookie is unknown. The connection is kept; late responses are dropped.
- a status other than OK: a typed `BookieError` subclass carrying the status and, for
  reads, the decoded response body (its LAC is meaningful).
- a malformed response frame: the connection is closed as if lost.

The number of requests in flight over the whole pool is bounded (`in_flight_max`);
waiting for a slot counts against the request's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import json
import logging
import os
import random
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from prometheus_client import Counter, Gauge, Histogram

from blobstore.runtime.batched_metrics import (
    BatchedCounter,
    BatchedHistogram,
    batched_counter,
    batched_histogram,
)
from blobstore.runtime.ledger_tls import LEDGER_TLS_DIR_ENV, ledger_tls_from_env
from blobstore.runtime.sampled_gauge import SampledGauge
from blobstore.wire import protocol
from blobstore.wire.protocol import STATUS_NAMES, Op, Status
from blobstore.wire.receive_buffer import ReceiveBuffer

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S_DEFAULT = 5.0
REQUEST_TIMEOUT_S_DEFAULT = 10.0
IN_FLIGHT_MAX_DEFAULT = 4096
RECONNECT_BACKOFF_S_MIN = 0.05
RECONNECT_BACKOFF_S_MAX = 2.0
# An answer frame this long (a large entry's) is read into a buffer of its own and its
# entry kept as a view of it: no copy out of the receive buffer (ReceiveBuffer).
ANSWER_HAND_OFF_BYTES_MIN = 256 * 1024

assert RECONNECT_BACKOFF_S_MAX >= RECONNECT_BACKOFF_S_MIN > 0

REQUESTS = Counter(
    "blobstore_bookie_client_requests_total",
    "Requests sent to bookies, by op and outcome",
    ["op", "outcome"],
)
REQUEST_SECONDS = Histogram(
    "blobstore_bookie_client_request_seconds",
    "Latency of bookie requests that got an answer, by op",
    ["op"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CONNECTS = Counter(
    "blobstore_bookie_client_connects_total", "Connection attempts to bookies", ["outcome"]
)
IN_FLIGHT = SampledGauge(
    Gauge("blobstore_bookie_client_in_flight", "Bookie requests awaiting an answer")
)


def _requests(op: str, outcome: str) -> BatchedCounter:
    """REQUESTS of (op, outcome), batched: every answer counts here."""
    return batched_counter(REQUESTS, op, outcome)


def _request_seconds(op: str) -> BatchedHistogram:
    return batched_histogram(REQUEST_SECONDS, op)


_NO_MASTER_KEY = bytes(protocol.MASTER_KEY_BYTES)  # a plain read proves no key


def _count_failure(op: Op, error: BaseException) -> None:
    """A request that got no answer: timed out, or the connection failed."""
    _requests(op.name, "timeout" if isinstance(error, BookieTimeoutError) else "unavailable").inc()


def _add_request(
    ledger_id: int, entry_id: int, master_key: bytes, entry: protocol.EntryParts, recovery: bool
) -> tuple[int, protocol.EntryParts]:
    """(flags, body parts) of an ADD_ENTRY: the fixed part, then the entry's parts as
    they are (no copy)."""
    prefix = protocol.AddRequest(ledger_id, entry_id, master_key, b"").encode()
    flags = protocol.AddFlag.RECOVERY_ADD if recovery else protocol.AddFlag.NONE
    return int(flags), (prefix, *entry)


# --------------------------------------------------------------------------- errors


class BookieError(Exception):
    """A bookie answered with a status other than OK."""

    status: Status = Status.INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        bookie_id: str = "",
        status: Status | None = None,
        response: protocol.ReadResponse | None = None,
    ) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.bookie_id = bookie_id
        self.response = response  # READ_ENTRY answers: the bookie's LAC travels here


class FencedError(BookieError):
    status = Status.FENCED


class UnauthorizedError(BookieError):
    status = Status.UNAUTHORIZED


class NoSuchLedgerOnBookieError(BookieError):
    status = Status.NO_SUCH_LEDGER


class NoSuchEntryError(BookieError):
    status = Status.NO_SUCH_ENTRY


class ReadOnlyBookieError(BookieError):
    status = Status.READ_ONLY


class TooLargeError(BookieError):
    status = Status.TOO_LARGE


class BadRequestError(BookieError):
    """BAD_REQUEST or BAD_VERSION: this client sent something the bookie rejects."""

    status = Status.BAD_REQUEST


class BadDigestError(BookieError):
    """The bookie found the entry's digest wrong on an add."""

    status = Status.BAD_DIGEST


class LongPollTimeoutError(BookieError):
    """A long-poll read ended without the LAC passing the previous value."""

    status = Status.TIMEOUT


class BookieInternalError(BookieError):
    status = Status.INTERNAL_ERROR


class BookieUnavailableError(Exception):
    """Connect failed, the connection was lost, or the request timed out."""

    def __init__(self, message: str, *, bookie_id: str = "") -> None:
        super().__init__(message)
        self.bookie_id = bookie_id


class BookieTimeoutError(BookieUnavailableError):
    """No answer within the request timeout: the request's effect is unknown."""


class PoolClosedError(BookieUnavailableError):
    """The pool was closed; no request is sent."""


_STATUS_ERRORS: dict[Status, type[BookieError]] = {
    Status.NO_SUCH_LEDGER: NoSuchLedgerOnBookieError,
    Status.NO_SUCH_ENTRY: NoSuchEntryError,
    Status.FENCED: FencedError,
    Status.UNAUTHORIZED: UnauthorizedError,
    Status.READ_ONLY: ReadOnlyBookieError,
    Status.TOO_LARGE: TooLargeError,
    Status.BAD_REQUEST: BadRequestError,
    Status.BAD_VERSION: BadRequestError,
    Status.BAD_DIGEST: BadDigestError,
    Status.TIMEOUT: LongPollTimeoutError,
    Status.INTERNAL_ERROR: BookieInternalError,
}


def error_for_status(
    status: int,
    bookie_id: str,
    op: Op,
    response: protocol.ReadResponse | None = None,
) -> BookieError:
    """The typed exception for a non-OK status (unknown codes become BookieInternalError)."""
    try:
        known = Status(status)
    except ValueError:
        return BookieInternalError(
            f"bookie={bookie_id} op={op.name} unknown status={status}", bookie_id=bookie_id
        )
    cls = _STATUS_ERRORS.get(known, BookieInternalError)
    return cls(
        f"bookie={bookie_id} op={op.name} status={known.name}",
        bookie_id=bookie_id,
        status=known,
        response=response,
    )


def parse_bookie_id(bookie_id: str) -> tuple[str, int]:
    """("host", port) of a bookie id "host:port"; ValueError when malformed."""
    host, sep, port_text = bookie_id.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bookie id must be host:port, got {bookie_id!r}")
    return host.strip("[]"), int(port_text)


# --------------------------------------------------------------------------- connection


def _frame_parts(
    op: Op, flags: int, request_id: int, body: protocol.EntryParts
) -> list[bytes | memoryview]:
    """protocol.encode_frame as separate buffers: an entry's bytes are never copied into
    a joined frame (the transport writes the parts together)."""
    length = protocol.FRAME_HEADER_BYTES + sum(len(part) for part in body)
    assert length <= protocol.FRAME_BYTES_MAX, length
    head = protocol.FRAME_LENGTH.pack(length) + protocol.FRAME_HEADER.pack(
        protocol.PROTOCOL_VERSION, op, flags, request_id
    )
    return [head, *body]


Answer = Callable[[protocol.Frame | None, BaseException | None], None]


def _call_answer(answer: Answer, frame: protocol.Frame | None, error: BaseException | None) -> None:
    """Run an answer callback; a bug in one must not stop the connection's reader."""
    try:
        answer(frame, error)
    except Exception:
        logger.exception("bookie answer callback failed")


def _cut_frame(
    buffer: bytearray | memoryview, start: int, end: int, owned: bool = False
) -> protocol.Frame:
    """The frame at buffer[start:end] (after its length prefix), its bytes copied once
    out of the receive buffer, which is reused: the body, or for an OK READ_ENTRY
    answer the entry alone, decoded in place (`Frame.read_response`). In a buffer the
    frame `owned` (a large entry's, read into a buffer of its own and given away), the
    entry is not copied at all: it stays a view of that buffer."""
    version, op, status, request_id = protocol.FRAME_HEADER.unpack_from(buffer, start)
    body_start = start + protocol.FRAME_HEADER_BYTES
    entry_answer = (
        op == Op.READ_ENTRY
        and status == Status.OK
        and end - body_start >= protocol.READ_RESPONSE_HEADER_BYTES
    )
    if entry_answer and owned:
        response = protocol.ReadResponse.decode(memoryview(buffer)[body_start:end], copy=False)
        return protocol.Frame(version, op, status, request_id, b"", response)
    with memoryview(buffer) as view, view[body_start:end] as body:
        if entry_answer:
            response = protocol.ReadResponse.decode(body)
            return protocol.Frame(version, op, status, request_id, b"", response)
        return protocol.Frame(version, op, status, request_id, bytes(body))


class _AnswerProtocol(asyncio.BufferedProtocol):
    """The transport of one bookie connection: answer frames are cut from the bytes as
    they arrive, in the receive buffer the transport fills in place (the bookie's
    `ReceiveBuffer`), and handed to their requests' callbacks, with no reader task and
    no coroutine per frame; `drain` waits while the transport's write buffer is over
    its high-water mark."""

    def __init__(self, connection: _BookieConnection) -> None:
        self.connection = connection
        self.transport: asyncio.Transport | None = None
        self._received = ReceiveBuffer(hand_off_bytes_min=ANSWER_HAND_OFF_BYTES_MIN)
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._error: BaseException | None = None  # why this side ended the connection
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._received.writable()

    def buffer_updated(self, nbytes: int) -> None:
        received = self._received
        received.written(nbytes)
        buffer = received.data
        size = received.end
        position = received.start
        prefix = protocol.FRAME_LENGTH.size
        answer_frame = self.connection._answer_frame
        while size - position >= prefix:
            (length,) = protocol.FRAME_LENGTH.unpack_from(buffer, position)
            error = protocol.frame_length_error(length)
            if error is not None:
                self._error = error
                received.clear()
                assert self.transport is not None
                self.transport.abort()
                return
            end = position + prefix + length
            if size < end:
                break
            frame = _cut_frame(buffer, position + prefix, end, received.owned)
            position = end
            answer_frame(frame)
        received.consume_to(position)

    def eof_received(self) -> bool:
        return False  # close; connection_lost fails what is still in flight

    def connection_lost(self, exc: Exception | None) -> None:
        error: BaseException = (
            self._error or exc or ConnectionResetError("connection closed by bookie")
        )
        self._received.clear()
        self._wake_drainers(error)
        if not self.closed.done():
            self.closed.set_result(None)
        self.connection._connection_lost(self, error)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drainers(None)

    def _wake_drainers(self, error: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(ConnectionResetError(f"connection lost: {error!r}"))

    async def drain(self) -> None:
        if self.closed.done():
            raise ConnectionResetError("connection lost")
        if not self._write_paused:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    @property
    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()


def _tls_context() -> ssl.SSLContext | None:
    """The client side of mutual TLS to bookies (BLOBSTORE_LEDGER_TLS_DIR), made once
    per directory; None: plain TCP."""
    return _tls_context_of(os.environ.get(LEDGER_TLS_DIR_ENV) or None)


@functools.cache
def _tls_context_of(directory: str | None) -> ssl.SSLContext | None:
    if directory is None:
        return None
    tls = ledger_tls_from_env({LEDGER_TLS_DIR_ENV: directory})
    assert tls is not None
    return tls.client_context()


class _BookieConnection:
    """One TCP connection to one bookie, with the requests awaiting an answer on it."""

    def __init__(
        self,
        bookie_id: str,
        *,
        connect_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.bookie_id = bookie_id
        self.host, self.port = parse_bookie_id(bookie_id)
        self._connect_timeout_s = connect_timeout_s
        self._clock = clock
        self._protocol: _AnswerProtocol | None = None
        self._connect_lock = asyncio.Lock()
        # request id -> its answer callback, called exactly once: (frame, None) or
        # (None, error). Called as answers arrive, or by the deadline timer.
        self._pending: dict[int, Answer] = {}
        # Deadlines without a timer per request: a heap of (deadline, request id, op,
        # timeout) and one timer, armed at the earliest. Entries of answered requests stay until
        # they reach the top or the heap outgrows twice the requests in flight.
        self._deadlines: list[tuple[float, int, str, float]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_armed_at = 0.0
        self._request_ids = itertools.count(1)
        # Frames queued since the last write, written with one call (one syscall) once
        # the loop has polled for I/O one more time after the first of them: requests
        # that the answers and requests arriving in that poll start join the same send
        # (`_queue_frame`).
        self._outgoing: list[bytes | memoryview] = []
        self._outgoing_protocol: _AnswerProtocol | None = None
        self._flush_scheduled = False
        self._backoff_s = 0.0
        self._retry_at = 0.0  # monotonic time before which connects fail fast
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._protocol is not None and self._protocol.open

    def in_backoff(self) -> bool:
        return not self.connected and self._clock() < self._retry_at

    def allow_connect(self) -> None:
        self._retry_at = 0.0

    async def _ensure_connected(self) -> _AnswerProtocol:
        if self.connected:
            assert self._protocol is not None
            return self._protocol
        async with self._connect_lock:
            if self.connected:
                assert self._protocol is not None
                return self._protocol
            if self._closed:
                raise PoolClosedError("bookie client pool closed", bookie_id=self.bookie_id)
            now = self._clock()
            if now < self._retry_at:
                raise BookieUnavailableError(
                    f"bookie={self.bookie_id} unreachable, next connect in "
                    f"{self._retry_at - now:.3f}s",
                    bookie_id=self.bookie_id,
                )
            loop = asyncio.get_running_loop()
            try:
                _, answers = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _AnswerProtocol(self), self.host, self.port, ssl=_tls_context()
                    ),
                    self._connect_timeout_s,
                )
            except (TimeoutError, OSError) as e:
                CONNECTS.labels("failed").inc()
                self._backoff_s = min(
                    RECONNECT_BACKOFF_S_MAX, max(RECONNECT_BACKOFF_S_MIN, self._backoff_s * 2)
                )
                self._retry_at = self._clock() + self._backoff_s * random.uniform(0.5, 1.0)
                logger.warning(
                    "bookie connect failed bookie=%s backoff_s=%.3f error=%r",
                    self.bookie_id,
                    self._backoff_s,
                    e,
                )
                raise BookieUnavailableError(
                    f"bookie={self.bookie_id} connect failed: {e!r}", bookie_id=self.bookie_id
                ) from e
            CONNECTS.labels("ok").inc()
            self._backoff_s = 0.0
            self._retry_at = 0.0
            self._protocol = answers
            logger.debug("bookie connected bookie=%s", self.bookie_id)
            return answers

    def _answer_frame(self, frame: protocol.Frame) -> None:
        answer = self._pending.pop(frame.request_id, None)
        if answer is not None:  # else answered already (timed out): dropped
            _call_answer(answer, frame, None)

    def _connection_lost(self, answers: _AnswerProtocol, error: BaseException) -> None:
        if self._protocol is answers:
            self._protocol = None
        if self._pending:
            logger.warning(
                "bookie connection lost bookie=%s in_flight=%d error=%r",
                self.bookie_id,
                len(self._pending),
                error,
            )
        pending, self._pending = self._pending, {}
        self._deadlines.clear()
        self._disarm_deadlines()
        for answer in pending.values():
            _call_answer(
                answer,
                None,
                BookieUnavailableError(
                    f"bookie={self.bookie_id} connection lost: {error!r}",
                    bookie_id=self.bookie_id,
                ),
            )

    async def request(
        self, op: Op, flags: int, body: protocol.EntryParts, timeout_s: float
    ) -> protocol.Frame:
        """Send one request and wait for its answer frame (any status)."""
        answers = await self._ensure_connected()
        future: asyncio.Future[protocol.Frame] = asyncio.get_running_loop().create_future()

        def answered(frame: protocol.Frame | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(frame)  # type: ignore[arg-type]

        request_id = self._send(answers, op, flags, body, timeout_s, answered)
        try:
            assert answers.transport is not None
            if answers.transport.get_write_buffer_size() > 0:
                # Backpressure for large bodies (the answer's deadline bounds the rest).
                async with asyncio.timeout(timeout_s):
                    await answers.drain()
            return await future
        except TimeoutError as e:
            raise BookieTimeoutError(
                f"bookie={self.bookie_id} op={op.name} no answer within {timeout_s:.3f}s",
                bookie_id=self.bookie_id,
            ) from e
        except OSError as e:
            raise BookieUnavailableError(
                f"bookie={self.bookie_id} op={op.name} send failed: {e!r}",
                bookie_id=self.bookie_id,
            ) from e
        finally:
            self._pending.pop(request_id, None)

    def request_nowait(
        self,
        op: Op,
        flags: int,
        body: protocol.EntryParts,
        timeout_s: float,
        answered: Answer,
    ) -> None:
        """Send one request on the open connection (the caller checked `connected`);
        `answered(frame, None)` or `answered(None, error)` runs exactly once, on the loop.
        The frame joins the batch being gathered like `request`'s; the sender's bound
        on requests in flight stands in for `drain` (nothing here waits)."""
        answers = self._protocol
        assert answers is not None and answers.open
        self._send(answers, op, flags, body, timeout_s, answered)

    def _send(
        self,
        answers: _AnswerProtocol,
        op: Op,
        flags: int,
        body: protocol.EntryParts,
        timeout_s: float,
        answered: Answer,
    ) -> int:
        request_id = next(self._request_ids)
        self._pending[request_id] = answered
        deadline = asyncio.get_running_loop().time() + timeout_s
        heapq.heappush(self._deadlines, (deadline, request_id, op.name, timeout_s))
        if len(self._deadlines) > 2 * len(self._pending) + 64:
            # Drop answered requests: bounded, amortized O(1) per request. In place: an
            # answer callback run by `_expire_deadlines` may send (and land here).
            pending = self._pending
            self._deadlines[:] = [d for d in self._deadlines if d[1] in pending]
            heapq.heapify(self._deadlines)
        if self._deadline_timer is None or deadline < self._deadline_armed_at:
            self._arm_deadlines(deadline)
        self._queue_frame(answers, _frame_parts(op, flags, request_id, body))
        return request_id

    def _arm_deadlines(self, at: float) -> None:
        self._disarm_deadlines()
        self._deadline_armed_at = at
        self._deadline_timer = asyncio.get_running_loop().call_at(at, self._expire_deadlines)

    def _disarm_deadlines(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    def _expire_deadlines(self) -> None:
        """Fail every request past its deadline (its outcome on the bookie is unknown;
        the connection stays, a late answer is dropped) and re-arm at the next one."""
        self._deadline_timer = None
        now = asyncio.get_running_loop().time()
        deadlines = self._deadlines
        pending = self._pending
        while deadlines and (deadlines[0][0] <= now or deadlines[0][1] not in pending):
            _, request_id, op_name, timeout_s = heapq.heappop(deadlines)
            answer = pending.pop(request_id, None)
            if answer is not None:
                _call_answer(
                    answer,
                    None,
                    BookieTimeoutError(
                        f"bookie={self.bookie_id} op={op_name} no answer within {timeout_s:.3f}s",
                        bookie_id=self.bookie_id,
                    ),
                )
        if deadlines:
            self._arm_deadlines(deadlines[0][0])

    def _queue_frame(self, answers: _AnswerProtocol, parts: list[bytes | memoryview]) -> None:
        if self._outgoing_protocol is not answers:
            self._outgoing = []  # meant for a connection that is gone: its requests failed
            self._outgoing_protocol = answers
        self._outgoing.extend(parts)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            # Written in the loop iteration after the next, not the next: the next one
            # first polls for I/O and runs what arrived (HTTP requests, bookie answers,
            # each often starting an add), and their frames join this write. Under load
            # that is fewer sends and fewer wake-ups of the bookie, whose journal then
            # also syncs more entries at a time (docs/benchmarks/design-figures.md);
            # when idle it costs one more pass of the loop.
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        frames, self._outgoing = self._outgoing, []
        answers = self._outgoing_protocol
        if not frames or answers is None or answers is not self._protocol or not answers.open:
            return  # the requests fail with the lost connection
        assert answers.transport is not None
        answers.transport.writelines(frames)

    async def close(self) -> None:
        self._closed = True
        answers = self._protocol
        if answers is not None and answers.transport is not None:
            answers._error = ConnectionResetError("connection closed by client")
            answers.transport.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(answers.closed), 1.0)


# --------------------------------------------------------------------------- pool


class _Slots:
    """The pool's bound on requests in flight: taken without waiting when one is free
    (the add fast path), or awaited in arrival order (everything else)."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take_nowait(self) -> bool:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def take(self, timeout_s: float) -> None:
        if self.take_nowait():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as the wait ended: pass it on
            else:
                waiter.cancel()
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to the next waiter
                return
        self.free += 1


class BookieClientPool:
    """One multiplexed, pipelined connection per bookie id ("host:port"), shared by all
    ledgers; reconnect with backoff; every request has a timeout; bounded in-flight count."""

    def __init__(
        self,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT,
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        in_flight_max: int = IN_FLIGHT_MAX_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert connect_timeout_s > 0, connect_timeout_s
        assert request_timeout_s > 0, request_timeout_s
        assert in_flight_max > 0, in_flight_max
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.in_flight_max = in_flight_max
        self._clock = clock
        self._connections: dict[str, _BookieConnection] = {}
        self._slots = _Slots(in_flight_max)
        self._closed = False

    def _connection(self, bookie_id: str) -> _BookieConnection:
        if self._closed:
            raise PoolClosedError("bookie client pool closed", bookie_id=bookie_id)
        connection = self._connections.get(bookie_id)
        if connection is None:
            connection = _BookieConnection(
                bookie_id, connect_timeout_s=self.connect_timeout_s, clock=self._clock
            )
            self._connections[bookie_id] = connection
        return connection

    def is_unreachable(self, bookie_id: str) -> bool:
        """True while a recent connect to the bookie failed (placement avoids it)."""
        connection = self._connections.get(bookie_id)
        return connection is not None and connection.in_backoff()

    def allow_connect(self, bookie_id: str) -> None:
        """Let the next request to the bookie try to connect even inside its backoff (a
        read with no other replica left must not fail on a timer: the bookie may be
        back). The backoff length is kept, so a bookie still down is not hammered."""
        connection = self._connections.get(bookie_id)
        if connection is not None:
            connection.allow_connect()

    async def _call(
        self,
        bookie_id: str,
        op: Op,
        flags: int,
        body: protocol.EntryParts,
        timeout_s: float | None = None,
    ) -> protocol.Frame:
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        connection = self._connection(bookie_id)
        started = self._clock()
        try:
            await self._slots.take(timeout_s)
        except TimeoutError as e:
            _requests(op.name, "timeout").inc()
            raise BookieTimeoutError(
                f"bookie={bookie_id} op={op.name} no in-flight slot within {timeout_s:.3f}s",
                bookie_id=bookie_id,
            ) from e
        IN_FLIGHT.add(1)
        try:
            remaining_s = max(0.001, timeout_s - (self._clock() - started))
            frame = await connection.request(op, flags, body, remaining_s)
        except BookieUnavailableError as e:
            _count_failure(op, e)
            raise
        finally:
            IN_FLIGHT.add(-1)
            self._slots.release()
        error = self._answer_checked(op, frame, bookie_id, started)
        if error is not None:
            raise error
        return frame

    def _answer_checked(
        self, op: Op, frame: protocol.Frame, bookie_id: str, started: float
    ) -> BookieUnavailableError | None:
        """Count an answer (latency, status); an answer to another op is an error."""
        _request_seconds(op.name).observe(self._clock() - started)
        status = frame.flags_or_status
        _requests(op.name, STATUS_NAMES.get(status) or str(status)).inc()
        if frame.op != op:
            return BookieUnavailableError(
                f"bookie={bookie_id} answered op={frame.op} to op={op.name}", bookie_id=bookie_id
            )
        return None

    @staticmethod
    def _raise_for_status(
        frame: protocol.Frame,
        bookie_id: str,
        op: Op,
        response: protocol.ReadResponse | None = None,
    ) -> None:
        if frame.flags_or_status != Status.OK:
            raise error_for_status(frame.flags_or_status, bookie_id, op, response)

    def add_entry_nowait(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        entry: protocol.EntryParts,
        done: Callable[[BaseException | None], None],
        *,
        recovery: bool = False,
    ) -> bool:
        """The add fast path: when the connection to the bookie is up and an in-flight
        slot is free, send the add now and return True; `done(error)` is then called
        exactly once, on the loop, with None once the bookie fsync'd the entry or with
        the error `add_entry` would raise. Returns False (nothing sent) otherwise: use
        `add_entry`. No task, no coroutine chain and no timeout context per request: a
        writer sends every entry to WQ bookies, so this is the client's hottest path."""
        if self._closed:
            return False
        connection = self._connections.get(bookie_id)
        if connection is None or not connection.connected or not self._slots.take_nowait():
            return False
        flags, body = _add_request(ledger_id, entry_id, master_key, entry, recovery)
        started = self._clock()
        IN_FLIGHT.add(1)

        def answered(frame: protocol.Frame | None, error: BaseException | None) -> None:
            IN_FLIGHT.add(-1)
            self._slots.release()
            if error is not None:
                _count_failure(Op.ADD_ENTRY, error)
            else:
                assert frame is not None
                error = self._answer_checked(Op.ADD_ENTRY, frame, bookie_id, started)
                if error is None and frame.flags_or_status != Status.OK:
                    error = error_for_status(frame.flags_or_status, bookie_id, Op.ADD_ENTRY)
            done(error)

        connection.request_nowait(Op.ADD_ENTRY, flags, body, self.request_timeout_s, answered)
        return True

    async def add_entry(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        entry: protocol.EntryParts,
        *,
        recovery: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        """Store `entry` (its `encode_entry` parts, or `(Entry.encode() bytes,)`); returns
        once the bookie fsync'd it."""
        flags, body = _add_request(ledger_id, entry_id, master_key, entry, recovery)
        frame = await self._call(bookie_id, Op.ADD_ENTRY, flags, body, timeout_s)
        self._raise_for_status(frame, bookie_id, Op.ADD_ENTRY)

    async def read_entry(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        *,
        fence_key: bytes | None = None,
        long_poll: tuple[int, int] | None = None,
        timeout_s: float | None = None,
    ) -> protocol.ReadResponse:
        """Read entry bytes (not verified here: callers decode with Entry.decode).

        `fence_key`: fence the ledger first (the master key). `long_poll`: (previous_lac,
        timeout_ms); the request timeout is extended by the poll time.
        """
        flags = protocol.ReadFlag.NONE
        key = _NO_MASTER_KEY
        previous_lac, poll_ms = protocol.NO_ENTRY, 0
        if fence_key is not None:
            flags |= protocol.ReadFlag.FENCE
            key = fence_key
        if long_poll is not None:
            previous_lac, poll_ms = long_poll
            assert 0 <= poll_ms <= protocol.LONG_POLL_TIMEOUT_MS_MAX, poll_ms
            flags |= protocol.ReadFlag.LONG_POLL
        body = protocol.ReadRequest(ledger_id, entry_id, key, previous_lac, poll_ms).encode()
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        frame = await self._call(
            bookie_id, Op.READ_ENTRY, int(flags), (body,), timeout_s + poll_ms / 1000
        )
        return self._read_answer(frame, bookie_id)

    def read_entry_nowait(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        done: Callable[[protocol.ReadResponse | None, BaseException | None], None],
    ) -> bool:
        """The plain read's fast path, as `add_entry_nowait`: when the connection is up
        and a slot is free, send the read now and return True; `done(response, None)` or
        `done(None, error)` (the error `read_entry` would raise) then runs exactly once,
        on the loop. Returns False (nothing sent) otherwise: use `read_entry`. A small
        GET is one such read; a task and its coroutine chain cost more than the read."""
        if self._closed:
            return False
        connection = self._connections.get(bookie_id)
        if connection is None or not connection.connected or not self._slots.take_nowait():
            return False
        body = protocol.ReadRequest(
            ledger_id, entry_id, _NO_MASTER_KEY, protocol.NO_ENTRY, 0
        ).encode()
        started = self._clock()
        IN_FLIGHT.add(1)

        def answered(frame: protocol.Frame | None, error: BaseException | None) -> None:
            IN_FLIGHT.add(-1)
            self._slots.release()
            response: protocol.ReadResponse | None = None
            if error is not None:
                _count_failure(Op.READ_ENTRY, error)
            else:
                assert frame is not None
                error = self._answer_checked(Op.READ_ENTRY, frame, bookie_id, started)
                if error is None:
                    try:
                        response = self._read_answer(frame, bookie_id)
                    except (BookieError, BookieUnavailableError) as e:
                        error = e
            done(response, error)

        connection.request_nowait(
            Op.READ_ENTRY, int(protocol.ReadFlag.NONE), (body,), self.request_timeout_s, answered
        )
        return True

    def _read_answer(self, frame: protocol.Frame, bookie_id: str) -> protocol.ReadResponse:
        """The READ_ENTRY answer in `frame`, or the error its status or body means."""
        response = frame.read_response
        if response is None and frame.body:
            try:
                response = protocol.ReadResponse.decode(frame.body)
            except protocol.ProtocolError:
                if frame.flags_or_status == Status.OK:
                    raise BookieUnavailableError(
                        f"bookie={bookie_id} sent an undecodable READ_ENTRY answer",
                        bookie_id=bookie_id,
                    ) from None
        self._raise_for_status(frame, bookie_id, Op.READ_ENTRY, response)
        if response is None:
            raise BookieUnavailableError(
                f"bookie={bookie_id} sent an empty READ_ENTRY answer", bookie_id=bookie_id
            )
        return response

    async def read_lac(
        self, bookie_id: str, ledger_id: int, *, timeout_s: float | None = None
    ) -> int:
        body = protocol.ReadLacRequest(ledger_id).encode()
        frame = await self._call(bookie_id, Op.READ_LAC, 0, (body,), timeout_s)
        self._raise_for_status(frame, bookie_id, Op.READ_LAC)
        try:
            return protocol.ReadLacResponse.decode(frame.body).last_add_confirmed
        except protocol.ProtocolError as e:
            raise BookieUnavailableError(
                f"bookie={bookie_id} sent an undecodable READ_LAC answer: {e}",
                bookie_id=bookie_id,
            ) from e

    async def write_lac(
        self,
        bookie_id: str,
        ledger_id: int,
        master_key: bytes,
        lac: int,
        *,
        timeout_s: float | None = None,
    ) -> None:
        body = protocol.WriteLacRequest(ledger_id, master_key, lac).encode()
        frame = await self._call(bookie_id, Op.WRITE_LAC, 0, (body,), timeout_s)
        self._raise_for_status(frame, bookie_id, Op.WRITE_LAC)

    async def get_bookie_info(
        self, bookie_id: str, *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        frame = await self._call(bookie_id, Op.GET_BOOKIE_INFO, 0, (), timeout_s)
        self._raise_for_status(frame, bookie_id, Op.GET_BOOKIE_INFO)
        try:
            info = json.loads(frame.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BookieUnavailableError(
                f"bookie={bookie_id} sent undecodable info: {e}", bookie_id=bookie_id
            ) from e
        if not isinstance(info, dict):
            raise BookieUnavailableError(
                f"bookie={bookie_id} sent info that is not an object", bookie_id=bookie_id
            )
        return info

    async def disconnect(self, bookie_id: str) -> None:
        """Drop the connection to one bookie (the next request reconnects)."""
        connection = self._connections.pop(bookie_id, None)
        if connection is not None:
            await connection.close()

    async def close(self) -> None:
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    async def __aenter__(self) -> BookieClientPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
