"""One ZooKeeper session spoken directly on the asyncio event loop.

kazoo's client runs a connection thread: every request crosses from the loop to that
thread (a deque, a wake-up byte on a socket pair, a `select`, a lock per result) and its
reply crosses back (`call_soon_threadsafe`), with the two threads contending for the GIL
at each step. Written from the loop, a request costs a fraction of that client CPU and
a session carries about twice the requests per second (figures in docs/benchmarks/).
The catalog sends one or two requests per object write and a share of a `sync` per
read, so this cost is part of every S3 request.

`ZooKeeperSession` keeps kazoo's wire format (`kazoo.protocol.serialization`: the
request records and their jute encoding), its exceptions and its session states
(`KazooState`), and replaces the transport: a `asyncio.Protocol` that frames requests,
matches replies to requests in order (ZooKeeper answers a session's requests in the
order sent) and hands watch events to their callbacks as they arrive, before any later
reply is handled.

Session semantics follow ZooKeeper's own clients:
- A connection to one server of the ensemble (tried in random order), re-established on
  loss within the session timeout with the same session id and password: state
  SUSPENDED while away, CONNECTED again after. Requests sent before the loss fail with
  `ConnectionLoss` (their outcome is unknown); requests made while away wait for the
  connection (bounded by their caller's timeout).
- A server that answers the reconnection with an expired session: state LOST, every
  waiting request fails with `SessionExpiredError`, every watch is fired with an event
  of type NONE and dropped, and a new session is opened (CONNECTED).
- Pings when idle (a third of the negotiated timeout); a connection silent for two
  thirds of it is dropped and re-established.
- Data, existence and child watches are re-registered after a reconnection
  (`SetWatches` with the last zxid seen, as ZooKeeper's Java client does), so a change
  made while the connection was away still fires them.
- Frames are bounded (`MAX_FRAME_BYTES`), and so is every wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import ssl
import struct
import time
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable
from typing import Any, NoReturn, cast

from kazoo.exceptions import (
    EXCEPTIONS,
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import (
    Auth,
    Close,
    Connect,
    Create,
    Exists,
    GetChildren,
    GetChildren2,
    Ping,
    Transaction,
    Watch,
    int_struct,
    write_string,
)
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent
from prometheus_client import Counter

from blobstore.runtime.errors import UsageError
from blobstore.runtime.ledger_tls import ZK_TLS_DIR_ENV, ledger_tls_from_env
from blobstore.runtime.zk_auth import ZooKeeperDigest

logger = logging.getLogger(__name__)

CONNECTIONS = Counter(
    "blobstore_zk_connections_total",
    "ZooKeeper connections established: the first of a session, and each reconnection",
)
CONNECTION_LOSSES = Counter(
    "blobstore_zk_connection_losses_total", "ZooKeeper connections lost (state SUSPENDED)"
)
SESSION_EXPIRATIONS = Counter(
    "blobstore_zk_session_expirations_total", "ZooKeeper sessions found expired (state LOST)"
)
WATCHES_REMOVED = Counter(
    "blobstore_zk_watches_removed_total",
    "Data watches removed from the server because nothing here watched the path any more",
)

# Replies are bounded by the server's jute.maxbuffer (1 MiB by default) for data; a
# child list can be larger. Anything past this is a broken stream, not a reply.
MAX_FRAME_BYTES = 64 * 1024 * 1024
# ZooKeeper closes the connection of a request longer than its jute.maxbuffer, failing
# every request in flight on it, and a retry of that request does it again. So requests
# are measured here and one too long fails alone, with this error. The embedded server
# runs with jute.maxbuffer=4 MiB and an ensemble serving blobstore needs as much: one multi
# completes a multipart upload, deleting its up to 10,000 part znodes (~1.5 MB of paths).
# BLOBSTORE_ZK_REQUEST_BYTES_MAX matches servers configured otherwise.
REQUEST_BYTES_MAX_DEFAULT = 4 * 1024 * 1024
REQUEST_BYTES_MAX_MIN = 64 * 1024
REQUEST_BYTES_MAX_ENV = "BLOBSTORE_ZK_REQUEST_BYTES_MAX"
_REQUEST_HEADER_BYTES = 8  # xid and type: counted in the server's length check


class ZooKeeperRequestTooLargeError(ZookeeperError):  # type: ignore[misc]
    """A request longer than the servers' jute.maxbuffer: refused before it is sent."""

    def __init__(self, request_bytes: int, limit_bytes: int, what: str) -> None:
        super().__init__(
            f"ZooKeeper {what} request of {request_bytes} bytes passes the limit of "
            f"{limit_bytes} ({REQUEST_BYTES_MAX_ENV}, the servers' jute.maxbuffer)"
        )
        self.request_bytes = request_bytes
        self.limit_bytes = limit_bytes


