"""Leaf pages of the object index and the page map that routes keys to them.

A page holds every version of every key in its range [lo, hi) (hi None: unbounded):

    line 0:   {"format_version":1,"lo":"a","hi":"m","keys":["a1","b7",...]}
    line i:   JSON array of key i's versions, newest first, in ObjectRecord.to_dict() form

Keys are sorted (code point order == UTF-8 byte order). JSON escapes newlines, so the
lines split without parsing, and a writer only decodes the lines of the keys it touches;
re-encoding a page is a join of the untouched lines. A page names its own range, so a
reader or writer that routed a key with a stale page map notices (the key is outside the
page's range, or the page is gone) and reloads the map.

The page map has two levels: a root (`RootMap`) lists shards by lower bound, and each
shard (`PageMap`) lists the pages of its key range in key order: `bounds[i]` is page i's
lower bound, its upper bound is bounds[i + 1] (the shard's `hi` for its last page).
Page bounds are shortest separators, not full keys; shard bounds are page bounds.

A page znode holds that text as a zlib stream (`pack_page`, deflated by ISA-L), or plain
as written before compression (`unpack_page` tells them apart by the first byte: plain
text starts with `{`, a zlib stream never does). Sizes that steer splits and merges are of the plain
text, so compression changes what ZooKeeper stores, not where pages split.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Self

import orjson
from isal import isal_zlib

from blobstore.catalog.config import PAGE_BYTES_HARD_MAX
from blobstore.catalog.naming import shortest_separator
from blobstore.catalog.records import FORMAT_VERSION, ObjectRecord


def new_page_id() -> str:
    return uuid.uuid4().hex[:20]


def _dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON (orjson: listings and page commits encode and decode whole
    pages, several times faster than the json module; the bytes are plain JSON)."""
    return orjson.dumps(value)


def pack_page(encoded: bytes, level: int) -> bytes:
    """A page's znode bytes: its encoding as a zlib stream deflated by ISA-L at `level`
    (1-3), or as is for 0. A page is packed on every commit of it: ISA-L's level 1
    deflates several times faster than zlib's, to a slightly smaller stream
    (docs/benchmarks/design-figures.md); any zlib inflater reads it."""
    return isal_zlib.compress(encoded, level) if level else encoded


def unpack_page(page_id: str, stored: bytes) -> bytes:
    """A page's encoding from its znode bytes, compressed or plain. Bounded: a stream
    that inflates past PAGE_BYTES_HARD_MAX, or is cut short, is refused."""
    if stored[:1] == b"{":
        return stored
    inflater = zlib.decompressobj()
    try:
        encoded = inflater.decompress(stored, PAGE_BYTES_HARD_MAX + 1)
    except zlib.error as e:
        raise ValueError(f"page {page_id}: not a page ({e})") from None
    if len(encoded) > PAGE_BYTES_HARD_MAX:
        raise ValueError(f"page {page_id}: inflates past {PAGE_BYTES_HARD_MAX} bytes")
    if not inflater.eof or inflater.unused_data:
        raise ValueError(f"page {page_id}: compressed stream truncated or followed by junk")
    return encoded


def encode_versions(versions: list[dict[str, Any]]) -> bytes:
    return _dumps(versions)


def decode_versions(line: bytes) -> list[dict[str, Any]]:
    value = orjson.loads(line)
    assert isinstance(value, list), type(value)
    return value


