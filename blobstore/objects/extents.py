"""Where an object's bytes live, as pure arithmetic over extents.

An object is the concatenation of its extents. An extent is a run of consecutive entries
of one ledger: every entry holds `entry_size` payload bytes except the last, which holds
the rest (`length - (entry_count - 1) * entry_size`). Multipart objects concatenate the
extents of their parts, so neighbouring extents may have different entry sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from blobstore.catalog.records import Extent


def check_extent(extent: Extent) -> None:
    """Assert the shape of an extent (programmer error if it does not hold)."""
    entry_count = extent.last_entry - extent.first_entry + 1
    assert extent.first_entry >= 0, extent
    assert entry_count >= 1, extent
    assert extent.entry_size >= 1, extent
    assert (entry_count - 1) * extent.entry_size < extent.length, extent
    assert extent.length <= entry_count * extent.entry_size, extent


@dataclass(frozen=True, slots=True)
class EntrySpan:
    """Entries first..last of one ledger to read; drop `skip_bytes` from the first entry's
    payload and keep `byte_count` bytes in all."""

    ledger_id: int
    first_entry: int
    last_entry: int
    skip_bytes: int
    byte_count: int

    def __post_init__(self) -> None:
        assert self.first_entry <= self.last_entry, self
        assert self.skip_bytes >= 0, self
        assert self.byte_count >= 1, self


def total_length(extents: Sequence[Extent]) -> int:
    return sum(extent.length for extent in extents)


def plan_read(extents: Sequence[Extent], start: int, end: int) -> list[EntrySpan]:
    """The entry spans holding bytes start..end (inclusive) of the object."""
    assert 0 <= start <= end < total_length(extents), (start, end, total_length(extents))
    spans: list[EntrySpan] = []
    offset = 0  # object offset of the current extent's first byte
    for extent in extents:
        extent_end = offset + extent.length - 1
        if extent_end >= start and offset <= end:
            local_start = max(start, offset) - offset
            local_end = min(end, extent_end) - offset
            first_index = local_start // extent.entry_size
            last_index = local_end // extent.entry_size
            spans.append(
                EntrySpan(
                    ledger_id=extent.ledger_id,
                    first_entry=extent.first_entry + first_index,
                    last_entry=extent.first_entry + last_index,
                    skip_bytes=local_start - first_index * extent.entry_size,
                    byte_count=local_end - local_start + 1,
                )
            )
        if extent_end >= end:
            break
        offset += extent.length
    return spans


def slice_extents(extents: Sequence[Extent], start: int, end: int) -> tuple[Extent, ...] | None:
    """Extents holding exactly bytes start..end (inclusive) of the object, sharing its
    entries, or None when a cut falls inside an entry (the bytes must then be copied)."""
    assert 0 <= start <= end < total_length(extents), (start, end, total_length(extents))
    sliced: list[Extent] = []
    offset = 0
    for extent in extents:
        extent_end = offset + extent.length - 1
        if extent_end >= start and offset <= end:
            local_start = max(start, offset) - offset
            local_end = min(end, extent_end) - offset
            if local_start % extent.entry_size != 0:
                return None
            if local_end != extent.length - 1 and (local_end + 1) % extent.entry_size != 0:
                return None
            first_index = local_start // extent.entry_size
            last_index = local_end // extent.entry_size
            piece = Extent(
                ledger_id=extent.ledger_id,
                first_entry=extent.first_entry + first_index,
                last_entry=extent.first_entry + last_index,
                length=local_end - local_start + 1,
                entry_size=extent.entry_size,
            )
            check_extent(piece)
            sliced.append(piece)
        if extent_end >= end:
            break
        offset += extent.length
    return tuple(sliced)
