"""Multipart uploads: create, upload part (and part copy), complete, abort, list parts,
list uploads. Parts stream into ledgers like PutObject; Complete stitches the parts'
extents into one object record without copying a byte."""

from __future__ import annotations

import time
from collections.abc import Mapping
from urllib.parse import quote

from starlette.responses import Response

from blobstore.catalog.errors import (
    DeleteMarkerError,
    InvalidPartError,
    NoSuchKeyError,
    NoSuchUploadError,
    RecordTooLargeError,
)
from blobstore.catalog.records import (
    CONTENT_TYPE_DEFAULT,
    ObjectRecord,
    PartRecord,
    UploadRecord,
)
from blobstore.objects import VerifiedBody, WrittenData
from blobstore.objects.errors import InvalidPartListError
from s3api import xml_requests, xml_responses
from s3api.checksums import (
    ALGORITHMS,
    COMPOSITE,
    DEFAULT_ALGORITHM,
    FULL_OBJECT,
    combine_full_object,
    composite_checksum,
    decode_checksum_value,
    header_name,
    mismatch_error,
    new_checksum,
    parse_algorithm,
    parse_checksum_type,
)
from s3api.conditions import parse_write_conditions
from s3api.errors import S3Error, to_s3_error
from s3api.handlers import encryption, object_lock
from s3api.handlers._private import quote_etag, written_version_headers, xml_response
from s3api.handlers.context import S3Context
from s3api.handlers.objects import (
    body_checksums,
    checksum_headers,
    load_copy_source,
    parse_tagging_header,
    require_length,
    storage_class,
    system_metadata,
    written_object,
)
from s3api.limits import (
    OBJECT_SIZE_MAX,
    PART_SIZE_MAX,
    parse_max_count,
    parse_part_number,
    user_metadata,
    validate_key,
)
from s3api.ranges import parse_copy_source_range
from s3api.xml_requests import CompletedPart


async def _upload(ctx: S3Context) -> UploadRecord:
    upload_id = ctx.query.get("uploadId", "")
    if not upload_id:
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    upload = await ctx.store.catalog.get_upload(ctx.bucket, upload_id)
    if upload.key != ctx.key:
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return upload