@dataclass(slots=True)
class IndexPage:
    """A decoded page. Mutable while a commit builds it; never shared once written."""

    page_id: str
    lo: str
    hi: str | None
    keys: list[str]
    lines: list[bytes]
    version: int = -1  # the znode version it was read at (-1: not written yet)
    # What readers decoded from this page, by key (`Catalog.get_object` keeps a key's
    # newest record here, at most LATEST_MEMO_MAX): a page in the read cache is shared
    # and never changed, so a hot key's GET decodes its record once. `set_line` clears it.
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert len(self.keys) == len(self.lines), (len(self.keys), len(self.lines))

    # ------------------------------------------------------------------ codec

    def encode(self) -> bytes:
        header = _dumps(
            {"format_version": FORMAT_VERSION, "lo": self.lo, "hi": self.hi, "keys": self.keys}
        )
        return b"\n".join([header, *self.lines])

    @classmethod
    def decode(cls, page_id: str, buf: bytes, version: int) -> Self:
        """From a page's znode bytes (compressed or plain)."""
        lines = unpack_page(page_id, buf).split(b"\n")
        header = orjson.loads(lines[0])
        if header.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"page {page_id}: unknown format_version {header.get('format_version')!r}"
            )
        keys = header["keys"]
        body = lines[1:]
        if len(keys) != len(body):
            raise ValueError(f"page {page_id}: {len(keys)} keys but {len(body)} version lines")
        return cls(page_id, header["lo"], header["hi"], keys, body, version)

    def encoded_size(self) -> int:
        header = len(_dumps({"format_version": FORMAT_VERSION, "lo": self.lo, "hi": self.hi}))
        keys = sum(len(k.encode("utf-8")) + 3 for k in self.keys) + 10
        return header + keys + sum(len(line) + 1 for line in self.lines)

    # ------------------------------------------------------------------ access

    def contains(self, key: str) -> bool:
        return self.lo <= key and (self.hi is None or key < self.hi)

    def copy(self) -> IndexPage:
        return IndexPage(
            self.page_id, self.lo, self.hi, list(self.keys), list(self.lines), self.version
        )

    def versions(self, key: str) -> list[dict[str, Any]]:
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            return decode_versions(self.lines[i])
        return []

    def set_versions(self, key: str, versions: list[dict[str, Any]]) -> None:
        self.set_line(key, encode_versions(versions) if versions else b"")

    def set_line(self, key: str, line: bytes) -> None:
        """Store a key's encoded version line; an empty line removes the key."""
        assert self.contains(key), (key, self.lo, self.hi)
        self.memo.clear()
        i = bisect.bisect_left(self.keys, key)
        present = i < len(self.keys) and self.keys[i] == key
        if not line:
            if present:
                del self.keys[i]
                del self.lines[i]
            return
        if present:
            self.lines[i] = line
        else:
            self.keys.insert(i, key)
            self.lines.insert(i, line)

    def decode_lines(self, start: int, end: int) -> list[list[dict[str, Any]]]:
        """The versions of keys start..end-1, decoded in one call."""
        if start >= end:
            return []
        value = orjson.loads(b"[" + b",".join(self.lines[start:end]) + b"]")
        assert len(value) == end - start, (len(value), start, end)
        return value  # type: ignore[no-any-return]

    def records(self, bucket: str, index: int) -> list[ObjectRecord]:
        key = self.keys[index]
        return [
            ObjectRecord.from_dict(bucket, key, d, is_latest=(n == 0))
            for n, d in enumerate(decode_versions(self.lines[index]))
        ]

    # ------------------------------------------------------------------ split / merge

    def split(self, target_bytes: int) -> list[IndexPage]:
        """Cut into consecutive pages of about target_bytes each; the first keeps this
        page's id (and version, for the CAS), the others get new ids."""
        cuts = []
        acc = 0
        sizes = self._entry_sizes()
        for i, size in enumerate(sizes):
            acc += size
            if acc >= target_bytes and i < len(sizes) - 1:
                cuts.append(i + 1)
                acc = 0
        return self._cut(cuts)

    def append_split(self, before: IndexPage, fill_bytes: int) -> list[IndexPage] | None:
        """The split for keys appended after a page's last key (sequential names:
        times, counters, at the bucket's end or under a prefix that sorts before
        others), or None when this page is not that case.

        `before` (the same page as read) has had keys added only behind the point where
        the left piece would end (after its last key, or among its last few when two
        writers' names arrive slightly out of order). A split in halves would leave every
        left half half full forever, since no key lands there again, and keep the page
        that takes every commit at half a page or more. Instead the left page is filled
        to `fill_bytes` (room left for new versions of its keys) and the rest goes
        right: the pages behind stay nearly full, and the one written on every commit
        starts small (as B-tree indexes split their rightmost page). The right page
        keeps this page's id: the commits queued for it, in this process and others,
        still find their keys there (with the left page keeping it, each would be
        routed again through a fresh page map)."""
        n = len(before.keys)
        if n == 0 or len(self.keys) <= n:
            return None
        if self.keys[:n] == before.keys:
            first_new = len(self.keys)  # appended after the last key: cut anywhere
        else:
            old = set(before.keys)
            first_new = next(i for i, key in enumerate(self.keys) if key not in old)
        sizes = self._entry_sizes()
        acc = 0
        for i, size in enumerate(sizes):
            acc += size
            if acc > fill_bytes:
                # Not when a new key among old ones would go left, nor when the tail
                # alone would need splitting again (a huge batch).
                if i == 0 or i > first_new or sum(sizes[i:]) > fill_bytes:
                    return None
                return self._cut([i], keep=-1)
        return None

    def insertion_split(self, before: IndexPage, fill_bytes: int) -> list[IndexPage] | None:
        """The split for names inserted in order at one point inside a page (sequential
        names under a prefix that sorts between other keys), or None when this page is
        not that case.

        `before` (the same page as read) has had two or more keys inserted, all between
        the same two of its keys (one key alone shows no order: random names would cut
        pages anywhere). The cut goes right after them: the piece holding the insertion
        point keeps this page's id, so the commits queued for it stay, and from then on
        the next names come after its last key, where `append_split` takes over; the
        keys behind the point go to a page of their own that sequential names never
        reach. Halves would cut wherever the middle is and keep moving the hot range
        to new pages. When the keys before the point and the run do not fit one page
        together, they are cut apart too (three pieces, the run's keeping the id)."""
        n = len(before.keys)
        inserted = len(self.keys) - n
        if n == 0 or inserted < 2:
            return None
        keys = self.keys
        start = 0
        while start < n and keys[start] == before.keys[start]:
            start += 1
        end = start + inserted
        if end >= len(keys) or keys[end:] != before.keys[start:]:
            return None  # appended after the last key, or inserted at several points
        sizes = self._entry_sizes()
        if sum(sizes[:end]) <= fill_bytes:
            return self._cut([end], keep=0)
        if start > 0 and sum(sizes[start:end]) <= fill_bytes:
            return self._cut([start, end], keep=1)
        return None

    def _entry_sizes(self) -> list[int]:
        """About what each key adds to the encoded page (its line, its key in the header)."""
        return [len(line) + len(key) + 4 for key, line in zip(self.keys, self.lines, strict=True)]

    def _cut(self, cuts: list[int], keep: int = 0) -> list[IndexPage]:
        """Pages holding keys [0, cuts[0]), [cuts[0], cuts[1]), ... of this one; the
        piece at `keep` keeps this page's id and version (for the CAS), the others get
        new ids."""
        pieces: list[IndexPage] = []
        start = 0
        for cut in cuts:
            pieces.append(self._slice(start, cut))
            start = cut
        pieces.append(self._slice(start, len(self.keys)))
        # Bounds between pieces: shortest separators; the outer bounds stay.
        for left, right in zip(pieces, pieces[1:], strict=False):
            sep = shortest_separator(left.keys[-1], right.keys[0])
            left.hi = sep
            right.lo = sep
        pieces[0].lo = self.lo
        pieces[-1].hi = self.hi
        kept = pieces[keep]
        for piece in pieces:
            if piece is kept:
                piece.page_id, piece.version = self.page_id, self.version
            else:
                piece.page_id, piece.version = new_page_id(), -1
        return pieces

    def _slice(self, start: int, end: int) -> IndexPage:
        return IndexPage("", self.lo, self.hi, self.keys[start:end], self.lines[start:end])

    def merged_with(self, right: IndexPage) -> IndexPage:
        """This page followed by its right neighbour, under this page's id."""
        assert self.hi is not None and self.hi == right.lo, (self.hi, right.lo)
        return IndexPage(
            self.page_id,
            self.lo,
            right.hi,
            self.keys + right.keys,
            self.lines + right.lines,
            self.version,
        )

    def check(self) -> None:
        """Invariants, checked before a page is written."""
        keys = self.keys
        if not all(map(operator.lt, keys, itertools.islice(keys, 1, None))):
            raise AssertionError(("keys out of order", self.page_id))
        if self.keys:
            assert self.contains(self.keys[0]), (self.page_id, self.lo, self.keys[0])
            assert self.contains(self.keys[-1]), (self.page_id, self.hi, self.keys[-1])


