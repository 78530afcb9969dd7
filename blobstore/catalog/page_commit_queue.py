"""Group commit of object mutations that land on the same index page.

One queue per (bucket, page) with mutations waiting (bounded: a full queue refuses work
with CatalogBusyError, the gateway's SlowDown). One writer task drains it: it takes every
waiting mutation (up to commit_batch_max), applies them in arrival order to a copy of the
page (`page_batch.apply_batch`), and writes the page with one compare-and-set (a `multi`
that also checks the bucket record's version, so a versioning change or a bucket deletion
is never missed). Arrivals during that write form the next batch: under load each write
carries many mutations. A batch that follows another write (the page is busy) waits
commit_gather_ms first and takes what arrived meanwhile too, because each ZooKeeper
write is a request through four server threads and a log fsync. A page's first write
after it went idle is not delayed.

Within an attempt, a mutation whose precondition fails (If-Match, If-None-Match) fails
alone; one whose key left this page (split or merge by another process) is routed again.
On a version conflict the page is read again and the batch re-applied, with jittered
backoff, an attempt cap and a deadline; mutations that arrived meanwhile join the retry
(two processes writing one page then write fewer, larger batches). A write whose outcome
is unknown (lost connection, timeout) is attempted again the same way: every mutation is
idempotent, so the next attempt finds its own effect when the write happened. A page
grown past page_split_bytes is split in the same write: one multi sets this page,
creates the new pages and sets the page map, with version checks on the page and the map.

A busy page's writes are pipelined (commit_pipeline_depth, default 2 in flight): the
next batch is applied to the page as the write ahead of it will leave it and sent
before that write is answered, expecting the version it makes. Otherwise a batch under
load waits for the write ahead, then for its own, and both waits grow in ZooKeeper's
slow moments. A version check alone could let such a write succeed where the one ahead
failed: another writer's single write makes the very version it expects, and it would
then overwrite that writer's change. So every write of a busy page also sets the
queue's fence, an ephemeral znode of its own (catalog `fences/`), expecting the fence
version the write ahead makes: when that write failed, the fence never moved and the
follower fails too. ZooKeeper applies one session's requests in order. Any failure ends
the pipeline: the fence is dropped (a new one is made by the next busy write), later
batches fail and retry in order, each after the ones ahead of it have finished, and no
new batch follows until they have. Splits, merges, a contended page (under a watch) and
batches with extra operations are never pipelined.
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
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from blobstore.catalog import metrics
from blobstore.catalog._private import UNKNOWN_OUTCOME_ERRORS
from blobstore.catalog.condemned import CondemnedLedgers, CondemnedView
from blobstore.catalog.config import (
    PAGE_BYTES_HARD_MAX,
    PAGE_MAP_BYTES_MAX,
    CatalogConfig,
    CatalogPaths,
)
from blobstore.catalog.errors import (
    CatalogBusyError,
    CatalogError,
    CatalogUnavailableError,
    LedgerCondemnedError,
    NoSuchBucketError,
    RecordTooLargeError,
)
from blobstore.catalog.page import IndexPage, PageMap, RootMap, pack_page
from blobstore.catalog.page_batch import (
    BatchOnPage,
    CommitAction,
    Mutation,
    apply_batch,
    commit_action,
)
from blobstore.catalog.records import BucketRecord
from blobstore.catalog.retry import CasRetry, CasRetryPolicy
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

Operation = tuple[str, tuple[Any, ...]]  # one operation of a ZooKeeper multi
CONDEMNED_CHECK_INDEX = 1  # a write's check of the condemned set follows the bucket's


class IndexHost(Protocol):
    """What a page's commit queue uses of the index that owns it (`ObjectIndex`): its
    settings and session, the maps and pages it reads, and the hand-backs (a mutation
    that left the page, an idle queue, a page to merge, a task to track)."""

    @property
    def zk(self) -> ZooKeeperClient: ...
    @property
    def config(self) -> CatalogConfig: ...
    @property
    def paths(self) -> CatalogPaths: ...
    @property
    def retry_policy(self) -> CasRetryPolicy: ...
    @property
    def condemned(self) -> CondemnedLedgers: ...
    @property
    def closing(self) -> bool: ...
    def track(self, task: asyncio.Task[Any]) -> None: ...
    async def bucket_state(
        self, bucket: str, view: asyncio.Future[None] | None = None, *, fresh: bool = False
    ) -> tuple[BucketRecord, int]: ...
    async def root_map(
        self, bucket: str, *, fresh: bool = False, view: asyncio.Future[None] | None = None
    ) -> RootMap: ...
    async def page_map(
        self,
        bucket: str,
        key: str = "",
        *,
        fresh: bool = False,
        view: asyncio.Future[None] | None = None,
    ) -> PageMap: ...
    def forget_root(self, bucket: str) -> None: ...
    def forget_shard(self, bucket: str, shard_id: str) -> None: ...
    async def read_page(
        self,
        bucket: str,
        page_id: str,
        view: asyncio.Future[None] | None = None,
        *,
        shared: bool = False,
    ) -> IndexPage | None: ...
    async def read_page_for_commit(self, bucket: str, page_id: str) -> IndexPage | None: ...
    def reroute(self, mutation: Mutation) -> None: ...
    def queue_idle(self, queue: PageCommitQueue) -> None: ...
    async def try_merge(self, bucket: str, page_id: str, key: str) -> None: ...


class ExtraOperationsFailedError(CatalogError):
    """The extra operations of a mutation (e.g. deleting an upload's parts) failed their
    version checks while the page itself was unchanged."""


@dataclass(slots=True)
class _Attempts:
    """What a batch's attempts carry from one to the next."""

    pending: list[Mutation]  # not answered yet
    page: IndexPage | None = None  # the page the latest attempt applied the batch to
    validate: bool = False  # read the page only after a sync
    fresh_bucket: bool = False  # the bucket record's check failed: read it again
    unknown_outcome: bool = False  # a write's outcome was unknown
    applied: BatchOnPage | None = None  # the batch as the successful write holds it
    written_bytes: int = 0  # the encoded size of this page as written
    condemned: CondemnedView | None = None  # the set the write's check names, if any
    # A refusal for a condemned ledger was checked against the set's current generation.
    refusals_rechecked: bool = False


@dataclass(slots=True)
class _Split:
    """A page grown past page_split_bytes, cut into pieces that one multi writes with
    the map shard that lists them."""

    work: IndexPage
    pieces: list[IndexPage]
    page_map: PageMap
    map_operations: list[Operation]

    def kept(self) -> IndexPage:
        """The piece that keeps the page's id (the first, or the last after an append
        split)."""
        return next(piece for piece in self.pieces if piece.page_id == self.work.page_id)

    def page_operations(
        self, paths: CatalogPaths, bucket: str, page_version: int, level: int
    ) -> tuple[list[Operation], int]:
        """The kept piece is written over the page with the compare-and-set, the others
        are created. Also returns the kept piece's encoded size."""
        kept = self.kept()
        kept_encoded = kept.encode()
        path = paths.page(bucket, kept.page_id)
        operations: list[Operation] = [
            ("set", (path, pack_page(kept_encoded, level), page_version))
        ]
        for piece in self.pieces:
            if piece is not kept:
                stored = pack_page(piece.encode(), level)
                operations.append(("create", (paths.page(bucket, piece.page_id), stored)))
        return operations, len(kept_encoded)


class PageCommitQueue:
    def __init__(self, index: IndexHost, bucket: str, page_id: str) -> None:
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
        """Apply the batch to its page and write it with one compare-and-set; after a
        failure, again (with what arrived meanwhile) until the retry policy gives up."""
        state = _Attempts([m for m in batch if not m.future.done()])
        while state.pending:
            try:
                action = await self._apply_and_write(batch, retry, state)
            except BadVersionError as e:
                again = await self._conflicted(e, state, retry)
            except NoNodeError:
                again = await self._moved(state, retry)
            except (NoSuchBucketError, RecordTooLargeError) as e:
                self._fail_all(state.pending, e)
                return
            except UNKNOWN_OUTCOME_ERRORS as e:
                again = await self._outcome_unknown(e, state, retry)
            else:
                if action is CommitAction.READ_AGAIN:
                    continue
                if action is CommitAction.WRITE:
                    await self._written(state)
                return
            if not again:
                return

    async def _apply_and_write(
        self, batch: list[Mutation], retry: CasRetry, state: _Attempts
    ) -> CommitAction:
        """One attempt: read the bucket record and the page, apply the pending mutations
        (`apply_batch`) and do what `commit_action` says. ANSWER also stands for a page
        merged away, whose mutations are routed again."""
        index = self.index
        if retry.attempt > 1:
            await self._after_writes_ahead()
            state.pending += self._top_up(batch, state.pending)
        bucket, bucket_version = await index.bucket_state(self.bucket, fresh=state.fresh_bucket)
        from_cache = await self._page_to_apply(state)
        condemned = await index.condemned.view()
        page = state.page
        if page is None:  # merged away
            for mutation in state.pending:
                index.reroute(mutation)
            return CommitAction.ANSWER
        applied = apply_batch(page, state.pending, bucket, index.config.record_bytes_max, condemned)
        for mutation in applied.rerouted:
            index.reroute(mutation)
        newest = state.validate and not from_cache
        if newest and await self._refusals_outdated(applied, condemned, state):
            state.pending = applied.still_pending()
            return CommitAction.READ_AGAIN  # decide again on the set as it is now
        if newest:  # read after a sync: refusals stand
            self._refuse(applied.refused)
            applied.refused = []
        action = commit_action(applied.changed, newest)
        if action is CommitAction.READ_AGAIN:
            self.page = None
            state.validate = True
            state.pending = applied.still_pending()  # not the rerouted: they are gone
            return action
        state.pending = applied.still_pending()
        if action is CommitAction.ANSWER:
            _succeed_all(applied.applied)
            return action
        state.applied = applied
        state.condemned = condemned if applied.references_new_ledgers else None
        # The waiters are answered in the step that reads the write's success, one loop
        # iteration before this task resumes to finish up.
        answered = functools.partial(_succeed_all, list(applied.applied))
        state.written_bytes = await self._write(
            page,
            applied.work,
            bucket_version,
            applied.applied_mutations(),
            answered,
            state.condemned,
        )
        return action

    async def _page_to_apply(self, state: _Attempts) -> bool:
        """Set `state.page` to the page the attempt applies the batch to: this queue's
        copy when it covers every pending key, else the page read (after a sync when
        `state.validate`), None when it was merged away. True when it is the copy."""
        state.page = self._cached_page()
        if state.page is not None and not all(state.page.contains(m.key) for m in state.pending):
            # Another process split or merged this page after we cached it: only a fresh
            # read may send a mutation elsewhere.
            self.page = state.page = None
        if state.page is not None:
            return True
        if state.validate:
            # Decide without a write only on the newest state: after a sync, this
            # session's server has every write acknowledged anywhere.
            await self.index.zk.fresh_view()
        state.page = await self.index.read_page_for_commit(self.bucket, self.page_id)
        return False

    async def _conflicted(self, error: BadVersionError, state: _Attempts, retry: CasRetry) -> bool:
        """A version check of the write failed. True: attempt again."""
        self._attempt_failed(retry)
        failed_at = getattr(error, "operation_index", 0)
        if state.condemned is not None and failed_at == CONDEMNED_CHECK_INDEX:
            # Ledgers were condemned (or absolved) since the set was read: decide again.
            self.index.condemned.invalidate(state.condemned.generation)
            if await retry.backoff("condemned"):
                return True
            self._fail_all(state.pending, CatalogBusyError("the condemned set kept changing"))
            return False
        metrics.CAS_CONFLICTS.inc()
        if await self._extra_operations_failed(state.pending, state.page):
            return False
        self.page = None
        # The multi's first operation checks the bucket record's version; when another
        # operation failed, the cached record is still good, and another writer moved
        # the page (or its map): watch it for a while.
        state.fresh_bucket = failed_at == 0
        if not state.fresh_bucket:
            self._contended_until = time.monotonic() + self.index.config.commit_watch_s
        if await retry.backoff("conflict"):
            return True
        self._fail_all(
            state.pending, CatalogBusyError(f"bucket {self.bucket!r}: too many write conflicts")
        )
        return False

    async def _moved(self, state: _Attempts, retry: CasRetry) -> bool:
        """A znode the write names is gone (the bucket, or the page or its map moved).
        True: attempt again."""
        self._attempt_failed(retry)
        self.page = None
        if not await self._bucket_exists():
            self._fail_all(state.pending, NoSuchBucketError(self.bucket))
            return False
        if await self._extra_operations_failed(state.pending, state.page):
            return False
        if await retry.backoff("moved"):
            return True
        self._fail_all(
            state.pending, CatalogBusyError(f"bucket {self.bucket!r}: index kept moving")
        )
        return False

    async def _outcome_unknown(
        self, error: BaseException, state: _Attempts, retry: CasRetry
    ) -> bool:
        """The write may have happened. Every mutation is idempotent, so trying again
        finds its own result when it did. True: attempt again."""
        self._attempt_failed(retry)
        state.unknown_outcome = True
        for mutation in state.pending:
            mutation.outcome_unknown = True
        self.page = None
        if await retry.backoff("unavailable"):
            return True
        self._fail_all(state.pending, CatalogUnavailableError(f"commit outcome unknown: {error!r}"))
        return False

    async def _written(self, state: _Attempts) -> None:
        """The write succeeded: answer the waiters, and merge the page when it shrank
        below page_merge_bytes."""
        applied, page = state.applied, state.page
        assert applied is not None
        assert page is not None
        if state.unknown_outcome:
            logger.info(
                "catalog commit retried after unknown outcome bucket=%s page=%s",
                self.bucket,
                self.page_id,
            )
        self._refuse(applied.refused)
        metrics.MUTATIONS.inc(len(applied.applied))
        metrics.BATCH_SIZE.observe(len(applied.applied))
        _succeed_all(applied.applied)
        if (
            state.written_bytes < self.index.config.page_merge_bytes
            and applied.work.encoded_size() < page.encoded_size()
            and not self._others_in_flight()
        ):
            # Only a page that shrank (keys or versions removed) may merge. One small
            # because it is new, the bucket's last page after an append split, has
            # nothing to merge with: trying would read two pages per commit under
            # sequential PUTs, and a merge there would be split again moments later.
            await self.index.try_merge(self.bucket, self.page_id, page.lo)

    async def _write(
        self,
        page: IndexPage,
        work: IndexPage,
        bucket_version: int,
        batch: list[Mutation],
        answered: Callable[[], None] | None = None,
        condemned: CondemnedView | None = None,
    ) -> int:
        """One compare-and-set of the page (split when it grew too large); returns the
        encoded size of this page as written. With `condemned`, the write also checks
        that set's generation (second operation, `CONDEMNED_CHECK_INDEX`)."""
        config = self.index.config
        encoded = work.encode()
        operations: list[Operation] = [
            ("check", (self.index.paths.bucket(self.bucket), bucket_version))
        ]
        if condemned is not None:
            operations.append(self.index.condemned.check_operation(condemned))
        for mutation in batch:
            operations.extend(mutation.extra_operations)
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
                if map_operations:  # else the map cannot grow: the page stays whole
                    split = _Split(work, pieces, page_map, map_operations)
                    return await self._write_split(page, split, operations, answered)
        return await self._write_page(page, work, encoded, batch, operations, answered)

    async def _write_page(
        self,
        page: IndexPage,
        work: IndexPage,
        encoded: bytes,
        batch: list[Mutation],
        operations: list[Operation],
        answered: Callable[[], None] | None,
    ) -> int:
        """Write the page over itself. A busy page's write is fenced, and the next batch
        may follow it before its answer."""
        if len(encoded) > PAGE_BYTES_HARD_MAX:
            raise RecordTooLargeError(
                f"index page of bucket {self.bucket!r}", len(encoded), PAGE_BYTES_HARD_MAX
            )
        work.check()
        stored = pack_page(encoded, self.index.config.page_compression_level)
        operations.append(
            ("set", (self.index.paths.page(self.bucket, work.page_id), stored, page.version))
        )
        followed = self._others_in_flight()  # sent behind an unanswered write?
        fenced = self._fence_operation(operations, batch, followed)
        work.version = page.version + 1
        if fenced:
            # The next batch may apply to what this write leaves, before its answer.
            self.page = work
            self._page_written_at = time.monotonic()
        self._chain = fenced
        if followed:
            metrics.PIPELINED_WRITES.inc()
        if self._sent is not None and not self._sent.done():
            self._sent.set_result(None)
        try:
            await self.index.zk.multi(operations, answered)
        except BaseException:
            if self.page is work:
                self.page = None
            self._drop_fence()
            raise
        metrics.PAGE_COMMITS.inc()
        self._remember(work)
        return len(encoded)

    async def _write_split(
        self,
        page: IndexPage,
        split: _Split,
        operations: list[Operation],
        answered: Callable[[], None] | None,
    ) -> int:
        """Write the pieces of a split page and the map in one multi; returns the
        encoded size of the piece that keeps this page's id."""
        self._chain = False  # nothing follows a split before its answer
        for piece in split.pieces:
            piece.check()
        level = self.index.config.page_compression_level
        page_operations, kept_bytes = split.page_operations(
            self.index.paths, self.bucket, page.version, level
        )
        operations.extend(page_operations)
        operations.extend(split.map_operations)
        shard_id = split.page_map.shard_id
        try:
            await self.index.zk.multi(operations, answered)
        except NodeExistsError:  # a new page or shard id collided: retry with fresh ids
            raise BadVersionError() from None
        except BadVersionError:
            self.index.forget_root(self.bucket)  # the page or the maps moved on
            self.index.forget_shard(self.bucket, shard_id)
            raise
        metrics.COMMITS.labels("split").inc()
        metrics.PAGE_SPLITS.inc(len(split.pieces) - 1)
        self.index.forget_shard(self.bucket, shard_id)
        if len(split.map_operations) > 1:  # the shard was split too
            metrics.MAP_SHARD_SPLITS.inc()
            logger.info("page map shard split bucket=%s shard=%s", self.bucket, shard_id)
        kept = split.kept()
        kept.version = page.version + 1
        self._remember(kept)
        logger.debug(
            "index page split bucket=%s page=%s pieces=%d",
            self.bucket,
            split.work.page_id,
            len(split.pieces),
        )
        return kept_bytes

    def _fence_operation(
        self, operations: list[Operation], batch: list[Mutation], followed: bool
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

    async def _map_operations(self, page_map: PageMap, new_map: PageMap) -> list[Operation]:
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
        operations: list[Operation] = [("set", (shard_path, shards[0].encode(), page_map.version))]
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

    async def _refusals_outdated(
        self, applied: BatchOnPage, condemned: CondemnedView, state: _Attempts
    ) -> bool:
        """Whether some refusal names a condemned ledger while the set has moved on since
        it was read (absolved, say: the view is kept up to VIEW_TTL_S). Asked once per
        batch, and only when such a refusal is about to stand."""
        if state.refusals_rechecked:
            return False
        if not any(isinstance(e, LedgerCondemnedError) for _, e in applied.refused):
            return False
        state.refusals_rechecked = True
        return await self.index.condemned.moved_on(condemned)

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
