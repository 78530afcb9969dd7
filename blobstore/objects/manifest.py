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
resolved part lists are cached, keyed by the manifest's location, which never changes,
up to RESOLVED_CACHED_BYTES_MAX of manifests).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, replace

import orjson

from blobstore.catalog.records import Extent, ObjectRecord, PartInfo
from blobstore.objects.encryption import part_stored_size
from blobstore.objects.errors import ObjectLayerError
from blobstore.objects.extents import plan_read, total_length
from blobstore.objects.metrics import MANIFEST_OPS
from blobstore.objects.read_object_op import ReadHandleCache, iter_spans

FORMAT_VERSION = 1
# 10,000 parts with two checksums each come to ~1.2 MB; anything much larger is not ours.
MANIFEST_BYTES_MAX = 16 << 20
# Part lists kept decoded, by the bytes of their manifests: ~13 of 10,000 parts with
# checksums (~3 MB of Python objects each), or ~1,000 of ~330 parts.
RESOLVED_CACHED_BYTES_MAX = 16 << 20


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


@dataclass(frozen=True, slots=True)
class Manifest:
    """A decoded manifest: the part list, and the object it was written for."""

    etag: str
    size: int
    extents: tuple[Extent, ...]
    parts: tuple[PartInfo, ...]


def decode_manifest(buf: bytes) -> Manifest:
    """A manifest's content, checked for consistency (its extents and parts add up)."""
    try:
        d = orjson.loads(buf)
        if not isinstance(d, dict) or d.get("format_version") != FORMAT_VERSION:
            raise ManifestError("a manifest of an unknown format")
        manifest = Manifest(
            d["etag"],
            d["size"],
            tuple(Extent.from_list(e) for e in d["ext"]),
            tuple(PartInfo.from_list(p) for p in d["parts"]),
        )
        if not manifest.parts or not (
            total_length(manifest.extents) == sum(part_stored_size(p) for p in manifest.parts)
            and manifest.size == sum(p.size for p in manifest.parts)
        ):
            raise ManifestError(
                f"a manifest whose extents and parts do not add up to {manifest.size} bytes"
            )
    except (orjson.JSONDecodeError, LookupError, TypeError, ValueError, AssertionError) as e:
        raise ManifestError(f"an undecodable manifest ({e!r})") from e
    return manifest


def check_manifest(record: ObjectRecord, manifest: Manifest) -> None:
    """Refuse a manifest that is not the part list of `record`."""
    where = f"manifest of {record.bucket}/{record.key} version {record.version_id}"
    if manifest.etag != record.etag:  # a copy keeps its source's ETag (and manifest)
        raise ManifestError(f"{where}: written for an object whose ETag is {manifest.etag!r}")
    if manifest.size != record.size:
        raise ManifestError(f"{where}: holds {manifest.size} bytes, the record {record.size}")


class ManifestReader:
    """Resolves records whose part list lives in a manifest; keeps the part lists of the
    manifests read last (up to RESOLVED_CACHED_BYTES_MAX of manifests)."""

    def __init__(self, handles: ReadHandleCache, window_entries: int) -> None:
        self._handles = handles
        self._window = window_entries
        self._resolved: OrderedDict[tuple[Extent, ...], Manifest] = OrderedDict()
        self._resolved_bytes = 0  # manifest bytes of the part lists in _resolved
        self._loading: dict[tuple[Extent, ...], asyncio.Future[Manifest]] = {}

    async def resolve(self, record: ObjectRecord) -> ObjectRecord:
        """The record with its extents and parts filled (itself when they are)."""
        if not record.unresolved:
            return record
        key = record.manifest
        manifest = self._resolved.get(key)
        if manifest is None:
            manifest = await self._load(key)
            if key not in self._resolved:  # (another reader may have put it there)
                self._resolved[key] = manifest
                self._resolved_bytes += total_length(key)
            while self._resolved_bytes > RESOLVED_CACHED_BYTES_MAX and len(self._resolved) > 1:
                evicted, _ = self._resolved.popitem(last=False)
                self._resolved_bytes -= total_length(evicted)
        self._resolved.move_to_end(key)
        check_manifest(record, manifest)
        return replace(record, extents=manifest.extents, parts=manifest.parts)

    async def _load(self, location: tuple[Extent, ...]) -> Manifest:
        """One read and decode of a manifest however many ask for it at once."""
        loading = self._loading.get(location)
        if loading is None:
            loading = asyncio.ensure_future(self._read_entries(location))
            self._loading[location] = loading
            loading.add_done_callback(lambda f: self._done_loading(location, f))
        return await asyncio.shield(loading)

    def _done_loading(
        self, location: tuple[Extent, ...], loading: asyncio.Future[Manifest]
    ) -> None:
        self._loading.pop(location, None)
        if not loading.cancelled():
            loading.exception()  # retrieved: every waiter may have gone

    async def _read_entries(self, location: tuple[Extent, ...]) -> Manifest:
        length = total_length(location)
        if not 0 < length <= MANIFEST_BYTES_MAX:
            raise ManifestError(f"a manifest of {length} bytes (at most {MANIFEST_BYTES_MAX})")
        spans = plan_read(location, 0, length - 1)
        MANIFEST_OPS.labels(op="read").inc()
        pieces = [piece async for piece in iter_spans(self._handles, spans, self._window)]
        return decode_manifest(b"".join(pieces))
