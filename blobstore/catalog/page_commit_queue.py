"""Group commit of object mutations that land on the same index page.

One queue per (bucket, page) with mutations waiting (bounded: a full queue refuses work
with CatalogBusyError, the gateway's SlowDown). One writer task drains it: it takes every
waiting mutation (up to commit_batch_max), applies them in arrival order to a copy of the
page, and writes the page with one compare-and-set (a `multi` that also checks the bucket
record's version, so a versioning change or a bucket deletion is never missed). Arrivals
during that write form the next batch: a ZooKeeper write costs ~3 ms, so under load each
write carries many mutations. A batch that follows another write (the page is busy)
waits commit_gather_ms first and takes what arrived meanwhile too: at 1,000 sequential
4 KiB PUTs/s through one worker, 3.3 mutations a write instead of 2.6 (ZooKeeper writes
are a request through four server threads and a log fsync each). A page's first write
after it went idle is not delayed.

Within an attempt, a mutation whose precondition fails (If-Match, If-None-Match) fails
alone; one whose key left this page (split or merge by another process) is routed again.
On a version conflict the page is read again and the batch re-applied, with jittered
backoff, an attempt cap and a deadline; mutations that arrived meanwhile join the retry
(two processes writing one page then write fewer, larger batches). A page grown past
page_split_bytes is split in the same write: one multi sets this page, creates the new
pages and sets the page map, with version checks on the page and the map.

A busy page's writes are pipelined (commit_pipeline_depth, default 2 in flight): the
next batch is applied to the page as the write ahead of it will leave it and sent
before that write is answered, expecting the version it makes. Waiting for the answer
first was most of a commit's latency under load (a batch waited for the write ahead,
then its own), and all of it in ZooKeeper's slow moments. A version check alone could
let such a write succeed where the one ahead failed: another writer's single write
makes the very version it expects, and it would then overwrite that writer's change.
So every write of a busy page also sets the queue's fence, an ephemeral znode of its
own (catalog `fences/`), expecting the fence version the write ahead makes: when that
write failed, the fence never moved and the follower fails too. ZooKeeper applies one
session's requests in order. Any failure ends the pipeline: the fence is dropped (a
new one is made by the next busy write), later batches fail and retry in order, each
after the ones ahead of it have finished, and no new batch follows until they have.
Splits, merges, a contended page (under a watch) and batches with extra operations are
never pipelined.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from blobstore.catalog import metrics
from blobstore.catalog._private import UNKNOWN_OUTCOME_ERRORS
from blobstore.catalog.config import PAGE_BYTES_HARD_MAX, PAGE_MAP_BYTES_MAX
from blobstore.catalog.errors import (
    CatalogBusyError,
    CatalogError,
    CatalogUnavailableError,
    NoSuchBucketError,
    RecordTooLargeError,
)
from blobstore.catalog.page import IndexPage, PageMap, encode_versions, pack_page
from blobstore.catalog.records import BucketRecord
from blobstore.catalog.retry import CasRetry

if TYPE_CHECKING:
    from blobstore.catalog.object_index import ObjectIndex

logger = logging.getLogger(__name__)

# apply(versions, bucket) -> (new versions, or None when nothing changes; result)
ApplyFunction = Callable[
    [list[dict[str, Any]], BucketRecord], tuple[list[dict[str, Any]] | None, Any]
]


class ExtraOperationsFailedError(CatalogError):
    """The extra operations of a mutation (e.g. deleting an upload's parts) failed their
    version checks while the page itself was unchanged."""


@dataclass(eq=False, slots=True)
class Mutation:
    bucket: str
    key: str
    apply: ApplyFunction
    extra_operations: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    future: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    submitted: float = field(default_factory=time.monotonic)
    reroutes: int = 0
    # An attempt's write failed with an unknown outcome: it may have been applied, and
    # `apply` runs again on a state that may hold its own effect.
    outcome_unknown: bool = False

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def succeed(self, result: Any) -> None:
        if not self.future.done():
            self.future.set_result(result)


class PageCommitQueue:
    def __init__(self, index: ObjectIndex, bucket: str, page_id: str) -> None:
        self.index = index
        self.bucket = bucket
        self.page_id = page_id
        self.page: IndexPage | None = None  # as last written by this queue
        self._page_written_at = 0.0
        self._waiting: deque[Mutation] = deque()
        self._task: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._forgotten = 0  # forget() calls: an exists answered after one is undone
        self._watched = False  # a watch of this queue's may be armed on the page
        self._contended_until = 0.0  # lost a compare-and-set recently: watch the page
        # Batches whose commit runs (a task each), in the order their writes are sent.
        self._inflight: deque[asyncio.Task[None]] = deque()
        self._sent: asyncio.Future[None] | None = None  # the newest batch's write left
        self._arrival: asyncio.Future[None] | None = None  # a mutation was submitted
        self._retrying = 0  # batches between a failed attempt and their end
        self._busy_at_end = False  # mutations were waiting when the last batch ended
        self._chain = False  # the newest write sent carries the fence: one may follow it
        self._fence: str | None = None  # this queue's fence znode, once a write made it
        self._fence_version = 0  # the version the next fenced write expects

    @property
    def idle(self) -> bool:
        return self._task is None and not self._waiting

    def _cached_page(self) -> IndexPage | None:
        if (
            self.page is not None
            and time.monotonic() - self._page_written_at > self.index.config.page_cache_s
        ):
            self.page = None
        return self.page

    def _remember(self, page: IndexPage) -> None:
        """Keep the page this queue just wrote for its next batch. The copy is never
        shown to readers (it may be behind the server): a stale one costs one failed
        compare-and-set, after which the page is read again.

        A page this queue writes again and again (its previous write was within
        page_cache_s) while another writer also writes it (this queue lost a
        compare-and-set on it within commit_watch_s) is kept under a data watch: the
        other's write drops the copy as soon as its event arrives, so the next batch
        reads the page instead of failing its compare-and-set, backing off and reading
        it then. The watch is armed by an `exists` sent without waiting; its reply drops
        the copy when the page moved on in between. Every write fires the watch, so it
        is armed again after each: one more ZooKeeper request per write, which only a
        page with two writers pays back. A page with one writer (one gateway worker on a
        bucket's last page) or written once in a while gets no watch."""
        if self.page is not None and self.page.version > page.version:
            return  # a write sent behind this one already left a newer copy
        now = time.monotonic()
        recent = now - self._page_written_at <= self.index.config.page_cache_s
        self.page = page
        self._page_written_at = now
        if not recent or now >= self._contended_until:
            return
        self._watched = True
        reply = self.index.zk.watch_started(self._path(), self._page_changed)
        reply.add_done_callback(functools.partial(self._watch_armed, page.version, self._forgotten))

    def _path(self) -> str:
        return self.index.paths.page(self.bucket, self.page_id)

    def _page_changed(self, _event: Any) -> None:
        # On the loop, in order with replies: the event of this queue's own next write
        # comes before that write's reply, which remembers the new page.
        self.page = None
        self._watched = False  # fired: a watch reports one change

    def _watch_armed(self, version: int, forgotten: int, reply: asyncio.Future[Any]) -> None:
        if reply.cancelled():
            return
        error = reply.exception()
        if forgotten != self._forgotten:
            # forget() ran while the exists was unanswered, and its reply has armed the
            # watch again: remove it, or a discarded queue would stay watched.
            self.index.zk.forget_data_watch(self._path(), self._page_changed)
            return
        stat = None if error is not None else reply.result()
        if stat is None:  # gone (merged), or the watch's fate unknown: keep no copy
            self.forget()
        elif stat.version != version and self.page is not None and self.page.version == version:
            self.page = None

    def forget(self) -> None:
        """Drop the cached page and its watch (the queue is being discarded, its copy
        expired, or the page was merged away)."""
        self.page = None
        self._watched = False
        self._forgotten += 1
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self.index.zk.forget_data_watch(self._path(), self._page_changed)
        self._drop_fence()

    def _drop_fence(self) -> None:
        """Stop using the fence (a write failed, or the queue is idle): the next busy
        write makes a new one. The old one is deleted in the background (a closing
        index leaves it to the end of its session, which removes it)."""
        fence, self._fence = self._fence, None
        self._chain = False
        if fence is None or self.index.closing:
            return
        self.index.track(asyncio.ensure_future(self._delete_fence(fence)))

    async def _delete_fence(self, fence: str) -> None:
        with contextlib.suppress(Exception):
            await self.index.zk.delete(fence)

    def submit(self, mutation: Mutation) -> None:
        if len(self._waiting) >= self.index.config.commit_queue_max:
            metrics.BUSY.labels("queue").inc()
            mutation.fail(CatalogBusyError(f"commit queue of bucket {self.bucket!r} is full"))
            return
        self._waiting.append(mutation)
        arrival = self._arrival
        if arrival is not None and not arrival.done():
            arrival.set_result(None)
        if self._task is None:
            self._task = asyncio.ensure_future(self._drain())
            self.index.track(self._task)

    async def _drain(self) -> None:
        config = self.index.config
        loop = asyncio.get_running_loop()
        inflight = self._inflight
        self._busy_at_end = False
        try:
            while self._waiting or inflight:
                if self._waiting and (not inflight or self._may_follow()):
                    # A batch that follows a write (one in flight, or one that ended
                    # with work waiting: the page is busy) gathers first; a page's first
                    # write after it went idle is not delayed.
                    following = bool(inflight) or self._busy_at_end
                    wait_ms = config.commit_gather_ms if following else config.commit_group_wait_ms
                    if wait_ms > 0:
                        await asyncio.sleep(wait_ms / 1000.0)
                    if not self._waiting or (inflight and not self._may_follow()):
                        continue  # the write ahead failed meanwhile: wait for it
                    batch = self._take_batch(config.commit_batch_max)
                    sent = loop.create_future()
                    self._sent = sent
                    task = asyncio.ensure_future(self._commit_batch(batch))
                    self.index.track(task)
                    inflight.append(task)
                    # The next batch may be applied once this one's write has left
                    # (the page it leaves is then this queue's copy).
                    await asyncio.wait((task, sent), return_when=asyncio.FIRST_COMPLETED)
                    self._sent = None
                else:
                    waits: set[asyncio.Future[Any]] = set(inflight)
                    if not self._waiting:
                        self._arrival = loop.create_future()
                        waits.add(self._arrival)
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    self._arrival = None
                if any(task.done() for task in inflight):
                    remaining = [task for task in inflight if not task.done()]
                    inflight.clear()
                    inflight.extend(remaining)
        except BaseException:
            for task in inflight:
                task.cancel()
            raise
        finally:
            self._task = None
            if self._waiting:  # cancelled while work was waiting
                for mutation in self._waiting:
                    mutation.fail(CatalogBusyError("catalog is closing"))
                self._waiting.clear()
            if (
                self.page is not None or self._watched or self._fence is not None
            ) and self._expiry is None:
                # An idle queue holds its copy (and the server its watch) for at most
                # page_cache_s: memory and watches follow the recent write rate, not
                # the number of pages ever written.
                self._expiry = asyncio.get_running_loop().call_later(
                    self.index.config.page_cache_s, self._expire
                )
            self.index.queue_idle(self)

    def _expire(self) -> None:
        self._expiry = None
        if (self.page is None and not self._watched and self._fence is None) or (
            self._task is not None
        ):
            return  # gone already, or in use (the drain's end schedules it again)
        left = self._page_written_at + self.index.config.page_cache_s - time.monotonic()
        if left > 0:
            self._expiry = asyncio.get_running_loop().call_later(left, self._expire)
            return
        self.forget()

    def _may_follow(self) -> bool:
        """Whether the next batch may be sent before the writes in flight are answered."""
        return (
            self._chain
            and not self._retrying
            and len(self._inflight) < self.index.config.commit_pipeline_depth
            and not self._waiting[0].extra_operations
            and time.monotonic() >= self._contended_until
        )

    async def _commit_batch(self, batch: list[Mutation]) -> None:
        try:
            await self._commit(batch)
            self._busy_at_end = bool(self._waiting)
        except asyncio.CancelledError:
            for mutation in batch:
                mutation.fail(CatalogBusyError("catalog is closing"))
            raise
        except Exception as e:  # noqa: BLE001 - a bug must not strand the waiters
            logger.exception("catalog commit failed bucket=%s page=%s", self.bucket, self.page_id)
            for mutation in batch:
                mutation.fail(e)

    def _others_in_flight(self) -> bool:
        """Whether another batch of this queue (not the caller's) is still running."""
        me = asyncio.current_task()
        return any(not task.done() for task in self._inflight if task is not me)

    def _attempt_failed(self, retry: CasRetry) -> None:
        """A batch's attempt failed: no batch follows the writes in flight until it ends."""
        if not retry.failures:
            self._retrying += 1
        retry.failures += 1
        self._chain = False

    async def _after_writes_ahead(self) -> None:
        """Before a retry: wait until every batch sent before this one has finished (so
        retries go in order, each on what the ones ahead left)."""
        me = asyncio.current_task()
        for task in list(self._inflight):
            if task is me:
                return
            if not task.done():
                await asyncio.wait((task,))

    def _top_up(self, batch: list[Mutation], pending: list[Mutation]) -> list[Mutation]:
        """Before a retry: mutations that arrived since the batch was taken join it (in
        arrival order, after the batch), so the write that follows the conflict carries
        them too instead of leaving them for one more write. Added to `batch` as well,
        whose mutations `_drain` fails if the commit breaks."""
        if any(m.extra_operations for m in pending):
            return []
        room = self.index.config.commit_batch_max - len(pending)
        taken: list[Mutation] = []
        while self._waiting and len(taken) < room and not self._waiting[0].extra_operations:
            taken.append(self._waiting.popleft())
        batch.extend(taken)
        return taken

    def _take_batch(self, batch_max: int) -> list[Mutation]:
        """Waiting mutations in arrival order; one carrying extra operations goes alone
        (a failed check among them must not fail its neighbours)."""
        batch: list[Mutation] = []
        while self._waiting and len(batch) < batch_max:
            solo = bool(self._waiting[0].extra_operations)
            if solo and batch:
                break
            batch.append(self._waiting.popleft())
            if solo:
                break
        return batch

    # ------------------------------------------------------------------ one batch

    async def _commit(self, batch: list[Mutation]) -> None:
        retry = self.index.retry_policy.start()
        try:
            await self._attempt(batch, retry)
        finally:
            metrics.COMMIT_ATTEMPTS.observe(retry.attempt)
            if retry.failures:
                self._retrying -= 1

    async def _attempt(self, batch: list[Mutation], retry: CasRetry) -> None:
        index = self.index
        record_bytes_max = index.config.record_bytes_max
        page: IndexPage | None = None
        pending = [m for m in batch if not m.future.done()]
        unknown_outcome = False
        validate = False  # read only after a sync
        fresh_bucket = False  # the bucket record's check failed: read it again
        while pending:
            try:
                if retry.attempt > 1:
                    await self._after_writes_ahead()
                    pending += self._top_up(batch, pending)
                bucket, bucket_version = await index.bucket_state(self.bucket, fresh=fresh_bucket)
                page = self._cached_page()
                if page is not None and not all(page.contains(m.key) for m in pending):
                    # Another process split or merged this page after we cached it: only
                    # a fresh read may send a mutation elsewhere.
                    self.page = page = None
                from_cache = page is not None
                if page is None:
                    if validate:
                        # Decide without a write only on the newest state: after a sync,
                        # this session's server has every write acknowledged anywhere.
                        await index.zk.fresh_view()
                    page = await index.read_page_for_commit(self.bucket, self.page_id)
                if page is None:  # merged away
                    for mutation in pending:
                        index.reroute(mutation)
                    return
                work = page.copy()
                applied: list[tuple[Mutation, Any]] = []
                refused: list[tuple[Mutation, CatalogError]] = []
                changed = False
                for mutation in pending:
                    if not work.contains(mutation.key):
                        index.reroute(mutation)
                        continue
                    try:
                        versions, result = mutation.apply(work.versions(mutation.key), bucket)
                    except CatalogError as e:
                        refused.append((mutation, e))
                        continue
                    if versions is not None:
                        line = encode_versions(versions) if versions else b""
                        try:
                            _check_line_size(mutation.key, line, versions, record_bytes_max)
                        except RecordTooLargeError as e:
                            refused.append((mutation, e))
                            continue
                        work.set_line(mutation.key, line)
                        changed = True
                    applied.append((mutation, result))
                if validate and not from_cache:
                    # Read after a sync: this is the newest state, refusals stand.
                    self._refuse(refused)
                    refused = []
                elif not changed:
                    # Nothing to write, so no compare-and-set proves the page current:
                    # a page this queue wrote earlier, or one read from a server that
                    # lags the ensemble, may miss another gateway's acknowledged write
                    # (the key a delete finds absent, the object an If-Match names).
                    # Decide again on a read after a sync.
                    self.page = None
                    validate = True
                    continue
                pending = [m for m, _ in applied] + [m for m, _ in refused]
                if not changed:
                    for mutation, result in applied:
                        mutation.succeed(result)
                    return
                # The waiters are answered in the step that reads the write's success,
                # one loop iteration before this task resumes to finish up.
                answered = functools.partial(_succeed_all, list(applied))
                written = await self._write(
                    page, work, bucket_version, [m for m, _ in applied], answered
                )
            except BadVersionError as e:
                self._attempt_failed(retry)
                metrics.CAS_CONFLICTS.inc()
                if await self._extra_operations_failed(pending, page):
                    return
                self.page = None
                # The multi's first operation checks the bucket record's version; when
                # another operation failed, the cached record is still good, and another
                # writer moved the page (or its map): watch it for a while.
                fresh_bucket = getattr(e, "operation_index", 0) == 0
                if not fresh_bucket:
                    self._contended_until = time.monotonic() + index.config.commit_watch_s
                if not await retry.backoff("conflict"):
                    self._fail_all(
                        pending,
                        CatalogBusyError(f"bucket {self.bucket!r}: too many write conflicts"),
                    )
                    return
                continue
            except NoNodeError:
                self._attempt_failed(retry)
                self.page = None
                if not await self._bucket_exists():
                    self._fail_all(pending, NoSuchBucketError(self.bucket))
                    return
                if await self._extra_operations_failed(pending, page):
                    return
                if not await retry.backoff("moved"):
                    self._fail_all(
                        pending, CatalogBusyError(f"bucket {self.bucket!r}: index kept moving")
                    )
                    return
                continue
            except NoSuchBucketError as e:
                self._fail_all(pending, e)
                return
            except RecordTooLargeError as e:
                self._fail_all(pending, e)
                return
            except UNKNOWN_OUTCOME_ERRORS as e:
                # The write may have happened. Every mutation is idempotent, so trying
                # again finds its own result when it did.
                self._attempt_failed(retry)
                unknown_outcome = True
                for mutation in pending:
                    mutation.outcome_unknown = True
                self.page = None
                if not await retry.backoff("unavailable"):
                    self._fail_all(
                        pending, CatalogUnavailableError(f"commit outcome unknown: {e!r}")
                    )
                    return
                continue
            if unknown_outcome:
                logger.info(
                    "catalog commit retried after unknown outcome bucket=%s page=%s",
                    self.bucket,
                    self.page_id,
                )
            self._refuse(refused)
            metrics.MUTATIONS.inc(len(applied))
            metrics.BATCH_SIZE.observe(len(applied))
            for mutation, result in applied:
                mutation.succeed(result)
            if (
                written < index.config.page_merge_bytes
                and page is not None
                and work.encoded_size() < page.encoded_size()
                and not self._others_in_flight()
            ):
                # Only a page that shrank (keys or versions removed) may merge. One small
                # because it is new, the bucket's last page after an append split, has
                # nothing to merge with: trying read two pages per commit under
                # sequential PUTs, and a merge there was split again moments later.
                await index.try_merge(self.bucket, self.page_id, page.lo)
            return

    async def _write(
        self,
        page: IndexPage,
        work: IndexPage,
        bucket_version: int,
        batch: list[Mutation],
        answered: Callable[[], None] | None = None,
    ) -> int:
        """One compare-and-set of the page (split when it grew too large); returns the
        encoded size of this page as written."""
        index = self.index
        paths = index.paths
        config = index.config
        encoded = work.encode()
        operations: list[tuple[str, tuple[Any, ...]]] = [
            ("check", (paths.bucket(self.bucket), bucket_version))
        ]
        for mutation in batch:
            operations.extend(mutation.extra_operations)
        pieces = [work]
        page_map: PageMap | None = None
        map_operations: list[tuple[str, tuple[Any, ...]]] = []
        if len(encoded) > config.page_split_bytes:
            pieces = (
                work.append_split(page, config.page_fill_bytes)
                or work.insertion_split(page, config.page_fill_bytes)
                or work.split(config.page_split_bytes // 2)
            )
        if len(pieces) > 1:
            page_map = await self._map_for_split(work)
            new_map = page_map.replace(page_map.position(work.page_id), pieces)
            map_operations = await self._map_operations(page_map, new_map)
            if not map_operations:
                pieces = [work]
        if len(pieces) == 1:
            if len(encoded) > PAGE_BYTES_HARD_MAX:
                raise RecordTooLargeError(
                    f"index page of bucket {self.bucket!r}", len(encoded), PAGE_BYTES_HARD_MAX
                )
            work.check()
            stored = pack_page(encoded, config.page_compression_level)
            operations.append(
                ("set", (paths.page(self.bucket, work.page_id), stored, page.version))
            )
            followed = self._others_in_flight()  # sent behind an unanswered write?
            fenced = self._fence_operation(operations, batch, followed)
            work.version = page.version + 1
            if fenced:
                # The next batch may apply to what this write leaves, before its answer.
                self.page = work
                self._page_written_at = time.monotonic()
                self._chain = True
            else:
                self._chain = False
            if followed:
                metrics.PIPELINED_WRITES.inc()
            if self._sent is not None and not self._sent.done():
                self._sent.set_result(None)
            try:
                await index.zk.multi(operations, answered)
            except BaseException:
                if self.page is work:
                    self.page = None
                self._drop_fence()
                raise
            metrics.PAGE_COMMITS.inc()
            self._remember(work)
            return len(encoded)
        assert page_map is not None
        self._chain = False  # nothing follows a split before its answer
        for piece in pieces:
            piece.check()
        # One piece keeps this page's id (the first, or the last after an append split)
        # and is written over it with the compare-and-set; the others are created.
        kept = next(piece for piece in pieces if piece.page_id == work.page_id)
        rest = [piece for piece in pieces if piece is not kept]
        kept_encoded = kept.encode()
        level = config.page_compression_level
        operations.append(
            (
                "set",
                (
                    paths.page(self.bucket, kept.page_id),
                    pack_page(kept_encoded, level),
                    page.version,
                ),
            )
        )
        for piece in rest:
            stored = pack_page(piece.encode(), level)
            operations.append(("create", (paths.page(self.bucket, piece.page_id), stored)))
        operations.extend(map_operations)
        try:
            await index.zk.multi(operations, answered)
        except NodeExistsError:  # a new page or shard id collided: retry with fresh ids
            raise BadVersionError() from None
        except BadVersionError:
            self.index.forget_root(self.bucket)  # the page or the maps moved on
            self.index.forget_shard(self.bucket, page_map.shard_id)
            raise
        metrics.COMMITS.labels("split").inc()
        metrics.PAGE_SPLITS.inc(len(rest))
        self.index.forget_shard(self.bucket, page_map.shard_id)
        if len(map_operations) > 1:  # the shard was split too
            metrics.MAP_SHARD_SPLITS.inc()
            logger.info("page map shard split bucket=%s shard=%s", self.bucket, page_map.shard_id)
        kept.version = page.version + 1
        self._remember(kept)
        logger.debug(
            "index page split bucket=%s page=%s pieces=%d", self.bucket, work.page_id, len(pieces)
        )
        return len(kept_encoded)

    def _fence_operation(
        self, operations: list[tuple[str, tuple[Any, ...]]], batch: list[Mutation], followed: bool
    ) -> bool:
        """Add the fence to a write of a busy page (one written within page_cache_s, or
        with a write of this queue unanswered); True when it was added. A write sent
        behind another always carries it (it expects the version the one ahead makes)."""
        config = self.index.config
        if config.commit_pipeline_depth < 2 or any(m.extra_operations for m in batch):
            assert not followed, "only fenced writes are sent behind another"
            return False
        busy = time.monotonic() - self._page_written_at <= config.page_cache_s
        if not (busy or followed):
            return False
        if self._fence is None:
            self._fence = self.index.paths.fence(secrets.token_hex(8))
            self._fence_version = 0
            operations.append(("create_ephemeral", (self._fence, b"")))
        else:
            operations.append(("set", (self._fence, b"", self._fence_version)))
            self._fence_version += 1
        return True

    async def _map_operations(
        self, page_map: PageMap, new_map: PageMap
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """The writes that replace a map shard with `new_map`: a compare-and-set of the
        shard, or, when it grew past map_shard_split_bytes, a split of the shard (set,
        creates, and a compare-and-set of the root map). Empty when the map cannot grow."""
        index = self.index
        paths = index.paths
        encoded = new_map.encode()
        shard_path = paths.map_shard(self.bucket, page_map.shard_id)
        if len(encoded) <= index.config.map_shard_split_bytes:
            return [("set", (shard_path, encoded, page_map.version))]
        root = await index.root_map(self.bucket)
        pos = root.position(page_map.shard_id)
        if pos < 0 or root.bounds[pos] != page_map.lo:
            raise BadVersionError()  # the root moved on: the CAS would fail
        shards = new_map.split(2)
        new_root = root.replace(pos, shards)
        encoded_root = new_root.encode()
        if len(encoded_root) > PAGE_MAP_BYTES_MAX:
            if len(encoded) > PAGE_MAP_BYTES_MAX:
                logger.warning(
                    "page map full bucket=%s shards=%d", self.bucket, len(root.shard_ids)
                )
                return []
            return [("set", (shard_path, encoded, page_map.version))]
        operations: list[tuple[str, tuple[Any, ...]]] = [
            ("set", (shard_path, shards[0].encode(), page_map.version))
        ]
        for shard in shards[1:]:
            operations.append(
                ("create", (paths.map_shard(self.bucket, shard.shard_id), shard.encode()))
            )
        operations.append(("set", (paths.page_map(self.bucket), encoded_root, root.version)))
        return operations

    async def _map_for_split(self, work: IndexPage) -> PageMap:
        """The map shard holding the page, if it agrees with the page's range (read again
        when stale)."""
        for fresh in (False, True):
            page_map = await self.index.page_map(self.bucket, work.lo, fresh=fresh)
            pos = page_map.position(work.page_id)
            if (
                pos >= 0
                and page_map.bounds[pos] == work.lo
                and page_map.upper_bound(pos) == work.hi
            ):
                return page_map
        raise BadVersionError()  # the page changed after it was read: the CAS would fail

    async def _bucket_exists(self) -> bool:
        try:
            await self.index.bucket_state(self.bucket, fresh=True)
        except NoSuchBucketError:
            return False
        return True

    async def _extra_operations_failed(
        self, pending: list[Mutation], page: IndexPage | None
    ) -> bool:
        """For a solo mutation with extra operations: when the page is unchanged, the extra
        operations' checks failed; report that to the caller instead of retrying."""
        if len(pending) != 1 or not pending[0].extra_operations or page is None:
            return False
        current = await self.index.read_page(self.bucket, self.page_id)
        if current is None or current.version != page.version:
            return False
        pending[0].fail(ExtraOperationsFailedError("extra operations failed their checks"))
        return True

    @staticmethod
    def _refuse(refused: list[tuple[Mutation, CatalogError]]) -> None:
        for mutation, error in refused:
            mutation.fail(error)

    def _fail_all(self, pending: list[Mutation], error: CatalogError) -> None:
        for mutation in pending:
            mutation.fail(error)


def _succeed_all(applied: list[tuple[Mutation, Any]]) -> None:
    for mutation, result in applied:
        mutation.succeed(result)


def _check_line_size(
    key: str, line: bytes, versions: list[dict[str, Any]], record_bytes_max: int
) -> None:
    """One record at most record_bytes_max, one key's versions at most twice that, so a
    page can always be split below the hard limit."""
    if len(line) <= record_bytes_max:
        return
    if len(line) > 2 * record_bytes_max:
        raise RecordTooLargeError(f"the versions of {key!r}", len(line), 2 * record_bytes_max)
    newest = len(encode_versions(versions[:1]))
    if newest > record_bytes_max:
        raise RecordTooLargeError(f"record of {key!r}", newest, record_bytes_max)
