"""Pure logic of the object layer: mapping byte ranges to entries, slicing extents for
shared copies, multipart part choice and ETags, configuration."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

from blobstore.catalog.records import Extent, PartRecord
from blobstore.objects.config import ObjectStoreConfig
from blobstore.objects.errors import (
    EntityTooSmallError,
    InvalidPartListError,
    InvalidPartOrderError,
)
from blobstore.objects.extents import plan_read, slice_extents, total_length
from blobstore.objects.multipart import choose_parts, multipart_etag, normalise_etag
from blobstore.runtime.errors import UsageError

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "20261120"))


def layout(
    lengths_and_sizes: list[tuple[int, int]],
) -> tuple[list[Extent], bytes, dict[tuple[int, int], bytes]]:
    """Extents over fake ledgers, the object bytes, and the payload of every entry."""
    rng = random.Random(SEED)
    extents = []
    entries: dict[tuple[int, int], bytes] = {}
    data = b""
    for ledger_id, (length, entry_size) in enumerate(lengths_and_sizes, start=10):
        first = rng.randrange(0, 50)
        payload = rng.randbytes(length)
        data += payload
        count = (length + entry_size - 1) // entry_size
        for index in range(count):
            entries[(ledger_id, first + index)] = payload[
                index * entry_size : (index + 1) * entry_size
            ]
        extents.append(Extent(ledger_id, first, first + count - 1, length, entry_size))
    return extents, data, entries


def read(
    extents: list[Extent], entries: dict[tuple[int, int], bytes], start: int, end: int
) -> bytes:
    out = b""
    for span in plan_read(extents, start, end):
        pieces = b"".join(
            entries[(span.ledger_id, e)] for e in range(span.first_entry, span.last_entry + 1)
        )
        out += pieces[span.skip_bytes : span.skip_bytes + span.byte_count]
    return out


def test_plan_read_matches_every_range() -> None:
    extents, data, entries = layout([(100, 16), (7, 4), (64, 16), (1, 8)])
    assert total_length(extents) == len(data)
    for start in range(len(data)):
        for end in range(start, len(data), 3):
            assert read(extents, entries, start, end) == data[start : end + 1], (start, end)


def test_slice_extents_shares_only_aligned_cuts() -> None:
    extents, data, entries = layout([(100, 16), (64, 16)])
    shared = slice_extents(extents, 16, 100 + 31)
    assert shared is not None
    assert read(list(shared), entries, 0, total_length(shared) - 1) == data[16:132]
    assert slice_extents(extents, 0, 99) is not None  # the whole first extent (short last entry)
    assert slice_extents(extents, 1, 40) is None  # starts inside an entry
    assert slice_extents(extents, 0, 40) is None  # ends inside an entry
    rng = random.Random(SEED)
    for _ in range(200):
        start, end = sorted((rng.randrange(len(data)), rng.randrange(len(data))))
        piece = slice_extents(extents, start, end)
        if piece is not None:
            assert read(list(piece), entries, 0, total_length(piece) - 1) == data[start : end + 1]


def part(number: int, body: bytes) -> PartRecord:
    return PartRecord(number, len(body), hashlib.md5(body).hexdigest())


def test_choose_parts_and_etag() -> None:
    parts = {1: part(1, b"a" * 10), 2: part(2, b"b" * 10), 3: part(3, b"c")}
    chosen = choose_parts([(1, f'"{parts[1].etag}"'), (3, parts[3].etag.upper())], parts, 10)
    assert [p.part_number for p in chosen] == [1, 3]
    expected = hashlib.md5(bytes.fromhex(parts[1].etag) + bytes.fromhex(parts[3].etag)).hexdigest()
    assert multipart_etag(chosen) == f"{expected}-2"
    with pytest.raises(InvalidPartOrderError):
        choose_parts([(2, parts[2].etag), (1, parts[1].etag)], parts, 10)
    with pytest.raises(InvalidPartListError):
        choose_parts([(1, "0" * 32)], parts, 10)
    with pytest.raises(InvalidPartListError):
        choose_parts([(4, parts[1].etag)], parts, 10)
    with pytest.raises(InvalidPartListError):
        choose_parts([], parts, 10)
    with pytest.raises(EntityTooSmallError):
        choose_parts([(1, parts[1].etag), (2, parts[2].etag)], parts, 11)
    assert normalise_etag('W/"ABC"') == "abc"


def test_config_from_env_validates() -> None:
    config = ObjectStoreConfig.from_env({"BLOBSTORE_ENTRY_SIZE_BYTES": "16384"})
    assert config.entry_size_bytes == 16384
    assert config.append_window_entries == 256
    with pytest.raises(UsageError, match="BLOBSTORE_ENTRY_SIZE_BYTES"):
        ObjectStoreConfig.from_env({"BLOBSTORE_ENTRY_SIZE_BYTES": "lots"})
    with pytest.raises(UsageError, match="ack_quorum"):
        ObjectStoreConfig(ensemble_size=2, write_quorum=3, ack_quorum=2)
    with pytest.raises(UsageError, match="ENTRY_SIZE"):
        ObjectStoreConfig(entry_size_bytes=0)
    audit = ObjectStoreConfig.from_env(
        {"BLOBSTORE_AUDIT_INTERVAL_S": "0", "BLOBSTORE_LOST_BOOKIE_DELAY_S": "600"}
    )
    assert (audit.audit_interval_s, audit.lost_bookie_delay_s) == (0.0, 600.0)
    with pytest.raises(UsageError, match="BLOBSTORE_LOST_BOOKIE_DELAY_S"):
        ObjectStoreConfig(lost_bookie_delay_s=-1)
    with pytest.raises(UsageError, match="BLOBSTORE_AUDIT_INTERVAL_S"):
        ObjectStoreConfig(audit_interval_s=-5)
    assert ObjectStoreConfig().recovery_rate_mb_s == 50.0
    limited = ObjectStoreConfig.from_env({"BLOBSTORE_RECOVERY_RATE_MB_S": "0"})
    assert limited.recovery_rate_mb_s == 0.0
    with pytest.raises(UsageError, match="BLOBSTORE_RECOVERY_RATE_MB_S"):
        ObjectStoreConfig(recovery_rate_mb_s=-1)