def request_bytes_max_from_env(environ: dict[str, str] | None = None) -> int:
    """The request size limit: BLOBSTORE_ZK_REQUEST_BYTES_MAX, or the default."""
    raw = (os.environ if environ is None else environ).get(REQUEST_BYTES_MAX_ENV)
    if raw is None or raw == "":
        return REQUEST_BYTES_MAX_DEFAULT
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < REQUEST_BYTES_MAX_MIN:
        raise UsageError(
            f"{REQUEST_BYTES_MAX_ENV}={raw!r}: need a whole number of bytes, at least "
            f"{REQUEST_BYTES_MAX_MIN} (it must match the ZooKeeper servers' jute.maxbuffer)"
        )
    return value


CONNECT_ATTEMPT_TIMEOUT_S_MAX = 10.0
RECONNECT_DELAY_S = 0.1
RECONNECT_DELAY_S_MAX = 2.0
# A server that stays unreachable is logged on the first failure and then at most this
# often (with the count of attempts meanwhile), not once per reconnect attempt.
UNREACHABLE_LOG_INTERVAL_S = 30.0
CLOSE_TIMEOUT_S = 2.0

WATCH_XID = -1
PING_XID = -2
AUTH_XID = -4
SET_WATCHES_XID = -8
SET_WATCHES_TYPE = 101
REMOVE_WATCHES_TYPE = 18  # ZooKeeper 3.5+
WATCHER_TYPE_DATA = 2  # RemoveWatches: data watches (those of exists() too)

_REPLY_HEADER = struct.Struct("!iqi")
_REQUEST_HEADER = struct.Struct("!iii")  # length, xid, type

WatchCallback = Callable[[WatchedEvent], None]

# Server order and retry jitter: a generator of its own, never the global `random` state
# an application (or a test's seeded strategy) may rely on.
_RANDOM = random.Random()

# kazoo's Watch.type numbers -> EventType
_EVENT_TYPES = {
    1: EventType.CREATED,
    2: EventType.DELETED,
    3: EventType.CHANGED,
    4: EventType.CHILD,
}


