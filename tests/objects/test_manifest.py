"""Manifests (pure logic): what a record with a manifest stores, and what a manifest must
hold to be accepted for its record. The write and read paths run against real processes
in tests/s3/test_multipart.py and tests/admin/test_fsck_du.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, cast

import orjson
import pytest

from blobstore.catalog import Catalog
from blobstore.catalog.config import CatalogConfig
from blobstore.catalog.records import Extent, ObjectRecord, PartInfo
from blobstore.objects.manifest import (
    Manifest,
    ManifestError,
    check_manifest,
    decode_manifest,
    encode_manifest,
    part_list_bytes,
)

EXTENTS = (Extent(7, 0, 3, 4000, 1024), Extent(9, 12, 12, 10, 1024))
PARTS = (PartInfo(1, 4000, "", {"CRC32": "AAAAAA=="}), PartInfo(2, 10, ""))
MANIFEST = (Extent(11, 5, 5, 300, 1024),)


def resolved() -> ObjectRecord:
    return ObjectRecord(
        bucket="b",
        key="k",
        version_id="v1",
        size=4010,
        etag="abc-2",
        extents=EXTENTS,
        parts=PARTS,
        manifest=MANIFEST,
    )


def test_a_record_with_a_manifest_stores_the_manifest_not_the_part_list() -> None:
    record = resolved()
    stored = record.to_dict()
    assert stored["mf"] == [[11, 5, 5, 300, 1024]]
    assert "ext" not in stored and "parts" not in stored
    read = ObjectRecord.from_dict("b", "k", stored)
    assert read.manifest == MANIFEST and read.extents == () and read.parts == ()
    assert read.unresolved and not record.unresolved
    # Resolved or not, it is the same stored version (compare-and-swap of tags works).
    assert read.same_version(record)
    assert ObjectRecord.decode(record.encode()).manifest == MANIFEST
    # Without a manifest nothing changes: the part list is inline.
    inline = replace(record, manifest=())
    assert "mf" not in inline.to_dict() and inline.to_dict()["parts"]
    assert part_list_bytes(inline) == len(
        orjson.dumps([[e.to_list() for e in EXTENTS], [p.to_list() for p in PARTS]])
    )


def test_a_manifest_round_trips_and_is_checked_against_its_record() -> None:
    record = resolved()
    encoded = encode_manifest(record)
    manifest = decode_manifest(encoded)
    assert manifest == Manifest("abc-2", 4010, EXTENTS, PARTS)
    unresolved = ObjectRecord.from_dict("b", "k", record.to_dict())
    check_manifest(unresolved, manifest)
    check_manifest(replace(unresolved, bucket="elsewhere", key="copy"), manifest)  # a copy
    with pytest.raises(ManifestError, match="ETag is 'abc-2'"):
        check_manifest(replace(unresolved, etag="other"), manifest)
    with pytest.raises(ManifestError, match="holds 4010 bytes, the record 4011"):
        check_manifest(replace(unresolved, size=4011), manifest)

    def broken(**changes: object) -> bytes:
        d = orjson.loads(encoded)
        d.update(changes)
        return orjson.dumps(d)

    def without(name: str) -> bytes:
        d = orjson.loads(encoded)
        del d[name]
        return orjson.dumps(d)

    cases = {
        "do not add up": broken(ext=[[7, 0, 3, 3999, 1024], [9, 12, 12, 10, 1024]]),
        "do not add up to 4010": broken(parts=[[1, 4000, ""], [2, 11, ""]]),
        "unknown format": broken(format_version=2),
        "undecodable": encoded[:-3],
        "IndexError": broken(parts=[[1, 4010]]),
        "KeyError": without("etag"),
        "TypeError": broken(parts=[[1, "4010", ""]]),
    }
    for words, buf in cases.items():
        with pytest.raises(ManifestError, match=words):
            decode_manifest(buf)


def test_a_swap_that_would_lose_a_part_list_change_is_refused() -> None:
    """Compaction and tiering swap records: for one naming a manifest, a swap that changes
    only the in-memory part list would store nothing new and report success."""
    catalog = Catalog(cast(Any, _NoZooKeeper()), CatalogConfig())
    record = replace(resolved(), bucket="bucket-b")
    moved = replace(record, extents=(Extent(12, 0, 3, 4000, 1024), EXTENTS[1]))
    tiered = replace(record, extents=(), tier_location="cold")
    for new in (moved, tiered):
        with pytest.raises(ValueError, match="only with a new manifest"):
            asyncio.run(catalog.swap_object(record, new))


class _NoZooKeeper:
    """Enough of a ZooKeeper client to build a Catalog that is never started."""

    def add_state_listener(self, _listener: object) -> None:
        pass