async def create_multipart_upload(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket = await ctx.authorized_bucket()
    owner, acl = written_object(ctx, bucket)
    spec = encryption.write_spec(ctx, bucket)
    sse = (await ctx.store.new_sse(spec, ctx.bucket, ctx.key))[0] if spec.mode else None
    algorithm_text = ctx.headers.get("x-amz-checksum-algorithm")
    algorithm = parse_algorithm(algorithm_text) if algorithm_text else None
    checksum_type = parse_checksum_type(algorithm, ctx.headers.get("x-amz-checksum-type"))
    lock = object_lock.parse_lock_headers(ctx.headers, time.time())
    object_lock.check_lock_request(ctx, bucket, lock, None)
    retention = lock.retention
    upload = await ctx.store.catalog.create_upload(
        UploadRecord(
            bucket=ctx.bucket,
            key=ctx.key,
            initiated=time.time(),
            owner=owner,
            content_type=ctx.headers.get("content-type") or CONTENT_TYPE_DEFAULT,
            metadata=user_metadata(ctx.headers.items()),
            system_metadata=system_metadata(ctx) | acl,
            storage_class=storage_class(ctx),
            checksum_algorithm=algorithm or "",
            checksum_type=checksum_type or "",
            tags=parse_tagging_header(ctx.headers.get("x-amz-tagging")),
            lock_mode=retention.mode if retention is not None else "",
            lock_until=retention.until if retention is not None else 0.0,
            legal_hold=bool(lock.legal_hold),
            sse=sse,
        )
    )
    headers = encryption.spec_headers(spec)
    if algorithm:
        headers["x-amz-checksum-algorithm"] = algorithm
        headers["x-amz-checksum-type"] = checksum_type or COMPOSITE
    return xml_response(
        xml_responses.initiate_multipart_upload_result(ctx.bucket, ctx.key, upload.upload_id),
        headers=headers,
    )


async def upload_part(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    require_length(ctx)
    part_number = parse_part_number(ctx.query.get("partNumber"))
    await ctx.authorized_bucket()
    upload = await _upload(ctx)
    extra = [upload.checksum_algorithm] if upload.checksum_algorithm else []
    # An upload created without an algorithm: each part gets S3's default checksum, and
    # the object the combination of them (`complete_multipart_upload`).
    reader = ctx.payload(PART_SIZE_MAX, extra_algorithms=extra, default_algorithm=DEFAULT_ALGORITHM)
    declared = reader.expect.algorithm
    if upload.checksum_algorithm and declared and declared != upload.checksum_algorithm:
        raise checksum_type_mismatch(upload.checksum_algorithm, declared)

    async def finish(data: WrittenData) -> VerifiedBody:
        verdict = body_checksums(reader)
        checksums = {a: v for a, v in verdict.checksums.items() if a != "type"}
        return VerifiedBody(checksums, verdict.md5_hex)

    given_key = encryption.customer_key(ctx)
    part = await ctx.store.upload_part(
        ctx.bucket,
        upload.upload_id,
        part_number,
        aiter(reader),
        finish=finish,
        compute_md5=False,
        customer_key=given_key,
    )
    headers = {"ETag": quote_etag(part.etag)}
    headers.update(checksum_headers(part.checksums))
    headers.update(encryption.response_headers(upload.sse, given_key))
    return Response(b"", headers=headers)


async def upload_part_copy(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    part_number = parse_part_number(ctx.query.get("partNumber"))
    await ctx.authorized_bucket()
    upload = await _upload(ctx)
    _, source = await load_copy_source(ctx)
    byte_range = parse_copy_source_range(ctx.headers.get("x-amz-copy-source-range"), source.size)
    first, last = (byte_range.first, byte_range.last) if byte_range else (0, source.size - 1)
    if last - first + 1 > PART_SIZE_MAX:
        raise S3Error("EntityTooLarge", ProposedSize=last - first + 1, MaxSizeAllowed=PART_SIZE_MAX)
    # The upload's algorithm, or S3's default: the copied bytes are read (for the part's
    # MD5) even when the part shares the source's entries.
    checksum = new_checksum(upload.checksum_algorithm or DEFAULT_ALGORITHM)

    async def finish(data: WrittenData) -> VerifiedBody:
        return VerifiedBody({checksum.algorithm: checksum.b64()})

    given_key = encryption.customer_key(ctx)
    if source.size == 0:
        part = PartRecord(
            part_number,
            0,
            "d41d8cd98f00b204e9800998ecf8427e",
            time.time(),
            {checksum.algorithm: checksum.b64()},
            (),
        )
        await ctx.store.catalog.put_part(ctx.bucket, upload.upload_id, part)
    else:
        part = await ctx.store.upload_part_copy(
            ctx.bucket,
            upload.upload_id,
            part_number,
            source,
            first,
            last,
            observe=checksum.update,
            finish=finish,
            customer_key=given_key,
            source_customer_key=encryption.customer_key(ctx, source=True),
        )
    headers = encryption.response_headers(upload.sse, given_key)
    if source.version_id != "null":
        headers["x-amz-copy-source-version-id"] = source.version_id
    return xml_response(
        xml_responses.copy_part_result(part.etag, part.last_modified, part.checksums),
        headers=headers,
    )


async def complete_multipart_upload(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    await ctx.authorized_bucket()
    upload, gone = await _upload_in_progress(ctx)
    # Its x-amz-checksum-* header is the whole object's (checked in `finish`).
    body = await ctx.small_body(checksum_headers_are_the_body=False)
    if upload is None:
        assert gone is not None
        return await _completed_before(ctx, gone)
    requested = xml_requests.parse_complete_multipart_upload(body)
    _check_declared_checksum_form(ctx, upload)
    _check_parts_name_checksums(upload, requested)
    if_match, if_none_match = parse_write_conditions(ctx.headers)
    _check_completion_checksum_headers(ctx, upload)
    object_size = _declared_object_size(ctx)
    by_number = {p.part_number: p for p in requested}

    async def finish(upload: UploadRecord, parts: list[PartRecord]) -> dict[str, str]:
        _check_completed_parts(parts, by_number, object_size)
        return _completed_checksums(upload, parts, ctx.headers)

    try:
        result = await ctx.store.complete_upload(
            ctx.bucket,
            upload.upload_id,
            [(p.part_number, p.etag) for p in requested],
            finish=finish,
            if_match=if_match,
            if_none_match=if_none_match,
        )
    except NoSuchUploadError:
        # Completed (or aborted) by another request since this one found the upload.
        return await _completed_before(ctx, S3Error("NoSuchUpload", UploadId=upload.upload_id))
    except (InvalidPartListError, InvalidPartError) as e:
        # Parts gone: possibly deleted by a completion of this upload that ran meanwhile
        # (a client's retry overlapping its first try); if that made the current version,
        # answer as it did, else the parts really were wrong.
        return await _completed_before(ctx, to_s3_error(e))
    except RecordTooLargeError as e:
        raise _record_too_large(e) from e
    return _completed_response(ctx, result.record)


async def _upload_in_progress(ctx: S3Context) -> tuple[UploadRecord | None, S3Error | None]:
    """The upload the request completes, or (None, the NoSuchUpload to answer unless an
    earlier completion of it made the key's current version)."""
    try:
        return await _upload(ctx), None
    except NoSuchUploadError:
        return None, S3Error("NoSuchUpload", UploadId=ctx.query.get("uploadId", ""))
    except S3Error as e:
        if e.code != "NoSuchUpload":
            raise
        return None, e


def _check_declared_checksum_form(ctx: S3Context, upload: UploadRecord) -> None:
    """A whole-object checksum the completion declares in the upload's algorithm that
    cannot be one (not base64 of that algorithm's digest, after a COMPOSITE value's
    `-<parts>`): BadDigest, S3's answer to a completion's checksum that does not match,
    before the parts are looked at (a PutObject's malformed value is InvalidRequest)."""
    algorithm = upload.checksum_algorithm or DEFAULT_ALGORITHM
    declared = ctx.headers.get(header_name(algorithm))
    if declared is None:
        return
    digest = declared.strip()
    if upload.checksum_algorithm and upload.checksum_type != FULL_OBJECT:
        head, dash, count = digest.rpartition("-")
        if dash and count.isdigit():
            digest = head
    try:
        decode_checksum_value(algorithm, digest)
    except S3Error:
        raise mismatch_error(algorithm) from None


def _check_parts_name_checksums(upload: UploadRecord, requested: list[CompletedPart]) -> None:
    """A composite checksum is made of the parts' own: S3 wants each one named."""
    algorithm = upload.checksum_algorithm
    if not algorithm or upload.checksum_type == FULL_OBJECT:
        return
    for part in requested:
        if algorithm not in part.checksums:
            raise S3Error(
                "InvalidRequest",
                f"The upload was created using a {algorithm.lower()} checksum. The "
                "complete request must include the checksum for each part. It was "
                f"missing for part {part.part_number} in the request.",
            )


def _check_completed_parts(
    parts: list[PartRecord], requested: Mapping[int, CompletedPart], object_size: int | None
) -> None:
    """The stored parts against the request: the object's size (at most OBJECT_SIZE_MAX,
    and x-amz-mp-object-size if declared), and each checksum the request names for a
    part against the part's own."""
    total = sum(p.size for p in parts)
    if total > OBJECT_SIZE_MAX:
        raise S3Error("EntityTooLarge", ProposedSize=total, MaxSizeAllowed=OBJECT_SIZE_MAX)
    if object_size is not None and object_size != total:
        raise S3Error(
            "InvalidRequest",
            f"The provided 'x-amz-mp-object-size' header value {object_size} does not "
            f"match what was computed: {total}",
        )
    for part in parts:
        for algorithm, value in requested[part.part_number].checksums.items():
            stored = part.checksums.get(algorithm)
            if stored is not None and stored != value:
                raise S3Error("InvalidPart", PartNumber=part.part_number)


def _completed_checksums(
    upload: UploadRecord, parts: list[PartRecord], headers: Mapping[str, str]
) -> dict[str, str]:
    """The completed object's checksums, combined from its parts' and checked against the
    value `headers` declare for the whole object, if any."""
    algorithm = upload.checksum_algorithm
    if not algorithm:
        # S3's default checksum, when every part has it (a part uploaded with another
        # named checksum has not).
        defaults = [p.checksums.get(DEFAULT_ALGORITHM) for p in parts]
        if not parts or any(v is None for v in defaults):
            return {}
        return _full_object(DEFAULT_ALGORITHM, defaults, parts, headers)
    values = [p.checksums.get(algorithm) for p in parts]
    if any(v is None for v in values):
        raise S3Error("InvalidPart", f"A part was uploaded without its {algorithm} checksum")
    if upload.checksum_type == FULL_OBJECT:
        return _full_object(algorithm, values, parts, headers)
    return _composite(algorithm, values, headers)  # type: ignore[arg-type]


def _full_object(
    algorithm: str,
    values: list[str | None],
    parts: list[PartRecord],
    headers: Mapping[str, str],
) -> dict[str, str]:
    """The whole object's checksum combined from its parts', checked against the value
    the request declares for it, if any."""
    value = combine_full_object(
        algorithm, [(v, p.size) for v, p in zip(values, parts, strict=True) if v is not None]
    )
    declared = headers.get(header_name(algorithm))
    if declared is not None and decode_checksum_value(algorithm, declared) != (
        decode_checksum_value(algorithm, value)
    ):
        raise mismatch_error(algorithm)
    return {algorithm: value, "type": FULL_OBJECT}


def _composite(algorithm: str, values: list[str], headers: Mapping[str, str]) -> dict[str, str]:
    """The checksum of the parts' checksums (`<base64>-<parts>`), checked against the
    value the request declares for it, if any (the part count may be left out)."""
    value = composite_checksum(algorithm, values)
    declared = headers.get(header_name(algorithm))
    if declared is not None:
        digest, _, count = value.rpartition("-")
        declared_digest, dash, declared_count = declared.strip().rpartition("-")
        if not dash:
            declared_digest, declared_count = declared.strip(), count
        if declared_count != count or decode_checksum_value(
            algorithm, declared_digest
        ) != decode_checksum_value(algorithm, digest):
            raise mismatch_error(algorithm)
    return {algorithm: value, "type": COMPOSITE}


def _record_too_large(e: RecordTooLargeError) -> S3Error:
    """Long part lists go to a manifest, so a record too large is the key's versions
    together (a versioned key's record line holds every version), not the user's
    metadata."""
    return S3Error(
        "InvalidRequest",
        f"The object's catalog record is too large to complete ({e}); delete old "
        "versions of this key, or complete the upload under another key",
    )


def _completed_response(ctx: S3Context, record: ObjectRecord) -> Response:
    # A URI, so the key percent-encoded (as S3 does, '/' included).
    location = f"{ctx.config.scheme}://{ctx.headers.get('host', '')}/{ctx.bucket}/{quote(ctx.key, safe='')}"
    return xml_response(
        xml_responses.complete_multipart_upload_result(
            location, ctx.bucket, ctx.key, record.etag, record.checksums
        ),
        headers=written_version_headers(record.version_id)
        | encryption.response_headers(record.sse, encryption.customer_key(ctx)),
    )


async def _completed_before(ctx: S3Context, gone: S3Error) -> Response:
    """A CompleteMultipartUpload of an upload that is no longer in progress: answered as
    the completion was, as S3 does, while the key's current version is the one that
    completion made (a client's retry after a lost answer); `gone` otherwise."""
    upload_id = ctx.query.get("uploadId", "")
    try:
        # A view of its own, started now: the request's may predate that completion.
        record = await ctx.store.catalog.get_object(ctx.bucket, ctx.key)
    except (NoSuchKeyError, DeleteMarkerError):
        raise gone from None
    if not upload_id or record.upload_id != upload_id:
        raise gone
    return _completed_response(ctx, record)


def _check_completion_checksum_headers(ctx: S3Context, upload: UploadRecord) -> None:
    """x-amz-checksum-type, and an x-amz-checksum-* header of another algorithm than the
    upload's, as S3 checks them: the request must name the upload's own."""
    mode = upload.checksum_type or FULL_OBJECT  # S3's default checksum is a full-object one
    declared = ctx.headers.get("x-amz-checksum-type")
    if declared is not None:
        if declared.upper() not in (COMPOSITE, FULL_OBJECT):
            raise S3Error("InvalidRequest", "Value for x-amz-checksum-type header is invalid.")
        if declared.upper() != mode:
            raise S3Error(
                "InvalidRequest",
                f"The upload was created using the {mode} checksum mode. The complete "
                "request must use the same checksum mode.",
            )
    if upload.checksum_algorithm:
        for algorithm in ALGORITHMS:
            if algorithm != upload.checksum_algorithm and header_name(algorithm) in ctx.headers:
                raise checksum_type_mismatch(upload.checksum_algorithm, algorithm)


def _declared_object_size(ctx: S3Context) -> int | None:
    """x-amz-mp-object-size: the size the client expects the completed object to have."""
    text = ctx.headers.get("x-amz-mp-object-size")
    if text is None:
        return None
    if not (text.strip().isdigit() and text.isascii()):
        raise S3Error("InvalidRequest", "Value for x-amz-mp-object-size header is invalid.")
    return int(text.strip())


def checksum_type_mismatch(expected: str, actual: str) -> S3Error:
    """S3's answer to a checksum of another algorithm than the upload's."""
    return S3Error(
        "InvalidRequest",
        f"Checksum Type mismatch occurred, expected checksum Type: {expected.lower()}, "
        f"actual checksum Type: {actual.lower()}",
    )


async def abort_multipart_upload(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    await ctx.authorized_bucket()
    upload = await _upload(ctx)
    await ctx.store.catalog.abort_upload(ctx.bucket, upload.upload_id)
    return Response(b"", status_code=204)


async def list_parts(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    await ctx.authorized_bucket()
    upload = await _upload(ctx)
    marker_text = ctx.query.get("part-number-marker", "0") or "0"
    if not marker_text.isdigit():
        raise S3Error(
            "InvalidArgument",
            "Provided part-number-marker not an integer or within integer range",
            ArgumentName="part-number-marker",
            ArgumentValue=marker_text,
        )
    marker = int(marker_text)
    max_parts = parse_max_count(ctx.query.get("max-parts"), name="max-parts")
    result = await ctx.store.catalog.list_parts(
        ctx.bucket, upload.upload_id, part_number_marker=marker, max_parts=max(max_parts, 1)
    )
    parts = result.parts if max_parts else []
    truncated = result.is_truncated and bool(max_parts)
    return xml_response(
        xml_responses.list_parts_result(
            ctx.bucket,
            ctx.key,
            upload.upload_id,
            part_number_marker=marker,
            next_part_number_marker=result.next_part_number_marker
            if truncated
            else (parts[-1].part_number if parts else None),
            max_parts=max_parts,
            is_truncated=truncated,
            parts=parts,
            owner=upload.owner,
            storage_class=upload.storage_class,
            checksum_algorithm=upload.checksum_algorithm or None,
            checksum_type=upload.checksum_type or None,
        )
    )


async def list_multipart_uploads(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    encoding_type = ctx.query.get("encoding-type")
    if encoding_type is not None and encoding_type != "url":
        raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request")
    prefix = ctx.query.get("prefix", "")
    delimiter = ctx.query.get("delimiter", "")
    key_marker = ctx.query.get("key-marker", "")
    upload_id_marker = ctx.query.get("upload-id-marker", "")
    max_uploads = parse_max_count(ctx.query.get("max-uploads"), name="max-uploads")
    result = await ctx.store.catalog.list_uploads(
        ctx.bucket,
        prefix=prefix,
        delimiter=delimiter,
        key_marker=key_marker,
        upload_id_marker=upload_id_marker,
        max_uploads=max(max_uploads, 1),
    )
    truncated = result.is_truncated and bool(max_uploads)
    return xml_response(
        xml_responses.list_multipart_uploads_result(
            ctx.bucket,
            prefix=prefix,
            delimiter=delimiter,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            next_key_marker=result.next_key_marker if truncated else None,
            next_upload_id_marker=result.next_upload_id_marker if truncated else None,
            max_uploads=max_uploads,
            is_truncated=truncated,
            uploads=result.uploads if max_uploads else [],
            common_prefixes=result.common_prefixes if max_uploads else [],
            encoding_type=encoding_type,
        )
    )