def parse_hosts(hosts: str) -> tuple[list[tuple[str, int]], str]:
    """ "h1:p1,h2:p2/chroot" -> ([(h1, p1), (h2, p2)], "/chroot")."""
    chroot = ""
    slash = hosts.find("/")
    if slash >= 0:
        hosts, chroot = hosts[:slash], hosts[slash:].rstrip("/")
    servers = []
    for part in hosts.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("["):  # [ipv6]:port or [ipv6]
            host, _, rest = part[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port = part.rpartition(":") if ":" in part else (part, "", "")
        if port and not (port.isascii() and port.isdigit() and 0 < int(port) <= 65535):
            raise ValueError(f"ZooKeeper address {part!r}: the port must be a number in [1, 65535]")
        servers.append((host, int(port) if port else 2181))
    if not servers:
        raise ValueError(f"no ZooKeeper server in {hosts!r}")
    return servers, chroot


class _SetWatches:
    """The SetWatches request (not in kazoo): re-arm watches after a reconnection."""

    type = SET_WATCHES_TYPE

    def __init__(self, zxid: int, data: list[str], exist: list[str], child: list[str]) -> None:
        self.zxid, self.data, self.exist, self.child = zxid, data, exist, child

    def serialize(self) -> bytes:
        out = bytearray(struct.pack("!q", self.zxid))
        for paths in (self.data, self.exist, self.child):
            out += int_struct.pack(len(paths))
            for path in paths:
                out += write_string(path)
        return bytes(out)


def _outcome_retrieved(future: asyncio.Future[Any]) -> None:
    """For requests nobody waits for: a failure (no watch left, a lost connection) is
    expected and harmless."""
    if not future.cancelled():
        future.exception()


class _RemoveWatches:
    """The RemoveWatches request (not in kazoo): drop this session's data watch on a path."""

    type = REMOVE_WATCHES_TYPE

    def __init__(self, path: str) -> None:
        self.path = path

    def serialize(self) -> bytes:
        return bytes(write_string(self.path) + int_struct.pack(WATCHER_TYPE_DATA))


# SetWatches frames stay below this (as ZooKeeper's Java client does): one frame past the
# server's jute.maxbuffer would make it stop answering the connection.
SET_WATCHES_BYTES_MAX = 128 * 1024


def set_watches_batches(
    zxid: int, data: list[str], exist: list[str], child: list[str]
) -> list[_SetWatches]:
    """The watches to re-arm, in frames of at most ~SET_WATCHES_BYTES_MAX."""
    batches: list[_SetWatches] = []
    lists: tuple[list[str], list[str], list[str]] = ([], [], [])
    size = 0
    for kind, paths in enumerate((data, exist, child)):
        for path in paths:
            n = len(path.encode()) + 4
            if size and size + n > SET_WATCHES_BYTES_MAX:
                batches.append(_SetWatches(zxid, *lists))
                lists, size = ([], [], []), 0
            lists[kind].append(path)
            size += n
    if size:
        batches.append(_SetWatches(zxid, *lists))
    return batches


class _Pending:
    __slots__ = ("request", "future", "watch", "on_result", "xid", "body")

    def __init__(
        self,
        request: Any,
        future: asyncio.Future[Any] | None,
        watch: WatchCallback | None,
        on_result: Callable[[Any], None] | None = None,
    ) -> None:
        self.request = request
        self.future = future
        self.watch = watch
        self.on_result = on_result
        self.xid = 0
        # Encoded when made, so that a request that cannot be encoded fails its caller
        # and never reaches the connection.
        self.body = request.serialize()


class _Connection(asyncio.Protocol):
    """One TCP connection of the session: the handshake, then framed requests/replies."""

    def __init__(self, session: ZooKeeperSession) -> None:
        self.session = session
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.handshake: asyncio.Future[Connect] = asyncio.get_running_loop().create_future()
        # The error code of the answer to the digest authentication (0: accepted).
        self.authenticated: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending: deque[_Pending] = deque()
        # Paths with a watching request sent on this connection and not yet answered:
        # their watch may be set on the server before this client knows of it.
        self.watching: Tally[str] = Tally()
        self.xid = 0
        self.last_received = 0.0
        self.last_sent = 0.0
        self.established = False  # the handshake is over: frames are replies
        self.paused = False  # the transport's write buffer is above its high-water mark

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.last_received = self.last_sent = asyncio.get_running_loop().time()

    def data_received(self, data: bytes) -> None:
        self.last_received = asyncio.get_running_loop().time()
        buffer = self.buffer
        buffer += data
        start = 0
        try:
            while len(buffer) - start >= 4:
                (length,) = int_struct.unpack_from(buffer, start)
                if not 0 <= length <= MAX_FRAME_BYTES:
                    raise ConnectionLoss(f"bad frame length {length}")
                end = start + 4 + length
                if len(buffer) < end:
                    break
                frame = bytes(buffer[start + 4 : end])
                start = end
                self._frame(frame)
        except Exception as e:  # noqa: BLE001 - a broken stream ends the connection
            logger.warning("zookeeper connection dropped: %s", e)
            self.abort()
        finally:
            if start:
                del buffer[:start]

    def pause_writing(self) -> None:
        # The server is not reading: later requests wait in the session's queue (bounded
        # by their callers' timeouts) instead of growing the transport's buffer.
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.session._resume(self)

    def connection_lost(self, exc: Exception | None) -> None:
        for opening in (self.handshake, self.authenticated):
            if not opening.done():
                opening.set_exception(ConnectionLoss("connection closed during handshake"))
                opening.exception()
        if not self.closed.done():
            self.closed.set_result(None)

    # -- requests
    def usable(self) -> bool:
        """Open for writes (a closed uvloop transport raises on write)."""
        transport = self.transport
        return transport is not None and not transport.is_closing() and not self.closed.done()

    def send(self, pending: _Pending) -> None:
        transport = self.transport
        assert transport is not None
        request = pending.request
        # Pings and SetWatches have fixed xids and are not matched to a caller: their
        # replies are recognized by xid alone.
        if isinstance(request, Ping):
            xid = PING_XID
        elif isinstance(request, _SetWatches):
            xid = SET_WATCHES_XID
        else:
            self.xid = self.xid % 2147483647 + 1
            xid = self.xid
        pending.xid = xid
        body = pending.body
        transport.write(_REQUEST_HEADER.pack(len(body) + 8, xid, request.type) + body)
        self.last_sent = asyncio.get_running_loop().time()
        if xid > 0:
            self.pending.append(pending)
            if pending.watch is not None:
                self.watching[request.path] += 1

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- replies
    def _frame(self, frame: bytes) -> None:
        """One frame from the server: most are replies to the oldest request sent."""
        if not self.established:
            self._handshake_frame(frame)
            return
        xid, zxid, err = _REPLY_HEADER.unpack_from(frame, 0)
        if xid <= 0:
            self._notification_frame(xid, err, frame)
            return
        session = self.session
        if zxid > session.last_zxid:  # as the Java client: replies only
            session.last_zxid = zxid
        sent = self.pending
        if not sent or sent[0].xid != xid:
            self._unexpected_reply(xid)
        pending = sent.popleft()
        if pending.watch is not None:
            self._watching_answered(pending.request.path)
        try:
            session._reply(pending, frame, err)
        except Exception as e:
            future = pending.future  # a reply that does not decode fails its request
            if future is not None and not future.done():
                future.set_exception(e)
                future.exception()
            raise

    def _handshake_frame(self, frame: bytes) -> None:
        if self.handshake.done():
            raise ConnectionLoss("frame after an abandoned handshake")
        connect, _ = Connect.deserialize(frame, 0)
        self.handshake.set_result(connect)

    def _notification_frame(self, xid: int, err: int, frame: bytes) -> None:
        """A frame with a fixed xid: a watch event, or the answer to a ping or SetWatches."""
        if xid == WATCH_XID:
            watch, _ = Watch.deserialize(frame, _REPLY_HEADER.size)
            self.session._watch_event(watch)
        elif xid == AUTH_XID and not self.authenticated.done():
            self.authenticated.set_result(err)
        elif xid in (PING_XID, SET_WATCHES_XID):
            if err:
                logger.warning("zookeeper xid %d answered with error %d", xid, err)
        else:
            self._unexpected_reply(xid)

    def _unexpected_reply(self, xid: int) -> NoReturn:
        """A reply that is not to the oldest request sent: the stream is broken (the
        requests left in `pending` fail with the connection)."""
        if not self.pending:
            raise ConnectionLoss(f"reply xid {xid} with no request outstanding")
        raise ConnectionLoss(f"reply xid {xid}, expected {self.pending[0].xid}")

    def _watching_answered(self, path: str) -> None:
        if self.watching[path] <= 1:
            del self.watching[path]
        else:
            self.watching[path] -= 1


def zk_tls_context() -> ssl.SSLContext | None:
    """The client side of TLS to ZooKeeper (BLOBSTORE_ZK_TLS_DIR), made once per
    directory; None: plain TCP."""
    return _zk_tls_context_of(os.environ.get(ZK_TLS_DIR_ENV) or None)


@functools.cache
def _zk_tls_context_of(directory: str | None) -> ssl.SSLContext | None:
    if directory is None:
        return None
    tls = ledger_tls_from_env({ZK_TLS_DIR_ENV: directory}, ZK_TLS_DIR_ENV)
    assert tls is not None
    return tls.client_context()


class ZooKeeperSession:
    """A ZooKeeper session for the running event loop (see the module docstring)."""

    def __init__(
        self,
        hosts: str,
        session_timeout_s: float,
        request_bytes_max: int | None = None,
        digest: ZooKeeperDigest | None = None,
    ) -> None:
        self.hosts = hosts
        self.digest = digest  # sent on every connection (blobstore.runtime.zk_auth)
        # TLS to the servers, with this process's certificate (BLOBSTORE_ZK_TLS_DIR).
        self.tls = zk_tls_context()
        self.request_bytes_max = (
            request_bytes_max_from_env() if request_bytes_max is None else request_bytes_max
        )
        self.servers, self.chroot = parse_hosts(hosts)
        self.session_timeout_s = session_timeout_s
        self.state = KazooState.LOST
        self.session_id = 0
        self._password = b"\x00" * 16
        self.negotiated_timeout_s = session_timeout_s
        self.last_zxid = 0
        self._listeners: list[Callable[[KazooState], None]] = []
        self._connection: _Connection | None = None
        self._waiting: deque[_Pending] = deque()  # made while not connected
        self._data_watches: dict[str, set[WatchCallback]] = {}
        self._exist_watches: dict[str, set[WatchCallback]] = {}
        self._child_watches: dict[str, set[WatchCallback]] = {}
        self._runner: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._stopped = asyncio.Event()
        self._closing = False
        # (host, port) -> [attempts failed since it was last reached, when last logged]
        self._unreachable: dict[tuple[str, int], list[float]] = {}

    # ------------------------------------------------------------------ lifecycle

    def add_listener(self, listener: Callable[[KazooState], None]) -> None:
        """`listener(state)` is called on the loop at every state change."""
        self._listeners.append(listener)

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED and self._connection is not None

    async def start(self, timeout_s: float) -> None:
        """Open the session; raises KazooTimeoutError when no server answers in time."""
        if self._runner is None:
            self._closing = False
            self._stopped.clear()
            self._runner = asyncio.create_task(self._run(), name=f"zookeeper {self.hosts}")
        connected = asyncio.ensure_future(self._connected.wait())
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait(
                {connected, stopped}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            connected.cancel()
            stopped.cancel()
        if self._closing:
            raise ConnectionClosedError("the session was closed while it was being opened")
        if not self._connected.is_set():
            await self.close()
            raise KazooTimeoutError(
                f"no ZooKeeper server of {self.hosts} answered in {timeout_s:g} s"
            )

    async def close(self) -> None:
        """Close the session (its ephemeral znodes go at once) and stop."""
        self._closing = True
        self._stopped.set()
        connection = self._connection
        if connection is not None and self.state == KazooState.CONNECTED and connection.usable():
            future = asyncio.get_running_loop().create_future()
            connection.send(_Pending(Close(), future, None))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(future), CLOSE_TIMEOUT_S)
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._runner
            self._runner = None
        if connection is not None:
            connection.abort()
        self._connection = None
        self._fail_all(ConnectionClosedError("Connection has been closed"))
        # A closed session is gone: a later start() opens a new one.
        self.session_id = 0
        self._password = b"\x00" * 16
        self.last_zxid = 0
        for watches in (self._data_watches, self._exist_watches, self._child_watches):
            watches.clear()
        self._set_state(KazooState.LOST)

    # ------------------------------------------------------------------ requests

    def submit(
        self,
        request: Any,
        watch: WatchCallback | None = None,
        on_result: Callable[[Any], None] | None = None,
    ) -> asyncio.Future[Any]:
        """Send `request` (a kazoo request record with chrooted paths); the future gets
        its decoded reply or the mapped exception. `on_result`, if given, is called with
        a reply that is not an error in the step that reads it, before the future is
        resolved (whose waiters run one loop iteration later); it must not raise."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._closing:
            future.set_exception(ConnectionClosedError("Connection has been closed"))
            return future
        pending = _Pending(request, future, watch, on_result)  # raises if not encodable
        size = len(pending.body) + _REQUEST_HEADER_BYTES
        if size > self.request_bytes_max:
            name = type(request).__name__
            future.set_exception(ZooKeeperRequestTooLargeError(size, self.request_bytes_max, name))
            return future
        connection = self._connection
        if (
            connection is not None
            and self.state == KazooState.CONNECTED
            and not connection.paused
            and not self._waiting
            and connection.usable()
        ):
            connection.send(pending)
        else:
            waiting = self._waiting
            waiting.append(pending)
            if len(waiting) % 1024 == 0:  # callers that gave up leave their requests
                self._waiting = deque(p for p in waiting if p.future is None or not p.future.done())
        return future

    def _resume(self, connection: _Connection) -> None:
        """Send what waited while `connection` was paused, until it pauses again."""
        if connection is not self._connection or self.state != KazooState.CONNECTED:
            return
        waiting = self._waiting
        while waiting and not connection.paused and connection.usable():
            pending = waiting.popleft()
            if pending.future is None or not pending.future.done():
                connection.send(pending)

    def chrooted(self, path: str) -> str:
        if not self.chroot:
            return path
        return self.chroot + path if path != "/" else self.chroot

    def unchrooted(self, path: str) -> str:
        if self.chroot and path.startswith(self.chroot):
            return path[len(self.chroot) :] or "/"
        return path

    def _reply(self, pending: _Pending, frame: bytes, err: int) -> None:
        """Decode a reply, arm the watch it asked for, and settle its caller."""
        if err:
            self._error_reply(pending, err)
            return
        request = pending.request
        offset = _REPLY_HEADER.size
        if isinstance(request, Exists):
            result = request.deserialize(frame, offset)
            if pending.watch is not None:
                self._arm(self._data_watches, request.path, pending.watch)
        else:
            deserialize = getattr(request, "deserialize", None)
            result = deserialize(frame, offset) if deserialize is not None else None
            if pending.watch is not None:
                self._arm_reply_watch(request, pending.watch)
            if isinstance(request, (Create, Transaction)):
                result = self._unchrooted_result(request, result)
        if pending.on_result is not None:
            self._call_reply_hook(pending, result)
        future = pending.future
        if future is not None and not future.done():
            future.set_result(result)

    def _error_reply(self, pending: _Pending, err: int) -> None:
        """A reply with an error: fails its caller, except Exists on a missing node,
        whose answer is None (and whose watch fires when the node is created)."""
        request = pending.request
        error = EXCEPTIONS[err]()
        if isinstance(request, Exists) and isinstance(error, NoNodeError):
            if pending.watch is not None:
                self._arm(self._exist_watches, request.path, pending.watch)
            if pending.on_result is not None:
                self._call_reply_hook(pending, None)
            if pending.future is not None and not pending.future.done():
                pending.future.set_result(None)
            return
        future = pending.future
        if future is not None and not future.done():
            future.set_exception(error)
            future.exception()  # a caller that timed out is gone

    def _arm_reply_watch(self, request: Any, watch: WatchCallback) -> None:
        if isinstance(request, (GetChildren, GetChildren2)):
            self._arm(self._child_watches, request.path, watch)
        else:
            self._arm(self._data_watches, request.path, watch)

    def _unchrooted_result(self, request: Create | Transaction, result: Any) -> Any:
        """The paths a Create or a Transaction answers with, without the chroot."""
        if isinstance(request, Create):
            return self.unchrooted(result)
        return [self.unchrooted(r) if isinstance(r, str) else r for r in result]

    @staticmethod
    def _call_reply_hook(pending: _Pending, result: Any) -> None:
        assert pending.on_result is not None
        try:
            pending.on_result(result)
        except Exception:  # noqa: BLE001 - a caller's bug must not break the session
            logger.exception(
                "zookeeper reply hook failed request=%s", type(pending.request).__name__
            )

    # ------------------------------------------------------------------ watches

    def forget_data_watch(self, path: str, callback: WatchCallback) -> None:
        """Stop calling `callback` on changes of `path` (chrooted). Once nothing of this
        session watches the path, the server's watch goes too (RemoveWatches): a cache
        that evicts what it read does not leave a watch per znode it ever read on the
        server (its memory) and in every reconnection's SetWatches.

        Not while a watching request for the path is unanswered on the connection or
        waiting to be sent: the server may set that watch after the removal, and this
        client would arm it on the reply, so the two agree without a removal."""
        found = False
        for watches in (self._data_watches, self._exist_watches):
            callbacks = watches.get(path)
            if callbacks is not None and callback in callbacks:
                found = True
                callbacks.discard(callback)
                if not callbacks:
                    del watches[path]
        if not found or path in self._data_watches or path in self._exist_watches:
            return
        connection = self._connection
        if (
            connection is None
            or self.state != KazooState.CONNECTED
            or connection.watching[path]
            or any(p.watch is not None and p.request.path == path for p in self._waiting)
        ):
            return  # another watcher, or a reconnection re-arms only what is left here
        WATCHES_REMOVED.inc()
        self.submit(_RemoveWatches(path)).add_done_callback(_outcome_retrieved)

    @staticmethod
    def _arm(watches: dict[str, set[WatchCallback]], path: str, callback: WatchCallback) -> None:
        watches.setdefault(path, set()).add(callback)

    def _watch_event(self, watch: Watch) -> None:
        event_type = _EVENT_TYPES.get(watch.type)
        if event_type is None:
            return  # a state notification (type NONE): the session handles states itself
        path = watch.path
        callbacks: set[WatchCallback] = set()
        if event_type in (EventType.CREATED, EventType.CHANGED, EventType.DELETED):
            callbacks |= self._data_watches.pop(path, set())
            callbacks |= self._exist_watches.pop(path, set())
        if event_type in (EventType.CHILD, EventType.DELETED):
            callbacks |= self._child_watches.pop(path, set())
        event = WatchedEvent(event_type, KeeperState.CONNECTED, self.unchrooted(path))
        for callback in callbacks:
            self._call_watch(callback, event)

    @staticmethod
    def _call_watch(callback: WatchCallback, event: WatchedEvent) -> None:
        try:
            callback(event)
        except Exception:
            logger.exception("zookeeper watch callback failed path=%s", event.path)

    # ------------------------------------------------------------------ states

    def _set_state(self, state: KazooState) -> None:
        if state == self.state:
            return
        self.state = state
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                logger.exception("zookeeper state listener failed state=%s", state)

    def _fail_all(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, deque()
        for pending in waiting:
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(error)
                pending.future.exception()

    def _expired(self) -> None:
        logger.warning("zookeeper session %#x expired", self.session_id)
        SESSION_EXPIRATIONS.inc()
        self.session_id = 0
        self._password = b"\x00" * 16
        self.last_zxid = 0
        self._fail_all(SessionExpiredError())
        watches = [self._data_watches, self._exist_watches, self._child_watches]
        callbacks = {cb for watch in watches for cbs in watch.values() for cb in cbs}
        for watch in watches:
            watch.clear()
        self._set_state(KazooState.LOST)
        event = WatchedEvent(EventType.NONE, KeeperState.EXPIRED_SESSION, None)
        for callback in callbacks:
            self._call_watch(callback, event)

    # ------------------------------------------------------------------ connection

    def _log_unreachable(self, host: str, port: int, error: BaseException) -> None:
        now = time.monotonic()
        tally = self._unreachable.setdefault((host, port), [0, float("-inf")])
        tally[0] += 1
        if now - tally[1] < UNREACHABLE_LOG_INTERVAL_S:
            return
        tally[1] = now
        if tally[0] == 1:
            logger.info("zookeeper %s:%s unreachable: %s", host, port, error)
        else:
            logger.warning(
                "zookeeper %s:%s still unreachable after %d attempts: %s",
                host,
                port,
                int(tally[0]),
                error,
            )

    async def _run(self) -> None:
        delay = RECONNECT_DELAY_S
        while not self._closing:
            servers = list(self.servers)
            _RANDOM.shuffle(servers)
            for host, port in servers:
                if self._closing:
                    return
                try:
                    connection = await self._connect(host, port)
                except SessionExpiredError:
                    self._expired()
                    delay = RECONNECT_DELAY_S
                    break  # a new session, at once
                except (OSError, TimeoutError, ConnectionLoss, AuthFailedError) as e:
                    self._log_unreachable(host, port, e)
                    continue
                except Exception:  # a bug must not end the session's reconnecting
                    logger.exception("zookeeper connection to %s:%s failed", host, port)
                    continue
                failed = self._unreachable.pop((host, port), None)
                if failed is not None and failed[0] > 1:
                    logger.info(
                        "zookeeper %s:%s reachable again after %d failed attempts",
                        host,
                        port,
                        failed[0],
                    )
                served_from = asyncio.get_running_loop().time()
                try:
                    await self._serve(connection)
                except Exception:  # a bug must not end the session's reconnecting
                    logger.exception("zookeeper connection to %s:%s failed", host, port)
                if self._closing:
                    return
                logger.warning("zookeeper connection to %s:%s lost", host, port)
                # A server that accepts and then drops at once is retried with backoff.
                if asyncio.get_running_loop().time() - served_from >= 1.0:
                    delay = RECONNECT_DELAY_S
                    continue
                await asyncio.sleep(delay * (0.5 + _RANDOM.random()))
                delay = min(delay * 2, RECONNECT_DELAY_S_MAX)
            else:
                await asyncio.sleep(delay * (0.5 + _RANDOM.random()))
                delay = min(delay * 2, RECONNECT_DELAY_S_MAX)

    async def _connect(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        timeout_s = min(self.session_timeout_s, CONNECT_ATTEMPT_TIMEOUT_S_MAX)
        async with asyncio.timeout(timeout_s):
            _, connection = await loop.create_connection(
                lambda: _Connection(self), host, port, ssl=self.tls
            )
            try:
                request = Connect(
                    0,
                    self.last_zxid,
                    int(self.session_timeout_s * 1000),
                    self.session_id,
                    self._password,
                    False,
                )
                body = request.serialize()
                assert connection.transport is not None
                connection.transport.write(int_struct.pack(len(body)) + body)
                reply = await connection.handshake
            except BaseException:
                connection.abort()
                raise
        if reply.time_out <= 0 or (self.session_id and reply.session_id != self.session_id):
            connection.abort()  # expired (or, against the protocol, another session)
            raise SessionExpiredError()
        connection.established = True
        if self.digest is not None:
            await self._authenticate(connection, timeout_s)
        self.session_id = reply.session_id
        self._password = reply.passwd
        self.negotiated_timeout_s = reply.time_out / 1000.0
        return connection

    async def _authenticate(self, connection: _Connection, timeout_s: float) -> None:
        """Send the digest credential and wait for its answer, before any request: a
        refusal is AuthFailedError (the server closes the connection after it)."""
        assert self.digest is not None and connection.transport is not None
        body = Auth(0, "digest", self.digest.credential.decode()).serialize()
        connection.transport.write(_REQUEST_HEADER.pack(len(body) + 8, AUTH_XID, Auth.type) + body)
        try:
            async with asyncio.timeout(timeout_s):
                err = await connection.authenticated
        except BaseException:
            connection.abort()
            raise
        if err:
            connection.abort()
            raise AuthFailedError(
                f"ZooKeeper refused the digest credential of user {self.digest.user!r} (error {err})"
            )

    async def _serve(self, connection: _Connection) -> None:
        """Run one established connection until it closes."""
        self._connection = connection
        watches = (self._data_watches, self._exist_watches, self._child_watches)
        if any(watches):
            for batch in set_watches_batches(self.last_zxid, *[sorted(w) for w in watches]):
                connection.send(_Pending(batch, None, None))
        CONNECTIONS.inc()
        self._set_state(KazooState.CONNECTED)
        self._resume(connection)  # what waited for a connection, in order, before anything new
        loop = asyncio.get_running_loop()
        read_timeout_s = self.negotiated_timeout_s * 2 / 3
        ping_every_s = self.negotiated_timeout_s / 3
        silent_from = loop.time()  # silence counts from here at the earliest
        try:
            while connection.usable():
                now = loop.time()
                silent_s = now - max(connection.last_received, silent_from)
                if silent_s > read_timeout_s:
                    logger.warning("zookeeper silent for %.1f s: reconnecting", silent_s)
                    connection.abort()
                    break
                if now - connection.last_sent >= ping_every_s:
                    connection.send(_Pending(Ping(), None, None))
                wake_at = min(
                    connection.last_sent + ping_every_s,
                    max(connection.last_received, silent_from) + read_timeout_s,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        asyncio.shield(connection.closed), max(wake_at - loop.time(), 0.01)
                    )
                late_s = loop.time() - wake_at
                if late_s > ping_every_s / 2 and connection.usable():
                    # The loop itself was stalled (a long callback, a frozen process):
                    # the server's silence is not measured over that; ask it again.
                    logger.warning("event loop stalled %.1f s: pinging zookeeper", late_s)
                    silent_from = loop.time()
                    connection.send(_Pending(Ping(), None, None))
        finally:
            connection.abort()
            self._connection = None
            lost = ConnectionLoss()
            for pending in connection.pending:
                if pending.future is not None and not pending.future.done():
                    pending.future.set_exception(lost)
                    pending.future.exception()
            connection.pending.clear()
            if not self._closing:
                CONNECTION_LOSSES.inc()
                self._set_state(KazooState.SUSPENDED)


__all__ = ["MAX_FRAME_BYTES", "ZooKeeperSession", "parse_hosts"]
