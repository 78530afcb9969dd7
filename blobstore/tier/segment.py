"""Segment files: many tiered objects packed into one large file on a tier.

The maintenance job packs the objects due for a tier into segments, written with
sequential writes, then reads each segment back and verifies it before any record
names it. A GET of a tiered object reads its bytes (or only the range asked for) at
the offset its record's tier location gives.

On-disk format (version 1)
--------------------------
::

    header  b"BSEG" | u16 version | u16 reserved | u64 reserved                 (16 bytes)
    objects the objects' bytes, back to back, as stored (no framing: a range read is
            one read at the object's offset plus the range's start)
    index   JSON: [[bucket, key, version id, offset, length, crc32c], ...]
    footer  u64 index offset | u32 index length | u32 index crc32c | u32 objects
            | b"BSGE"                                                          (24 bytes)

The index and every object carry a CRC32C; `verify` checks the magic numbers, the
version, the index and every object against them. A segment is only ever written
whole (its footer last) and never changed: a segment without a valid footer is a write
that did not finish, never named by a record, and removed as an orphan.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import crc32c

MAGIC = b"BSEG"
FOOTER_MAGIC = b"BSGE"
VERSION = 1
HEADER = struct.Struct(">4sHHQ")
FOOTER = struct.Struct(">QIII4s")
READ_CHUNK_BYTES = 4 << 20
INDEX_BYTES_MAX = 256 << 20  # a bound on what a reader believes a footer

assert HEADER.size == 16 and FOOTER.size == 24


class SegmentCorruptError(Exception):
    """A segment whose header, footer, index or an object fails its check."""


class OutputStream(Protocol):
    def write(self, data: bytes | memoryview, /) -> int | None: ...


class RandomAccess(Protocol):
    def size(self) -> int: ...

    def read_at(self, nbytes: int, offset: int, /) -> bytes: ...


@dataclass(frozen=True, slots=True)
class SegmentObject:
    """One object in a segment: which version, and where its bytes are."""

    bucket: str
    key: str
    version_id: str
    offset: int
    length: int
    crc32c: int

    def to_list(self) -> list[object]:
        return [self.bucket, self.key, self.version_id, self.offset, self.length, self.crc32c]

    @classmethod
    def from_list(cls, item: list[object]) -> SegmentObject:
        bucket, key, version_id, offset, length, crc = item
        if not (
            isinstance(bucket, str)
            and isinstance(key, str)
            and isinstance(version_id, str)
            and isinstance(offset, int)
            and isinstance(length, int)
            and isinstance(crc, int)
        ):
            raise SegmentCorruptError(f"bad index item {item!r}")
        return cls(bucket, key, version_id, offset, length, crc)


class SegmentWriter:
    """Writes one segment to `out` sequentially: `add` each object, then `finish`."""

    def __init__(self, out: OutputStream) -> None:
        self._out = out
        self._offset = 0
        self._objects: list[SegmentObject] = []
        self._finished = False
        self._current: tuple[str, str, str, int] | None = None
        self._crc = 0
        self._write(HEADER.pack(MAGIC, VERSION, 0, 0))

    @property
    def bytes_written(self) -> int:
        return self._offset

    @property
    def objects(self) -> list[SegmentObject]:
        return list(self._objects)

    def _write(self, data: bytes | memoryview) -> None:
        self._out.write(data)
        self._offset += len(data)

    def begin(self, bucket: str, key: str, version_id: str) -> None:
        """Start one object: its bytes follow with `write`, then `end`."""
        assert not self._finished, "segment already finished"
        assert self._current is None, "an object is under way"
        self._current = (bucket, key, version_id, self._offset)
        self._crc = 0

    def write(self, chunk: bytes | memoryview) -> None:
        assert self._current is not None, "no object begun"
        self._crc = crc32c.crc32c(chunk, self._crc)
        self._write(chunk)

    def end(self) -> SegmentObject:
        assert self._current is not None, "no object begun"
        bucket, key, version_id, start = self._current
        self._current = None
        item = SegmentObject(bucket, key, version_id, start, self._offset - start, self._crc)
        self._objects.append(item)
        return item

    def add(self, bucket: str, key: str, version_id: str, chunks: Iterable[bytes]) -> SegmentObject:
        """Append one object's bytes; where they went."""
        self.begin(bucket, key, version_id)
        for chunk in chunks:
            self.write(chunk)
        return self.end()

    def finish(self) -> int:
        """Write the index and the footer; the segment's size."""
        assert not self._finished, "segment already finished"
        assert self._current is None, "an object is under way"
        self._finished = True
        index = json.dumps([o.to_list() for o in self._objects], separators=(",", ":")).encode()
        index_offset = self._offset
        self._write(index)
        footer = FOOTER.pack(
            index_offset, len(index), crc32c.crc32c(index), len(self._objects), FOOTER_MAGIC
        )
        self._write(footer)
        return self._offset


