"""Manifests (pure logic): what a record with a manifest stores, and what a manifest must
hold to be accepted for its record. The write and read paths run against real processes
in tests/s3/test_multipart.py and tests/admin/test_fsck_du.py."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from blobstore.catalog.records import Extent, ObjectRecord, PartInfo
from blobstore.objects.manifest import (
    ManifestError,
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
    assert decode_manifest(record, encoded) == (EXTENTS, PARTS)
    unresolved = ObjectRecord.from_dict("b", "k", record.to_dict())
    assert decode_manifest(unresolved, encoded) == (EXTENTS, PARTS)
    copy = replace(unresolved, bucket="elsewhere", key="copy")  # CopyObject shares it
    assert decode_manifest(copy, encoded) == (EXTENTS, PARTS)

    def broken(**changes: object) -> bytes:
        d = orjson.loads(encoded)
        d.update(changes)
        return orjson.dumps(d)

    cases = {
        "ETag is 'other'": broken(etag="other"),
        "holds 4009": broken(ext=[[7, 0, 3, 3999, 1024], [9, 12, 12, 10, 1024]]),
        "do not add up": broken(parts=[[1, 4000, ""], [2, 11, ""]]),
        "unknown format": broken(format_version=2),
        "undecodable": encoded[:-3],
    }
    for words, buf in cases.items():
        with pytest.raises(ManifestError, match=words):
            decode_manifest(unresolved, buf)
    with pytest.raises(ManifestError, match="holds"):
        decode_manifest(replace(unresolved, size=4011), encoded)
