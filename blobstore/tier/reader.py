"""Reads of tiered objects, for the gateways: the bytes (or a range of them) streamed
from the segment a record's tier location names.

The tiers' definitions are read from ZooKeeper when first needed and again after a
change (a watch on `/tiers` drops the cache). A tier's filesystem is opened once and
kept; the blocking reads of pyarrow.fs run on a small thread pool, one chunk at a time,
so a slow tier holds a thread, never the event loop. A read of the whole object checks
its CRC32C at the end. Every failure to reach a tier is a TierUnavailableError naming
it (the gateway answers 503).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import crc32c
import pyarrow

from blobstore.runtime.sealing import ClusterKey
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.tier.fs import TierFiles, TierUnavailableError
from blobstore.tier.segment import SegmentCorruptError, TierLocation
from blobstore.tier.tiers import TIERS_PATH, TierSpec, TierStore

logger = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1 << 20
READ_THREADS = 8
OPEN_FILES_MAX = 64


class TierReader:
    def __init__(self, zk: ZooKeeperClient, cluster_key: ClusterKey | None) -> None:
        self._store = TierStore(zk)
        self._zk = zk
        self._cluster_key = cluster_key
        self._tiers: dict[str, TierFiles] | None = None
        self._open: dict[tuple[str, str], Any] = {}
        self._open_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="tier-read")
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _files(self, tier: str) -> TierFiles:
        if self._tiers is None or tier not in self._tiers:
            self._loop = asyncio.get_running_loop()
            await self._zk.ensure_path(TIERS_PATH)
            await self._zk.get_children(TIERS_PATH, watch=self._changed)
            specs: list[TierSpec] = await self._store.list()
            self._tiers = {s.name: TierFiles(s, self._cluster_key) for s in specs}
        files = self._tiers.get(tier)
        if files is None:
            raise TierUnavailableError(tier, "read", LookupError("no such tier is defined"))
        return files

    def _changed(self, _event: Any) -> None:  # a watch callback, off the loop
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._forget)

    def _forget(self) -> None:
        self._tiers = None
        with self._open_lock:
            for source in self._open.values():
                _close_quietly(source)
            self._open.clear()

    def _source(self, files: TierFiles, segment_id: str) -> Any:
        """An open segment (blocking: runs on the pool)."""
        key = (files.name, segment_id)
        with self._open_lock:
            source = self._open.get(key)
            if source is None:
                if len(self._open) >= OPEN_FILES_MAX:
                    _close_quietly(self._open.pop(next(iter(self._open))))
                source = self._open[key] = files.open_input(segment_id)
            return source

    async def _run(self, fn: Callable[[], bytes]) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def read(self, location_text: str, start: int, end: int) -> AsyncIterator[bytes]:
        """Bytes start..end (inclusive) of the object at `location_text`."""
        location = TierLocation.parse(location_text)
        end = min(end, location.length - 1)
        if end < start:
            return
        files = await self._files(location.tier)
        whole = start == 0 and end == location.length - 1
        crc, position = 0, start
        while position <= end:
            count = min(READ_CHUNK_BYTES, end - position + 1)
            offset = location.offset + position
            chunk = await self._run(
                functools.partial(self._read_at, files, location, count, offset)
            )
            if whole:
                crc = crc32c.crc32c(chunk, crc)
            position += len(chunk)
            yield chunk
        if whole and crc != location.crc32c:
            raise SegmentCorruptError(
                f"tier {location.tier} segment {location.segment_id}: object at "
                f"{location.offset} fails its checksum"
            )

    def _read_at(self, files: TierFiles, location: TierLocation, count: int, offset: int) -> bytes:
        try:
            data: bytes = self._source(files, location.segment_id).read_at(count, offset)
        except (OSError, pyarrow.ArrowException) as e:
            with self._open_lock:
                self._open.pop((files.name, location.segment_id), None)
            raise TierUnavailableError(files.name, f"read {location.segment_id}", e) from None
        if len(data) != count:
            raise SegmentCorruptError(
                f"tier {files.name} segment {location.segment_id} ends before {offset + count}"
            )
        return data

    def close(self) -> None:
        self._forget()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _close_quietly(source: Any) -> None:
    try:
        source.close()
    except Exception:  # noqa: BLE001 - closing a handle of a tier that is gone
        logger.debug("tier file close failed", exc_info=True)