def read_index(source: RandomAccess) -> list[SegmentObject]:
    """The segment's objects, from its footer and index (both checked)."""
    size = source.size()
    if size < HEADER.size + FOOTER.size:
        raise SegmentCorruptError(f"{size} bytes: too short for a segment")
    magic, version, _, _ = HEADER.unpack(source.read_at(HEADER.size, 0))
    if magic != MAGIC:
        raise SegmentCorruptError(f"bad magic {magic!r}")
    if version != VERSION:
        raise SegmentCorruptError(f"segment version {version}, this reader knows {VERSION}")
    footer = source.read_at(FOOTER.size, size - FOOTER.size)
    index_offset, index_length, index_crc, count, end_magic = FOOTER.unpack(footer)
    if end_magic != FOOTER_MAGIC:
        raise SegmentCorruptError("no footer: the segment was not finished")
    if index_length > INDEX_BYTES_MAX or index_offset + index_length != size - FOOTER.size:
        raise SegmentCorruptError(f"index at {index_offset}+{index_length} in {size} bytes")
    index = source.read_at(index_length, index_offset)
    if crc32c.crc32c(index) != index_crc:
        raise SegmentCorruptError("index checksum mismatch")
    objects = [SegmentObject.from_list(item) for item in json.loads(index)]
    if len(objects) != count:
        raise SegmentCorruptError(f"index holds {len(objects)} objects, footer says {count}")
    for item in objects:
        if item.offset < HEADER.size or item.offset + item.length > index_offset:
            raise SegmentCorruptError(f"object {item.key!r} out of the data area")
    return objects


def read_chunks(
    source: RandomAccess, offset: int, length: int, chunk_bytes: int = READ_CHUNK_BYTES
) -> Iterator[bytes]:
    """`length` bytes from `offset`, in reads of at most `chunk_bytes`."""
    end = offset + length
    while offset < end:
        data = source.read_at(min(chunk_bytes, end - offset), offset)
        if not data:
            raise SegmentCorruptError(f"segment ends at {offset}, {end - offset} bytes short")
        yield data
        offset += len(data)


def verify(source: RandomAccess) -> list[SegmentObject]:
    """Read the whole segment back: its objects, each checked against its CRC32C."""
    objects = read_index(source)
    for item in objects:
        crc = 0
        for chunk in read_chunks(source, item.offset, item.length):
            crc = crc32c.crc32c(chunk, crc)
        if crc != item.crc32c:
            raise SegmentCorruptError(
                f"object {item.bucket}/{item.key} ({item.version_id}) checksum mismatch"
            )
    return objects


@dataclass(frozen=True, slots=True)
class TierLocation:
    """Where a tiered object's bytes are: a tier, a segment on it, an offset, a length
    and the bytes' CRC32C. Kept in the object's record as text (`encode`)."""

    tier: str
    segment_id: str
    offset: int
    length: int
    crc32c: int

    def encode(self) -> str:
        return f"{self.tier}/{self.segment_id}@{self.offset}+{self.length}#{self.crc32c:08x}"

    @classmethod
    def parse(cls, text: str) -> TierLocation:
        try:
            where, _, crc = text.rpartition("#")
            place, _, span = where.rpartition("@")
            tier, _, segment_id = place.partition("/")
            offset, _, length = span.partition("+")
            location = cls(tier, segment_id, int(offset), int(length), int(crc, 16))
        except ValueError:
            raise SegmentCorruptError(f"bad tier location {text!r}") from None
        if not tier or not segment_id or location.offset < 0 or location.length < 0:
            raise SegmentCorruptError(f"bad tier location {text!r}")
        return location
