"""The asyncio face of ZooKeeper for everything in this project.

`ZooKeeperClient` runs one session (`zk_session.ZooKeeperSession`) on the event loop
itself: requests are written and replies decoded on the loop, and watch events reach
their callbacks as they come off the socket, before any later reply is handled. That
keeps ZooKeeper's ordering guarantee intact on the loop: a watch event is processed
before the reply to any request sent after the change it reports. `WatchedCache` and
`fresh_view()` build on that.

Every coroutine here is bounded by a timeout: nothing blocks the event loop, and no wait
is unbounded. kazoo's exceptions (`NoNodeError`, `NodeExistsError`, `BadVersionError`,
`NotEmptyError`, `ConnectionLoss`, `SessionExpiredError`) are raised, so callers
can implement compare-and-set loops on znode versions.

Session state changes are handed to listeners on the loop (`add_state_listener`): on
SUSPENDED, callers pause anything that relies on an ephemeral node or a lease; on LOST,
they treat them as gone and re-register.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Delete,
    Exists,
    GetChildren,
    GetData,
    SetData,
    Sync,
    Transaction,
)
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from prometheus_client import Counter, Histogram

from blobstore.runtime.aio import wait_shielded
from blobstore.runtime.batched_metrics import batched_counter, batched_histogram
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk_auth import ZooKeeperDigest, digest_from_env, znode_acl
from blobstore.runtime.zk_session import ZooKeeperSession

logger = logging.getLogger(__name__)

FRESH_VIEWS = Counter(
    "blobstore_zk_fresh_views_total", "Reads that waited for a fresh view (a shared sync)"
)
SYNCS = Counter("blobstore_zk_syncs_total", "ZooKeeper syncs sent for fresh views")
CACHE_LOOKUPS = Counter(
    "blobstore_zk_cache_lookups_total",
    "Lookups in caches of znodes kept under data watches",
    ["cache", "result"],
)
CACHE_INVALIDATIONS = Counter(
    "blobstore_zk_cache_invalidations_total",
    "Cached znodes dropped because their data watch fired",
    ["cache"],
)

REQUEST_SECONDS = Histogram(
    "blobstore_zk_request_seconds",
    "ZooKeeper requests, sent to answered (or failed), by request type: the server's own "
    "latency plus the connection's queue; beside blobstore_catalog_commit_seconds it says "
    "whether a slow commit waited for ZooKeeper or for its page's queue",
    ["op"],
    buckets=(0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0),
)


SESSION_TIMEOUT_S_DEFAULT = 15.0
OPERATION_TIMEOUT_S_DEFAULT = 15.0
CONNECT_TIMEOUT_S_DEFAULT = 30.0


@dataclass(frozen=True, slots=True)
class Versioned:
    """A znode's value with the version a compare-and-set must name."""

    value: bytes
    version: int


V = TypeVar("V")


