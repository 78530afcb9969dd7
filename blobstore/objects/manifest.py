"""Manifests: the part list of a multipart object, kept out of its index record.

A completed multipart object's record names every extent and part, ~47 bytes a part (more
with part checksums). An index record must stay small (it lives in a shared index page
rewritten by every write to its neighbours, and may not pass `record_bytes_max`), while S3
allows 10,000 parts. So when the part list is longer than `manifest_bytes_min`, it is
written to ledger entries like object data, before the commit, and the record names those
entries instead (`ObjectRecord.manifest`):

    record {"v": ..., "size": ..., "etag": "...-10000", "mf": [[ledger, first, last, ...]]}
    manifest entries: {"format_version": 1, "bucket", "key", "etag", "size",
                       "ext": [...], "parts": [...]}

The manifest is immutable, like the entries it names, and is referenced exactly as they
are: a copy (CopyObject) shares it, and it becomes garbage with its record, for the same
collector and by the same rule (a ledger no record references, `blobstore fsck`). Whoever
needs the extents or parts (reads, UploadPartCopy, GetObject?partNumber, catalog scans)
resolves the record first; reading a large object pays one more entry read, once (the
resolved part lists are cached, keyed by the manifest's location, which never changes).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import replace

import orjson

from blobstore.catalog.records import Extent, ObjectRecord, PartInfo
from blobstore.objects.errors import ObjectLayerError
from blobstore.objects.extents import plan_read, total_length
from blobstore.objects.metrics import MANIFEST_OPS
from blobstore.objects.read_object_op import ReadHandleCache, iter_spans

FORMAT_VERSION = 1
# 10,000 parts with two checksums each come to ~1.2 MB; anything much larger is not ours.
MANIFEST_BYTES_MAX = 16 << 20
RESOLVED_CACHED_MAX = 8  # part lists kept resolved (~3 MB of objects for 10,000 parts)


class ManifestError(ObjectLayerError):
    """A manifest that cannot be read back as the part list of its record."""


def part_list_bytes(record: ObjectRecord) -> int:
    """What the record's extents and parts cost inline, encoded."""
    return len(
        orjson.dumps([[e.to_list() for e in record.extents], [p.to_list() for p in record.parts]])
    )


def encode_manifest(record: ObjectRecord) -> bytes:
    """The manifest of a record holding its extents and parts."""
    assert record.parts, "a manifest holds the part list of a multipart object"
    return orjson.dumps(
        {
            "format_version": FORMAT_VERSION,
            "bucket": record.bucket,
            "key": record.key,  # where it was completed (copies share it): for people
            "etag": record.etag,
            "size": record.size,
            "ext": [e.to_list() for e in record.extents],
            "parts": [p.to_list() for p in record.parts],
        }
    )


def decode_manifest(
    record: ObjectRecord, buf: bytes
) -> tuple[tuple[Extent, ...], tuple[PartInfo, ...]]:
    """The extents and parts a manifest holds, checked against the record naming it."""
    where = f"manifest of {record.bucket}/{record.key} version {record.version_id}"
    try:
        d = orjson.loads(buf)
        if not isinstance(d, dict) or d.get("format_version") != FORMAT_VERSION:
            raise ManifestError(f"{where}: unknown format")
        extents = tuple(Extent.from_list(e) for e in d["ext"])
        parts = tuple(PartInfo.from_list(p) for p in d["parts"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AssertionError) as e:
        raise ManifestError(f"{where}: undecodable ({e!r})") from e
    if d.get("etag") != record.etag:  # a copy keeps its source's ETag (and manifest)
        raise ManifestError(f"{where}: of an object whose ETag is {d.get('etag')!r}")
    size = total_length(extents)
    if size != record.size or d.get("size") != record.size or not parts:
        raise ManifestError(f"{where}: holds {size} bytes, the record {record.size}")
    if sum(p.size for p in parts) != record.size:
        raise ManifestError(f"{where}: its parts do not add up to {record.size} bytes")
    return extents, parts


class ManifestReader:
    """Resolves records whose part list lives in a manifest; caches a few part lists."""

    def __init__(self, handles: ReadHandleCache, window_entries: int) -> None:
        self._handles = handles
        self._window = window_entries
        self._resolved: OrderedDict[
            tuple[Extent, ...], tuple[tuple[Extent, ...], tuple[PartInfo, ...]]
        ] = OrderedDict()
        self._loading: dict[tuple[Extent, ...], asyncio.Future[bytes]] = {}

    async def resolve(self, record: ObjectRecord) -> ObjectRecord:
        """The record with its extents and parts filled (itself when they are)."""
        if not record.unresolved:
            return record
        key = record.manifest
        cached = self._resolved.get(key)
        if cached is None:
            cached = decode_manifest(record, await self._read(key))
            self._resolved[key] = cached
            while len(self._resolved) > RESOLVED_CACHED_MAX:
                self._resolved.popitem(last=False)
        self._resolved.move_to_end(key)
        extents, parts = cached
        return replace(record, extents=extents, parts=parts)

    async def _read(self, manifest: tuple[Extent, ...]) -> bytes:
        """One read of a manifest however many ask for it at once."""
        loading = self._loading.get(manifest)
        if loading is None:
            loading = asyncio.ensure_future(self._read_entries(manifest))
            self._loading[manifest] = loading
            loading.add_done_callback(lambda f: self._done_loading(manifest, f))
        return await asyncio.shield(loading)

    def _done_loading(self, manifest: tuple[Extent, ...], loading: asyncio.Future[bytes]) -> None:
        self._loading.pop(manifest, None)
        if not loading.cancelled():
            loading.exception()  # retrieved: every waiter may have gone

    async def _read_entries(self, manifest: tuple[Extent, ...]) -> bytes:
        length = total_length(manifest)
        if not 0 < length <= MANIFEST_BYTES_MAX:
            raise ManifestError(f"a manifest of {length} bytes (at most {MANIFEST_BYTES_MAX})")
        spans = plan_read(manifest, 0, length - 1)
        MANIFEST_OPS.labels(op="read").inc()
        return b"".join([piece async for piece in iter_spans(self._handles, spans, self._window)])
