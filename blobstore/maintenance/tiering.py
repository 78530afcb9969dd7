"""Transitions to a cold tier, as Spark tasks carry them out (docs/tiering.md).

A task packs the versions due for one tier into one segment: each version's record is
read again (and skipped unless it is still the version judged, on the bookies), its
bytes read from the ledgers and appended to the segment, which is written to the tier
with sequential writes (`hooks`: `tier_written`). The task then reads the whole
segment back and verifies it (magic, version, index, every object's CRC32C:
`tier_verified`). Only then is each record swapped by compare-and-set
(`Catalog.swap_object`): storage class and tier location set, extents gone
(`tier_swapped`). A record that changed meanwhile is skipped; its bytes in the segment
are dead, and a segment no record names is removed by a later run (job.py).
Nothing is deleted here: the versions' ledgers go the way of every released ledger.

A killed task leaves at worst a segment no record names: every object is readable from
exactly one place (its record names the bookies until the swap, the tier after).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from blobstore.catalog import Catalog
from blobstore.catalog.errors import (
    CatalogError,
    DeleteMarkerError,
    NoSuchKeyError,
    NoSuchVersionError,
)
from blobstore.catalog.records import ObjectRecord
from blobstore.ledger.errors import LedgerError
from blobstore.maintenance import hooks
from blobstore.maintenance.execute import (
    RESULT_COPIED,
    RESULT_FAILED,
    RESULT_SKIPPED,
    RESULT_SWAPPED,
    writer_session,
)
from blobstore.maintenance.scan import Session
from blobstore.objects.config import READ_WINDOW_ENTRIES_MAX
from blobstore.objects.encryption import stored_size
from blobstore.objects.extents import plan_read
from blobstore.objects.manifest import ManifestError, ManifestReader
from blobstore.objects.read_object_op import ReadHandleCache, ShortEntryError, iter_spans
from blobstore.runtime.sealing import load_cluster_key
from blobstore.tier.fs import TierFiles, TierUnavailableError
from blobstore.tier.segment import (
    SegmentCorruptError,
    SegmentObject,
    SegmentWriter,
    TierLocation,
    verify,
)
from blobstore.tier.tiers import TierSpec

logger = logging.getLogger(__name__)

RESULT_REWRITTEN = "rewritten"  # a tiered version moved to a new segment of its tier
READ_HANDLES_MAX = 16
SEGMENT_BYTES_MAX = 256 << 20  # a segment's objects, at most (a larger object: its own)
SEGMENT_OBJECTS_MAX = 100_000
WRITE_BUFFER_BYTES = 8 << 20  # bytes gathered before one write to the tier
READ_ERRORS = (LedgerError, ShortEntryError, ManifestError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Move:
    """One version due for a tier, as the scan judged it; or, when a segment is
    rewritten, one of its live versions (`location`: where its bytes are now)."""

    bucket: str
    key: str
    version_id: str
    mtime: float
    size: int
    location: str = ""


@dataclass(frozen=True, slots=True)
class TierTask:
    """One segment to write: of versions due for the tier (their bytes read from the
    ledgers), or, when `rewrite`, of the live versions of sparse segments of the same
    tier (read from there)."""

    tier: TierSpec
    storage_class: str
    segment_id: str
    moves: tuple[Move, ...]
    rewrite: bool = False


def pack(moves: list[Move], bytes_max: int, objects_max: int) -> list[list[Move]]:
    """`moves` in order, cut into groups of at most `bytes_max` bytes and `objects_max`
    versions (a version larger than `bytes_max` alone in its group)."""
    groups: list[list[Move]] = []
    size = 0
    for move in moves:
        if not groups or size + move.size > bytes_max or len(groups[-1]) >= objects_max:
            groups.append([])
            size = 0
        groups[-1].append(move)
        size += move.size
    return groups


def sparse_segments(
    segments: dict[str, tuple[int, int]], threshold: float, garbage_bytes_min: int
) -> list[str]:
    """The segments (name -> (size, live bytes)) to rewrite: live ratio under
    `threshold` and at least `garbage_bytes_min` dead bytes (headers and index count as
    dead; a segment with no live byte is not here: it is removed, not rewritten)."""
    chosen = []
    for name, (size, live) in sorted(segments.items()):
        if live and size and live / size < threshold and size - live >= garbage_bytes_min:
            chosen.append(name)
    return chosen


def movable(record: ObjectRecord, move: Move) -> str:
    """Why the record read now is not the version judged, where the scan saw it (on the
    bookies, or at `move.location`); '' if it is."""
    if record.is_delete_marker:
        return "delete marker"
    if record.last_modified != move.mtime:
        return "changed"
    if record.tier_location != (move.location or None):
        return "moved since"
    return ""


def tiered_record(
    record: ObjectRecord, storage_class: str, location: TierLocation, *, rewrite: bool = False
) -> ObjectRecord:
    """The record of a version whose bytes are now at `location` (the part list kept,
    for partNumber reads and the ETag; no extents, no manifest). A rewrite changes the
    location only."""
    if rewrite:
        return replace(record, tier_location=location.encode())
    return replace(
        record,
        storage_class=storage_class,
        tier_location=location.encode(),
        extents=(),
        manifest=(),
        manifest_ledgers=(),
    )


def tier_partition(session: Session, tasks: Iterable[TierTask]) -> Iterator[tuple[Any, ...]]:
    tasks = list(tasks)
    if not tasks:
        return iter(())
    return iter(asyncio.run(_tier_all(session, tasks)))


async def _tier_all(session: Session, tasks: list[TierTask]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    cluster_key = load_cluster_key(required=False)
    async with writer_session(session) as (catalog, client, _writer_id):
        handles = ReadHandleCache(client, READ_HANDLES_MAX)
        manifests = ManifestReader(handles, READ_WINDOW_ENTRIES_MAX)
        for task in tasks:
            files = TierFiles(task.tier, cluster_key)
            try:
                rows.extend(await _tier_one(catalog, handles, manifests, files, task))
            except (TierUnavailableError, SegmentCorruptError, *READ_ERRORS) as e:
                logger.warning(
                    "event=tiering_failed tier=%s segment=%s error=%s",
                    task.tier.name,
                    task.segment_id,
                    e,
                )
                with contextlib.suppress(TierUnavailableError):
                    await asyncio.to_thread(files.delete_segment, task.segment_id)
                rows.append((RESULT_FAILED, -1, "", "", task.segment_id, 0, f"{e}"))
    return rows


async def _tier_one(
    catalog: Catalog,
    handles: ReadHandleCache,
    manifests: ManifestReader,
    files: TierFiles,
    task: TierTask,
) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    packed: list[tuple[ObjectRecord, SegmentObject]] = []
    out = await asyncio.to_thread(files.open_output, task.segment_id)
    try:
        buffered = _Buffered(out)
        writer = SegmentWriter(buffered)
        for move in task.moves:
            where = (move.bucket, move.key, move.version_id)
            record, why = await _current(catalog, move)
            if record is None:
                rows.append((RESULT_SKIPPED, -1, *where, 0, why))
                continue
            resolved = await manifests.resolve(record)
            item = await _append(writer, buffered, _source(handles, files, resolved))
            packed.append((record, item))
        size = writer.finish()
        await asyncio.to_thread(buffered.flush)
    finally:
        await asyncio.to_thread(out.close)
    hooks.reached("tier_written")
    await _verified(files, task.segment_id, [item for _, item in packed])
    hooks.reached("tier_verified")
    rows.append((RESULT_COPIED, -1, files.name, "", task.segment_id, size, task.storage_class))
    for record, item in packed:
        location = TierLocation(files.name, task.segment_id, item.offset, item.length, item.crc32c)
        new = tiered_record(record, task.storage_class, location, rewrite=task.rewrite)
        row = await _swap(catalog, record, new)
        if task.rewrite and row[0] == RESULT_SWAPPED:
            row = (RESULT_REWRITTEN, *row[1:])
        rows.append(row)
        hooks.reached("tier_swapped")
    return rows


async def _current(catalog: Catalog, move: Move) -> tuple[ObjectRecord | None, str]:
    try:
        record = await catalog.get_object(move.bucket, move.key, move.version_id)
    except (NoSuchKeyError, NoSuchVersionError, DeleteMarkerError):
        return None, "gone"
    why = movable(record, move)
    return (None, why) if why else (record, "")


async def _ledger_bytes(
    handles: ReadHandleCache, record: ObjectRecord
) -> AsyncIterator[bytes | memoryview]:
    """The version's stored bytes as they are (an encrypted one's stay sealed)."""
    size = stored_size(record)
    if size:
        spans = plan_read(record.extents, 0, size - 1)
        async for piece in iter_spans(handles, spans, READ_WINDOW_ENTRIES_MAX):
            yield piece


async def _tier_bytes(files: TierFiles, location_text: str) -> AsyncIterator[bytes | memoryview]:
    """A tiered version's bytes, from its segment on `files`' tier (a rewrite)."""
    location = TierLocation.parse(location_text)
    source = await asyncio.to_thread(files.open_input, location.segment_id)
    try:
        position = 0
        while position < location.length:
            count = min(WRITE_BUFFER_BYTES, location.length - position)
            piece = await asyncio.to_thread(source.read_at, count, location.offset + position)
            if len(piece) != count:
                raise SegmentCorruptError(f"segment {location.segment_id} ends early")
            position += count
            yield piece
    finally:
        await asyncio.to_thread(source.close)


def _source(
    handles: ReadHandleCache, files: TierFiles, record: ObjectRecord
) -> tuple[ObjectRecord, AsyncIterator[bytes | memoryview]]:
    """The version and its bytes: from the ledgers when it has extents, else from the
    segment it lives in now."""
    if record.extents or not record.tier_location:
        return record, _ledger_bytes(handles, record)
    return record, _tier_bytes(files, record.tier_location)


async def _append(
    writer: SegmentWriter,
    buffered: _Buffered,
    source: tuple[ObjectRecord, AsyncIterator[bytes | memoryview]],
) -> SegmentObject:
    """The version's bytes, streamed into the segment (the tier's blocking writes off
    the loop, WRITE_BUFFER_BYTES at a time)."""
    record, pieces = source
    writer.begin(record.bucket, record.key, record.version_id)
    async for piece in pieces:
        writer.write(piece)
        if buffered.pending_bytes >= WRITE_BUFFER_BYTES:
            await asyncio.to_thread(buffered.flush)
    item = writer.end()
    if item.length != stored_size(record):
        raise ShortEntryError(f"{record.key}: read {item.length} of {stored_size(record)} bytes")
    return item


async def _verified(files: TierFiles, segment_id: str, expected: list[SegmentObject]) -> None:
    """Read the segment back whole; it must hold exactly what was written."""

    def check() -> list[SegmentObject]:
        source = files.open_input(segment_id)
        try:
            return verify(source)
        finally:
            source.close()

    found = await asyncio.to_thread(check)
    if found != expected:
        raise SegmentCorruptError(f"segment {segment_id} reads back another index")


async def _swap(catalog: Catalog, record: ObjectRecord, new: ObjectRecord) -> tuple[Any, ...]:
    where = (record.bucket, record.key, record.version_id)
    try:
        swapped = await catalog.swap_object(record, new)
    except CatalogError as e:
        return (RESULT_SKIPPED, -1, *where, 0, type(e).__name__)
    if not swapped:
        return (RESULT_SKIPPED, -1, *where, 0, "changed")
    return (RESULT_SWAPPED, -1, *where, record.size, new.tier_location)


class _Buffered:
    """Gathers the segment's writes; `flush` (off the loop) hands them to the tier's
    stream in one write."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.pending: list[bytes] = []
        self.pending_bytes = 0

    def write(self, data: bytes | memoryview) -> None:
        self.pending.append(bytes(data))
        self.pending_bytes += len(data)

    def flush(self) -> None:
        if self.pending:
            self.out.write(b"".join(self.pending))
            self.pending.clear()
            self.pending_bytes = 0
