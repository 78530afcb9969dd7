"""Pure rules of CompleteMultipartUpload: which parts, in which order, the ETag, and the
object record they make."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence

from blobstore.catalog.records import ObjectRecord, PartInfo, PartRecord, UploadRecord
from blobstore.objects.config import PART_NUMBER_MAX
from blobstore.objects.errors import (
    EntityTooSmallError,
    InvalidPartListError,
    InvalidPartOrderError,
)


def normalise_etag(etag: str) -> str:
    """An ETag as stored: no quotes, lower case (clients echo it quoted)."""
    etag = etag.strip()
    if etag.startswith("W/"):
        etag = etag[2:]
    return etag.strip('"').lower()


def named_parts(requested: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """The (part number, ETag) pairs a CompleteMultipartUpload names, in ascending order
    (InvalidPartOrder otherwise). A number named again right after itself is one part,
    its last ETag standing: a client that resent a part while the first upload was in
    flight lists both answers, and the upload that finished last is the part (S3)."""
    if not requested:
        raise InvalidPartListError("CompleteMultipartUpload names no part")
    named: list[tuple[int, str]] = []
    for part_number, etag in requested:
        if not 1 <= part_number <= PART_NUMBER_MAX:
            raise InvalidPartListError(f"part number {part_number} out of range")
        previous = named[-1][0] if named else 0
        if part_number < previous:
            raise InvalidPartOrderError(f"part {part_number} after part {previous}")
        if part_number == previous:
            named[-1] = (part_number, etag)
        else:
            named.append((part_number, etag))
    return named


def choose_parts(
    requested: Sequence[tuple[int, str]],
    uploaded: Mapping[int, PartRecord],
    part_bytes_min: int,
) -> list[PartRecord]:
    """The uploaded parts the client named, checked the way S3 checks them."""
    chosen = []
    for part_number, etag in named_parts(requested):
        part = uploaded.get(part_number)
        if part is None or normalise_etag(etag) != normalise_etag(part.etag):
            raise InvalidPartListError(
                f"part {part_number} with ETag {etag!r} was not uploaded",
                PartNumber=part_number,
                ETag=normalise_etag(etag),
            )
        chosen.append(part)
    for part in chosen[:-1]:
        if part.size < part_bytes_min:
            raise EntityTooSmallError(
                f"part {part.part_number} is {part.size} bytes; the minimum is {part_bytes_min}",
                ProposedSize=part.size,
                MinSizeAllowed=part_bytes_min,
                PartNumber=part.part_number,
                ETag=part.etag,
            )
    return chosen


def multipart_etag(parts: Sequence[PartRecord]) -> str:
    """MD5 of the concatenated binary part MD5s, then "-" and the part count."""
    digest = hashlib.md5(b"".join(bytes.fromhex(part.etag) for part in parts)).hexdigest()
    return f"{digest}-{len(parts)}"


def completed_record(
    upload_id: str,
    bucket: str,
    upload: UploadRecord,
    parts: Sequence[PartRecord],
    checksums: dict[str, str],
) -> ObjectRecord:
    """The object a multipart upload completes into: the parts' extents stitched in
    order (no byte is copied), with the upload's metadata."""
    return ObjectRecord(
        bucket=bucket,
        key=upload.key,
        size=sum(p.size for p in parts),
        etag=multipart_etag(parts),
        last_modified=time.time(),
        content_type=upload.content_type,
        metadata=dict(upload.metadata),
        system_metadata=dict(upload.system_metadata),
        checksums=checksums,
        storage_class=upload.storage_class,
        extents=tuple(extent for part in parts for extent in part.extents),
        # Each part keeps its own checksums, COMPOSITE or FULL_OBJECT: a GET of one part
        # (?partNumber) answers with them, so the reader can check the bytes it got.
        parts=tuple(
            PartInfo(p.part_number, p.size, p.etag, dict(p.checksums), p.sse_salt) for p in parts
        ),
        owner=upload.owner,
        tags=dict(upload.tags),
        upload_id=upload_id,
    )