class ZooKeeperClient:
    """An asyncio face on one ZooKeeper session. Create it inside the running loop."""

    def __init__(
        self,
        hosts: str,
        session_timeout_s: float = SESSION_TIMEOUT_S_DEFAULT,
        operation_timeout_s: float = OPERATION_TIMEOUT_S_DEFAULT,
        request_bytes_max: int | None = None,
        digest: ZooKeeperDigest | None | Literal["env"] = "env",
    ) -> None:
        """`request_bytes_max`: longest request sent (None: BLOBSTORE_ZK_REQUEST_BYTES_MAX
        or 4 MiB); a longer one fails alone with ZooKeeperRequestTooLargeError.
        `digest`: the credential to authenticate with and ACL new znodes to ("env":
        BLOBSTORE_ZK_DIGEST_FILE's, if set; blobstore.runtime.zk_auth)."""
        self.hosts = hosts
        self.operation_timeout_s = operation_timeout_s
        if digest == "env":
            digest = digest_from_env()
        self._acl = znode_acl(digest)
        self._session = ZooKeeperSession(hosts, session_timeout_s, request_bytes_max, digest=digest)
        self._state_listeners: list[Callable[[KazooState], None]] = []
        self._session.add_listener(self._state_changed)
        # fresh_view(): the sync sent in this turn of the loop (shared by its callers),
        # the one in flight, and the next one (waiting for the one in flight).
        self._sync_this_turn: asyncio.Future[None] | None = None
        self._sync_in_flight: asyncio.Future[None] | None = None
        self._sync_sent_at = 0.0
        self._sync_next: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT) -> None:
        """Open the session; raises kazoo's KazooTimeoutError if no server answers."""
        await self._session.start(timeout_s)

    async def stop(self) -> None:
        await self._session.close()

    @property
    def connected(self) -> bool:
        return self._session.connected

    @property
    def request_bytes_max(self) -> int:
        """The longest request this client sends (the servers' jute.maxbuffer)."""
        return self._session.request_bytes_max

    @property
    def session_id(self) -> int | None:
        """The current session's id (the ephemeralOwner of its ephemeral znodes)."""
        return self._session.session_id or None

    def add_state_listener(self, listener: Callable[[KazooState], None]) -> None:
        """`listener(state)` runs on the event loop for every session state change."""
        self._state_listeners.append(listener)

    def remove_state_listener(self, listener: Callable[[KazooState], None]) -> None:
        if listener in self._state_listeners:
            self._state_listeners.remove(listener)

    def _state_changed(self, state: KazooState) -> None:  # on the loop
        logger.info("zookeeper session state=%s hosts=%s", state, self.hosts)
        loop = asyncio.get_running_loop()
        for listener in self._state_listeners:
            loop.call_soon(listener, state)

    # ------------------------------------------------------------------ plumbing

    async def _call(
        self,
        request: Any,
        watch: Callable[[Any], None] | None = None,
        timeout_s: float = 0.0,
        on_result: Callable[[Any], None] | None = None,
    ) -> Any:
        started = time.monotonic()
        future = self._session.submit(request, watch, on_result)
        try:
            # The reply's future is awaited itself (no shield: a caller that gives up
            # cancels it below anyway), so the reply wakes the caller in the next loop
            # iteration, not one later through a chained callback.
            async with asyncio.timeout(timeout_s or self.operation_timeout_s):
                return await future
        finally:
            elapsed = time.monotonic() - started
            batched_histogram(REQUEST_SECONDS, type(request).__name__).observe(elapsed)
            if not future.done():
                future.cancel()  # a late reply then finds it done
            elif not future.cancelled():
                future.exception()  # retrieved, whoever gave up on it

    def _path(self, path: str) -> str:
        return self._session.chrooted(path)

    # ------------------------------------------------------------------ operations

    async def get(self, path: str, watch: Callable[[Any], None] | None = None) -> Versioned:
        """The value and version; raises NoNodeError. `watch` runs on the loop."""
        value, stat = await self._call(GetData(self._path(path), watch is not None), watch)
        return Versioned(value, stat.version)

    def forget_data_watch(self, path: str, callback: Callable[[Any], None]) -> None:
        """Stop calling `callback` (given to `get`, `exists` or `watch_started`) on changes of `path`; the server's
        watch is removed once nothing of this session watches the path."""
        self._session.forget_data_watch(self._path(path), callback)

    async def get_with_stat(self, path: str) -> tuple[bytes, ZnodeStat]:
        value, stat = await self._call(GetData(self._path(path), False))
        return value, stat

    async def exists(
        self, path: str, watch: Callable[[Any], None] | None = None
    ) -> ZnodeStat | None:
        stat: ZnodeStat | None = await self._call(
            Exists(self._path(path), watch is not None), watch
        )
        return stat

    def watch_started(
        self, path: str, watch: Callable[[Any], None]
    ) -> asyncio.Future[ZnodeStat | None]:
        """Arm a data watch on `path` without waiting: an `exists` request whose reply
        (the znode's stat, or None when it is gone) comes in the future returned. The
        watch reports the first change the server applies after this request."""
        future: asyncio.Future[ZnodeStat | None] = self._session.submit(
            Exists(self._path(path), True), watch
        )
        return future

    async def get_children(
        self, path: str, watch: Callable[[Any], None] | None = None
    ) -> list[str]:
        return list(await self._call(GetChildren(self._path(path), watch is not None), watch))

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a znode and return its path (with the sequence suffix, if any)."""
        flags = (1 if ephemeral else 0) | (2 if sequence else 0)
        request = Create(self._path(path), value, self._acl, flags)
        try:
            return await self._call(request)  # type: ignore[no-any-return]
        except NoNodeError:
            parent = path.rsplit("/", 1)[0]
            if not makepath or not parent:
                raise
        await self.ensure_path(parent)
        return await self._call(request)  # type: ignore[no-any-return]

    async def set(self, path: str, value: bytes, version: int = -1) -> int:
        """Compare-and-set (version -1: unconditional); returns the new version."""
        stat = await self._call(SetData(self._path(path), value, version))
        return int(stat.version)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(Delete(self._path(path), version))

    async def ensure_path(self, path: str) -> None:
        """Create `path` and its parents when missing (idempotent, race-safe)."""
        if await self.exists(path) is not None:
            return
        parts = [p for p in path.split("/") if p]
        current = ""
        for part in parts:
            current = f"{current}/{part}"
            try:
                await self.create(current)
            except NodeExistsError:
                pass

    async def delete_recursive(self, path: str) -> None:
        """Delete a subtree (children first). Missing nodes are fine."""
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return
        for child in children:
            await self.delete_recursive(f"{path}/{child}")
        try:
            await self.delete(path)
        except NoNodeError:
            pass

    def fresh_view_started(self) -> asyncio.Future[None]:
        """Start a fresh view and return its completion, without waiting.

        A view is a `sync` sent on this session after the call. At most one sync is in
        flight: while one is, callers share the next, sent as soon as the one in flight
        is answered (under load one sync then serves every request that arrived during
        a round trip, instead of one sync per request). With none in flight the sync is
        sent at once, and callers later in the same turn of the event loop share it
        (whatever caused their call happened before that turn began, hence before the
        sync was sent).

        ZooKeeper serves a session's requests in order, so reads sent after the sync
        see every write acknowledged before the call: a reader that misses its caches
        sends its read right behind a sent sync (`view_sent`) and waits one round trip,
        not two. Once the returned future is done, every watch event of such a write
        has been handled (see `WatchedCache`)."""
        FRESH_VIEWS.inc()
        if self._sync_this_turn is not None:
            return self._sync_this_turn
        loop = asyncio.get_running_loop()
        # A sync unanswered past the operation timeout no longer holds the next back.
        held = (
            self._sync_in_flight is not None
            and loop.time() - self._sync_sent_at < self.operation_timeout_s
        )
        view = self._sync_next
        if held:
            if view is None:
                view = self._sync_next = loop.create_future()
            return view
        if view is None:
            view = loop.create_future()
        self._sync_next = None
        self._send_sync(view)
        self._sync_this_turn = view
        loop.call_soon(self._end_sync_turn, view)
        return view

    def view_sent(self, view: asyncio.Future[None]) -> bool:
        """Whether the sync of `view` is on the session (reads sent now follow it)."""
        return view is not self._sync_next

    def _send_sync(self, view: asyncio.Future[None]) -> None:
        loop = asyncio.get_running_loop()
        self._sync_in_flight = view
        self._sync_sent_at = loop.time()
        SYNCS.inc()

        def done(reply: asyncio.Future[Any]) -> None:
            if not view.done():
                if reply.cancelled():
                    view.cancel()
                elif (error := reply.exception()) is not None:
                    view.set_exception(error)
                    view.exception()  # retrieved: waiters that timed out are gone
                else:
                    view.set_result(None)
            if self._sync_in_flight is view:
                self._sync_in_flight = None
                following, self._sync_next = self._sync_next, None
                if following is not None:
                    self._send_sync(following)

        self._session.submit(Sync(self._path("/"))).add_done_callback(done)

    def _end_sync_turn(self, view: asyncio.Future[None]) -> None:
        if self._sync_this_turn is view:
            self._sync_this_turn = None

    async def fresh_view(self, timeout_s: float | None = None) -> None:
        """Return once a `sync` sent after this call began has completed: from then on
        this session reads every write acknowledged before the call, and every watch
        event such a write caused has been handled (so a `WatchedCache` entry still
        present is current). Callers in one turn of the event loop share one sync."""
        await self.wait_view(self.fresh_view_started(), timeout_s)

    async def wait_view(self, view: asyncio.Future[None], timeout_s: float | None = None) -> None:
        """Wait for a view from `fresh_view_started()` (bounded by the operation timeout)."""
        await wait_shielded(view, timeout_s or self.operation_timeout_s)

    async def multi(
        self,
        operations: Sequence[tuple[str, tuple[Any, ...]]],
        on_success: Callable[[], None] | None = None,
    ) -> list[Any]:
        """Run a ZooKeeper `multi`: all operations or none.

        `operations` is a list of (kind, args) with kind one of "create" (path, value),
        "create_ephemeral" (path, value), "set" (path, value, version), "delete" (path,
        version), "check" (path, version).
        Returns kazoo's per-operation results; raises the first failure's exception
        (e.g. BadVersionError) when the transaction was rolled back, with the index of
        the operation that failed as its `operation_index` attribute.

        `on_success` runs in the step that reads a successful reply, one loop iteration
        before this coroutine resumes (what it resolves wakes its waiters that much
        sooner); it must not raise.
        """
        requests: list[Any] = []
        for kind, args in operations:
            path, rest = self._path(args[0]), args[1:]
            if kind == "create":
                value = rest[0] if rest else b""
                requests.append(Create(path, value, self._acl, 0))
            elif kind == "create_ephemeral":
                requests.append(Create(path, rest[0] if rest else b"", self._acl, 1))
            elif kind == "set":
                requests.append(SetData(path, rest[0], rest[1] if len(rest) > 1 else -1))
            elif kind == "delete":
                requests.append(Delete(path, rest[0] if rest else -1))
            elif kind == "check":
                requests.append(CheckVersion(path, rest[0]))
            else:
                raise ValueError(f"unknown multi operation {kind!r}")
        on_result = None
        if on_success is not None:

            def on_result(results: Any) -> None:
                if not any(isinstance(r, Exception) for r in results):
                    on_success()

        results = await self._call(Transaction(requests), on_result=on_result)
        for index, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                result.operation_index = index  # type: ignore[attr-defined]
                raise result
        return list(results)


async def started_client(hosts: str, timeout_s: float, **settings: Any) -> ZooKeeperClient:
    """A started session for a command: an ensemble that does not answer within
    `timeout_s` (or refuses the session) is a UsageError, one line naming it."""
    zk = ZooKeeperClient(hosts, **settings)
    try:
        await zk.start(timeout_s=timeout_s)
    except Exception as e:  # noqa: BLE001 - a timeout, or the server refusing us
        with contextlib.suppress(Exception):
            await zk.stop()
        raise UsageError(
            f"cannot reach ZooKeeper at {hosts} within {timeout_s:.0f}s ({e!r})"
        ) from None
    return zk


_READ_CANCELLED = object()  # a shared read's result when its reader was cancelled


class WatchedCache(Generic[V]):
    """Values decoded from znodes, each kept while its ZooKeeper data watch says the znode
    is unchanged (at most `capacity`, least recently used out first).

    After `ZooKeeperClient.fresh_view()`, an entry still present is the znode's newest
    state: ZooKeeper delivers the watch event of a change before the reply to any later
    request, and the session handles both on the loop in that order. Without a fresh view
    an entry is as current as this session's server, like any read. Everything is
    dropped when the session is interrupted (events may have been missed); a read that
    was in flight then is not kept either.
    """

    def __init__(
        self,
        zk: ZooKeeperClient,
        decode: Callable[[str, bytes, int], V],
        capacity: int,
        name: str = "znodes",
    ) -> None:
        assert capacity > 0
        self.zk = zk
        # Batched (a lookup per catalog read), one per label set however many caches
        # share the name.
        self._hits = batched_counter(CACHE_LOOKUPS, name, "hit")
        self._misses = batched_counter(CACHE_LOOKUPS, name, "miss")
        self._invalidations = CACHE_INVALIDATIONS.labels(name)
        self.decode = decode
        self.capacity = capacity
        self._entries: OrderedDict[str, V] = OrderedDict()
        self._epoch = 0  # bumped by clear(): reads begun before it are not kept
        # Paths with reads in flight: [reads, changes seen]. A reply is handled on the
        # loop before the reading task resumes, so a watch event that arrives between
        # the two finds nothing to drop; the change count tells the read not to keep
        # what it got.
        self._reading: dict[str, list[int]] = {}
        # Plain reads (no view, not fresh) in flight, shared by concurrent misses.
        self._unviewed: dict[str, asyncio.Future[object]] = {}
        self._shared = batched_counter(CACHE_LOOKUPS, name, "shared")
        zk.add_state_listener(self._state_changed)

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, path: str) -> V | None:
        return self._entries.get(path)

    async def get(
        self, path: str, view: asyncio.Future[None] | None = None, *, fresh: bool = False
    ) -> V:
        """The decoded value; raises NoNodeError (absence is not cached).

        With `view` (from `ZooKeeperClient.fresh_view_started()`) the value is the
        newest: a cached entry is trusted only once the view is complete and the entry
        still there; a missing one is read behind the view's sync, at once if that is
        sent (`view_sent`), else once the view is complete. `fresh`:
        read it from the server whatever is cached, and keep what was read; the cached
        entry serves other readers meanwhile (dropping it would send every concurrent
        reader to the server)."""
        value = None if fresh else self._entries.get(path)
        if value is not None and view is not None and not view.done():
            await self.zk.wait_view(view)
            value = self._entries.get(path)
        if value is not None:
            self._hits.inc()
            self._entries.move_to_end(path)
            return value
        if view is None and not fresh:
            # Any read of the path already in flight is as current as this session's
            # server: share it rather than send one more (after a change, every
            # concurrent router of a bucket misses the same page map at once).
            while (shared := self._unviewed.get(path)) is not None:
                self._shared.inc()
                outcome = await asyncio.shield(shared)
                if outcome is not _READ_CANCELLED:
                    return cast(V, outcome)
                # Its reader was cancelled: join the next one, or read.
            self._misses.inc()
            shared = asyncio.get_running_loop().create_future()
            self._unviewed[path] = shared
            try:
                value = await self._read(path, None)
            except asyncio.CancelledError:
                shared.set_result(_READ_CANCELLED)  # the others read for themselves
                raise
            except BaseException as e:
                shared.set_exception(e)
                shared.exception()  # marked retrieved: there may be no other reader
                raise
            else:
                shared.set_result(value)
            finally:
                if self._unviewed.get(path) is shared:
                    del self._unviewed[path]
            return value
        self._misses.inc()
        if view is not None and not self.zk.view_sent(view):
            await self.zk.wait_view(view)
        return await self._read(path, view)

    async def _read(self, path: str, view: asyncio.Future[None] | None) -> V:
        epoch = self._epoch
        reading = self._reading.setdefault(path, [0, 0])
        reading[0] += 1
        changes = reading[1]
        try:
            versioned = await self.zk.get(path, watch=self._changed)
        finally:
            reading[0] -= 1
            if reading[0] == 0:
                del self._reading[path]
        if view is not None:
            await self.zk.wait_view(view)  # answered before the read: done by now
        value = self.decode(path, versioned.value, versioned.version)
        if epoch == self._epoch and reading[1] == changes:
            self._entries[path] = value
            self._entries.move_to_end(path)
            while len(self._entries) > self.capacity:
                evicted, _ = self._entries.popitem(last=False)
                # Nothing here needs its changes any more: nor does the server need to
                # keep the watch (one per znode ever read, otherwise). A read of it in
                # flight arms the watch again with its reply (the session sees to it).
                self.zk.forget_data_watch(evicted, self._changed)
        return value

    def invalidate(self, path: str) -> None:
        self._entries.pop(path, None)

    def clear(self) -> None:
        self._epoch += 1
        self._entries.clear()
        self._unviewed.clear()

    def _changed(self, event: WatchedEvent) -> None:  # on the loop, in arrival order
        if self._entries.pop(event.path, None) is not None:
            self._invalidations.inc()
        reading = self._reading.get(event.path)
        if reading is not None:
            reading[1] += 1
        # A read sent before this change may return the old value: later callers must
        # not join it, or they would see older state than this session has seen.
        self._unviewed.pop(event.path, None)

    def _state_changed(self, state: KazooState) -> None:
        if state != KazooState.CONNECTED:
            self.clear()
