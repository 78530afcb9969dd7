"""Listings over the object index: ListObjects(V2) and ListObjectVersions semantics.

A `KeyWalker` walks the keys of a bucket in order from a position, one page at a time
(the next few pages are read while the current one is consumed), and can jump forward: after
a common prefix "photos/" the walk seeks to the successor "photos0" and reads the page
holding that key, so it never iterates the keys under a prefix it has rolled up unless
they share the current page. Each page read is checked against its own range, so
concurrent splits and merges never make a walk skip or repeat keys.

Markers: a common prefix at or before start_after / key_marker was returned on an
earlier page and is skipped, which makes `next_start_after` a correct continuation.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from blobstore.catalog.naming import common_prefix, prefix_successor
from blobstore.catalog.object_index import ObjectIndex
from blobstore.catalog.page import IndexPage
from blobstore.catalog.records import (
    ListResult,
    ObjectRecord,
    ObjectSummary,
    VersionListResult,
    VersionRefs,
)

_DECODE_CHUNK_KEYS = 256


# Pages read ahead of the one being consumed: a page of ~100 records is consumed in
# about the time of one ZooKeeper round trip, so a few in flight keep the walk busy.
_PREFETCH_PAGES = 3

# Read-aheads left to finish by a walk that ended (at most _PREFETCH_PAGES per walk),
# held here until done so that they are not collected mid-flight.
_DETACHED_READS: set[asyncio.Task[IndexPage]] = set()


class KeyWalker:
    def __init__(
        self,
        index: ObjectIndex,
        bucket: str,
        start: str,
        end: str | None,
        view: asyncio.Future[None] | None = None,
        *,
        kept: bool = True,
    ) -> None:
        self.index = index
        self.bucket = bucket
        self.end = end
        self._view = view  # a fresh view started before the walk (see page_containing)
        self._kept = kept  # pages read kept in the index's cache (see read_page)
        self._pos: str | None = start
        self._page: IndexPage | None = None
        self._i = 0
        # Pages read ahead, in key order: (lower bound asked for, read).
        self._ahead: deque[tuple[str, asyncio.Task[IndexPage]]] = deque()
        # Pages walked in a row without a seek: read-ahead deepens with it, so a listing
        # that jumps from prefix to prefix does not read pages it will skip.
        self._run = 0
        self._decoded: tuple[IndexPage, int, list[list[dict[str, Any]]]] | None = None

    def versions(self, page: IndexPage, index: int) -> list[dict[str, Any]]:
        """Key `index` of `page`, decoded. Lines are decoded in chunks (one json call per
        chunk, far cheaper than one per key), from the first key asked for."""
        decoded = self._decoded
        if (
            decoded is None
            or decoded[0] is not page
            or not decoded[1] <= index < decoded[1] + len(decoded[2])
        ):
            end = min(index + _DECODE_CHUNK_KEYS, len(page.lines))
            decoded = (page, index, page.decode_lines(index, end))
            self._decoded = decoded
        return decoded[2][index - decoded[1]]

    async def next(self) -> tuple[str, IndexPage, int] | None:
        while True:
            page = await self._current()
            if page is None:
                return None
            if self._i < len(page.keys):
                key = page.keys[self._i]
                if self.end is not None and key >= self.end:
                    return None
                self._i += 1
                return key, page, self._i - 1
            self._next_page(page)

    async def next_run(self) -> tuple[IndexPage, int, int] | None:
        """The keys of the current page left before the end, as (page, start, stop)
        indexes; the walk goes on after them. A walk that takes every key (a scan) pays
        for the page, not for each key."""
        while True:
            page = await self._current()
            if page is None:
                return None
            start, keys = self._i, page.keys
            stop = len(keys) if self.end is None else bisect.bisect_left(keys, self.end, start)
            if start < stop:
                self._i = stop
                return page, start, stop
            if stop < len(keys):  # the next key is past the end
                return None
            self._next_page(page)

    async def _current(self) -> IndexPage | None:
        """The page the walk is on (read when it has moved on); None past the end."""
        if self._page is None:
            pos = self._pos
            if pos is None or (self.end is not None and pos >= self.end):
                return None
            self._page = await self._fetch(pos)
            self._i = bisect.bisect_left(self._page.keys, pos)
        return self._page

    def _next_page(self, page: IndexPage) -> None:
        self._pos = page.hi
        self._page = None
        self._run += 1

    def seek(self, pos: str | None) -> None:
        """Continue at the first key >= pos (forward only)."""
        if pos is None:
            self._pos = None
            self._page = None
            return
        if self._page is not None and self._page.contains(pos):
            self._i = max(self._i, bisect.bisect_left(self._page.keys, pos))
            return
        self._pos = pos
        self._page = None
        self._run = 0

    def _read_ahead_after(self, page: IndexPage) -> None:
        """Start reading the page after `page`, if the walk may need it and there is room."""
        hi = page.hi
        if hi is None or (self.end is not None and hi >= self.end):
            return
        if len(self._ahead) >= min(_PREFETCH_PAGES, 1 + self._run):
            return
        task = asyncio.ensure_future(
            self.index.page_containing(self.bucket, hi, self._view, kept=self._kept)
        )
        task.add_done_callback(self._read_ahead_done)
        self._ahead.append((hi, task))

    def _read_ahead_done(self, task: asyncio.Task[IndexPage]) -> None:
        if task.cancelled() or task.exception() is not None:
            return  # (retrieved) the walk reads the page itself when it gets there
        if self._ahead and self._ahead[-1][1] is task:
            self._read_ahead_after(task.result())

    async def _fetch(self, pos: str) -> IndexPage:
        while self._ahead and self._ahead[0][0] < pos:  # skipped by a seek
            self._ahead.popleft()[1].cancel()
        if self._ahead and self._ahead[0][0] == pos:
            task = self._ahead.popleft()[1]
            page = None
            with contextlib.suppress(Exception):  # read again below, errors surface there
                page = await task
            if page is not None and page.contains(pos):
                self._top_up(page)
                return page
        await self._drop_read_ahead()
        page = await self.index.page_containing(self.bucket, pos, self._view, kept=self._kept)
        self._read_ahead_after(page)
        return page

    def _top_up(self, page: IndexPage) -> None:
        """A page was taken from the read-ahead: extend it past the newest page read."""
        if not self._ahead:
            self._read_ahead_after(page)
            return
        last = self._ahead[-1][1]
        if last.done() and not last.cancelled() and last.exception() is None:
            self._read_ahead_after(last.result())

    async def _drop_read_ahead(self) -> None:
        tasks = [task for _, task in self._ahead]
        self._ahead.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self, *, keep_read_ahead: bool = False) -> None:
        """Stop the walk. `keep_read_ahead`: let the pages being read ahead arrive into
        the page cache rather than cancel them. A truncated listing is usually followed
        by its continuation, which starts on those pages; cancelled, they would have
        cost ZooKeeper the read and this process its transfer for nothing."""
        if not keep_read_ahead:
            await self._drop_read_ahead()
            return
        for _, task in self._ahead:
            _DETACHED_READS.add(task)
            task.add_done_callback(_DETACHED_READS.discard)
        self._ahead.clear()


def _rolled_up_marker_start(prefix: str, delimiter: str, marker: str) -> str | None:
    """When `marker` lies under a common prefix, the position after that prefix."""
    if not delimiter or not marker.startswith(prefix):
        return None
    rest = marker[len(prefix) :]
    j = rest.find(delimiter)
    if j < 0:
        return None
    return prefix_successor(prefix + rest[: j + len(delimiter)]) or "\U0010ffff" * 2


async def list_objects(
    index: ObjectIndex,
    bucket: str,
    *,
    prefix: str,
    delimiter: str,
    start_after: str,
    max_keys: int,
    view: asyncio.Future[None] | None = None,
) -> ListResult:
    if max_keys <= 0:
        return ListResult([], [], False, "")
    start = prefix
    exclusive = ""
    if start_after and start_after >= prefix:
        start = start_after
        exclusive = start_after
        jump = _rolled_up_marker_start(prefix, delimiter, start_after)
        if jump is not None:
            start = jump
    walker = KeyWalker(index, bucket, start, prefix_successor(prefix) if prefix else None, view)
    contents: list[ObjectSummary] = []
    common_prefixes: list[str] = []
    last = ""
    truncated = False
    try:
        while True:
            item = await walker.next()
            if item is None:
                break
            key, page, i = item
            if key == exclusive:
                continue
            latest = walker.versions(page, i)[0]
            if latest.get("dm", False):
                continue  # deleted keys are not listed and roll up into nothing
            common = common_prefix(prefix, delimiter, key)
            if common is not None:
                if len(contents) + len(common_prefixes) >= max_keys:
                    truncated = True
                    break
                common_prefixes.append(common)
                last = common
                walker.seek(prefix_successor(common))
                continue
            if len(contents) + len(common_prefixes) >= max_keys:
                truncated = True
                break
            contents.append(ObjectSummary.from_dict(key, latest))
            last = key
    finally:
        await walker.close(keep_read_ahead=truncated)
    return ListResult(contents, common_prefixes, truncated, last if truncated else "")


def _versions_start(prefix: str, delimiter: str, key_marker: str) -> str:
    """Where a listing of versions starts: at the prefix, at the key marker when it
    lies under the prefix, or after the common prefix the marker was rolled up into."""
    if not key_marker or key_marker < prefix:
        return prefix
    jump = _rolled_up_marker_start(prefix, delimiter, key_marker)
    return key_marker if jump is None else jump


def _after_version(records: list[ObjectRecord], version_id_marker: str) -> list[ObjectRecord]:
    """The versions of the marker's key after the marker's version (none when the
    version is gone)."""
    ids = [r.version_id for r in records]
    if version_id_marker not in ids:
        return []
    return records[ids.index(version_id_marker) + 1 :]


async def list_object_versions(
    index: ObjectIndex,
    bucket: str,
    *,
    prefix: str,
    delimiter: str,
    key_marker: str,
    version_id_marker: str,
    max_keys: int,
    view: asyncio.Future[None] | None = None,
) -> VersionListResult:
    if max_keys <= 0:
        return VersionListResult([], [], False, "", "")
    start = _versions_start(prefix, delimiter, key_marker)
    walker = KeyWalker(index, bucket, start, prefix_successor(prefix) if prefix else None, view)
    versions: list[ObjectRecord] = []
    common_prefixes: list[str] = []
    last_key = ""
    last_version = ""
    truncated = False
    try:
        while not truncated:
            item = await walker.next()
            if item is None:
                break
            key, page, i = item
            if key == key_marker and not version_id_marker:
                continue
            common = common_prefix(prefix, delimiter, key)
            if common is not None:
                if len(versions) + len(common_prefixes) >= max_keys:
                    truncated = True
                    break
                common_prefixes.append(common)
                last_key, last_version = common, ""
                walker.seek(prefix_successor(common))
                continue
            records = page.records(bucket, i)
            if key == key_marker and version_id_marker:
                records = _after_version(records, version_id_marker)
            for record in records:
                if len(versions) + len(common_prefixes) >= max_keys:
                    truncated = True
                    break
                versions.append(record)
                last_key, last_version = key, record.version_id
    finally:
        await walker.close(keep_read_ahead=truncated)
    if not truncated:
        last_key = last_version = ""
    return VersionListResult(versions, common_prefixes, truncated, last_key, last_version)


async def iter_records(
    index: ObjectIndex, bucket: str, *, all_versions: bool
) -> AsyncIterator[ObjectRecord]:
    walker = KeyWalker(index, bucket, "", None)
    try:
        while True:
            item = await walker.next()
            if item is None:
                return
            key, page, i = item
            if all_versions:
                for record in page.records(bucket, i):
                    yield record
                continue
            latest = walker.versions(page, i)[0]
            if not latest.get("dm", False):
                yield ObjectRecord.from_dict(bucket, key, latest, is_latest=True)
    finally:
        await walker.close()


async def iter_key_runs(
    index: ObjectIndex, bucket: str, lo: str, hi: str | None
) -> AsyncIterator[list[tuple[str, list[VersionRefs]]]]:
    """Every key in [lo, hi), in order, with what its versions reference (newest first),
    a page's run of keys at a time, each run's lines decoded in one call. The pages are
    read without a watch and not kept (each is read once)."""
    walker = KeyWalker(index, bucket, lo, hi, kept=False)
    try:
        while (run := await walker.next_run()) is not None:
            page, start, stop = run
            yield [
                (key, [VersionRefs(d) for d in versions])
                for key, versions in zip(
                    page.keys[start:stop], page.decode_lines(start, stop), strict=True
                )
            ]
    finally:
        await walker.close()