@dataclass(frozen=True, slots=True)
class PageMap:
    """One shard of a bucket's page map: the pages of the key range [lo, hi) in key
    order. `bounds[i]` is page i's lower bound (bounds[0] == lo), its upper bound is
    bounds[i + 1], or `hi` for the last page. A shard names its own range, so a key
    routed with a stale root map lands on a shard that does not cover it, and the
    reader reloads the root."""

    bounds: tuple[str, ...]  # lower bound of each page; bounds[0] == lo
    page_ids: tuple[str, ...]
    version: int = -1
    lo: str = ""
    hi: str | None = None
    shard_id: str = ""

    def __post_init__(self) -> None:
        assert len(self.bounds) == len(self.page_ids) >= 1, (len(self.bounds), len(self.page_ids))
        assert self.bounds[0] == self.lo, (self.bounds[0], self.lo)

    def contains(self, key: str) -> bool:
        return self.lo <= key and (self.hi is None or key < self.hi)

    def index_of(self, key: str) -> int:
        return bisect.bisect_right(self.bounds, key) - 1

    def page_for(self, key: str) -> str:
        return self.page_ids[self.index_of(key)]

    def position(self, page_id: str) -> int:
        """Index of a page, or -1 when this map does not list it."""
        try:
            return self.page_ids.index(page_id)
        except ValueError:
            return -1

    def upper_bound(self, index: int) -> str | None:
        return self.bounds[index + 1] if index + 1 < len(self.bounds) else self.hi

    def replace(self, index: int, pages: list[IndexPage], remove: int = 1) -> PageMap:
        """A map where entries index..index+remove-1 are replaced by `pages`."""
        bounds = list(self.bounds)
        ids = list(self.page_ids)
        bounds[index : index + remove] = [p.lo for p in pages]
        ids[index : index + remove] = [p.page_id for p in pages]
        return PageMap(tuple(bounds), tuple(ids), self.version, self.lo, self.hi, self.shard_id)

    def split(self, pieces: int) -> list[PageMap]:
        """Cut into `pieces` shards of about equal page counts, at page bounds; the
        first keeps this shard's id and version (for the CAS), the others get new ids."""
        count = len(self.page_ids)
        pieces = max(1, min(pieces, count))
        cuts = [count * n // pieces for n in range(pieces + 1)]
        shards: list[PageMap] = []
        for n, (start, end) in enumerate(zip(cuts, cuts[1:], strict=False)):
            shards.append(
                PageMap(
                    self.bounds[start:end],
                    self.page_ids[start:end],
                    self.version if n == 0 else -1,
                    self.bounds[start],
                    self.bounds[end] if end < count else self.hi,
                    self.shard_id if n == 0 else new_page_id(),
                )
            )
        return shards

    def encode(self) -> bytes:
        return _dumps(
            {
                "format_version": FORMAT_VERSION,
                "lo": self.lo,
                "hi": self.hi,
                "bounds": list(self.bounds),
                "pages": list(self.page_ids),
            }
        )

    @classmethod
    def decode(cls, buf: bytes, version: int, shard_id: str = "") -> Self:
        d = orjson.loads(buf)
        if d.get("format_version") != FORMAT_VERSION or "pages" not in d:
            raise ValueError(f"page map: unknown format_version {d.get('format_version')!r}")
        return cls(
            tuple(d["bounds"]),
            tuple(d["pages"]),
            version,
            d.get("lo", ""),
            d.get("hi"),
            shard_id,
        )


ROOT_FORMAT_VERSION = 2


@dataclass(frozen=True, slots=True)
class RootMap:
    """The top of a bucket's page map: shard lower bounds -> shard ids, in key order
    (bounds[0] is ""). Each shard (`PageMap`) lists the pages of its range, so a bucket
    of any size is routed through two small znodes instead of one large one."""

    bounds: tuple[str, ...]
    shard_ids: tuple[str, ...]
    version: int = -1

    def __post_init__(self) -> None:
        assert len(self.bounds) == len(self.shard_ids) >= 1, (
            len(self.bounds),
            len(self.shard_ids),
        )
        assert self.bounds[0] == "", self.bounds[0]

    def shard_for(self, key: str) -> str:
        return self.shard_ids[bisect.bisect_right(self.bounds, key) - 1]

    def upper_bound(self, index: int) -> str | None:
        return self.bounds[index + 1] if index + 1 < len(self.bounds) else None

    def position(self, shard_id: str) -> int:
        try:
            return self.shard_ids.index(shard_id)
        except ValueError:
            return -1

    def replace(self, index: int, shards: list[PageMap]) -> RootMap:
        bounds = list(self.bounds)
        ids = list(self.shard_ids)
        bounds[index : index + 1] = [s.lo for s in shards]
        ids[index : index + 1] = [s.shard_id for s in shards]
        return RootMap(tuple(bounds), tuple(ids), self.version)

    def encode(self) -> bytes:
        return _dumps(
            {
                "format_version": ROOT_FORMAT_VERSION,
                "bounds": list(self.bounds),
                "shards": list(self.shard_ids),
            }
        )

    @staticmethod
    def is_single_level(buf: bytes) -> bool:
        """A page map written before maps were sharded (one znode listing every page)."""
        d = orjson.loads(buf)
        return d.get("format_version") == FORMAT_VERSION and "pages" in d

    @classmethod
    def decode(cls, buf: bytes, version: int) -> Self:
        d = orjson.loads(buf)
        if d.get("format_version") != ROOT_FORMAT_VERSION:
            raise ValueError(f"root page map: unknown format_version {d.get('format_version')!r}")
        return cls(tuple(d["bounds"]), tuple(d["shards"]), version)
