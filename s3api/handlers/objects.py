"""Object operations: PutObject, GetObject, HeadObject, DeleteObject, CopyObject, object
tagging and GetObjectAttributes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, unquote

from starlette.responses import Response, StreamingResponse

from blobstore.access.actions import OperationRequest, required_accesses
from blobstore.catalog import versioning
from blobstore.catalog.errors import DeleteMarkerError, NoSuchKeyError, NoSuchVersionError
from blobstore.catalog.records import CONTENT_TYPE_DEFAULT, BucketRecord, ObjectRecord
from blobstore.objects import VerifiedBody, WrittenData
from s3api import xml_requests, xml_responses
from s3api.aws_chunked import PayloadReader, strip_aws_chunked
from s3api.checksums import (
    COMPOSITE,
    DEFAULT_ALGORITHM,
    FULL_OBJECT,
    header_name,
    new_checksum,
    parse_algorithm,
)
from s3api.conditions import (
    check_copy_source_conditions,
    check_read_conditions,
    http_date,
    parse_write_conditions,
)
from s3api.errors import S3Error
from s3api.handlers import authorization, encryption, object_lock
from s3api.handlers._private import (
    quote_etag,
    version_headers,
    written_version_headers,
    xml_response,
)
from s3api.handlers.context import S3Context
from s3api.limits import (
    OBJECT_TAGS_MAX,
    PUT_OBJECT_SIZE_MAX,
    TAG_KEY_LENGTH_MAX,
    TAG_VALUE_LENGTH_MAX,
    metadata_header_value,
    parse_max_count,
    parse_part_number,
    user_metadata,
    validate_bucket_name,
    validate_key,
)
from s3api.ranges import parse_range

# Stored as given and returned with the object (the last is S3's per-object redirect for
# website hosting: kept and shown as S3 keeps it, though nothing here serves websites).
WEBSITE_REDIRECT = "x-amz-website-redirect-location"
SYSTEM_METADATA_HEADERS = (
    "Cache-Control",
    "Content-Disposition",
    "Content-Encoding",
    "Content-Language",
    "Expires",
    WEBSITE_REDIRECT,
)
WEBSITE_REDIRECT_BYTES_MAX = 2048
STORAGE_CLASSES = (
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "DEEP_ARCHIVE",
    "GLACIER_IR",
    "OUTPOSTS",
    "SNOW",
    "EXPRESS_ONEZONE",
)
RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}
TAGGING_CAS_ATTEMPTS_MAX = 8
OBJECT_ATTRIBUTES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")


# ---------------------------------------------------------------------- request parts


def parse_tagging_header(value: str | None) -> dict[str, str]:
    """x-amz-tagging: URL-query-encoded key=value pairs; as S3 reads it, a tag's value
    may be empty, its '=' included (`a=&b=2`) or not (`a&b=2`)."""
    if not value:
        return {}
    try:
        pairs = parse_qsl(value, keep_blank_values=True, errors="strict")
    except ValueError:  # UnicodeDecodeError: a percent-encoding that is not UTF-8
        raise S3Error(
            "InvalidArgument",
            "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query "
            "parameters without tag name duplicates.",
        ) from None
    tags: dict[str, str] = {}
    for key, tag_value in pairs:
        if not key or len(key) > TAG_KEY_LENGTH_MAX or len(tag_value) > TAG_VALUE_LENGTH_MAX:
            raise S3Error("InvalidTag", "The TagKey or TagValue you have provided is invalid")
        if key in tags:
            raise S3Error("InvalidTag", "Cannot provide multiple Tags with the same key")
        if key.startswith("aws:"):
            raise S3Error("InvalidTag", "Your TagKey cannot be prefixed with aws:")
        tags[key] = tag_value
    if len(tags) > OBJECT_TAGS_MAX:
        raise S3Error("InvalidTag", f"Object tags cannot be greater than {OBJECT_TAGS_MAX}")
    return tags


def system_metadata(ctx: S3Context) -> dict[str, str]:
    result = {}
    for name in SYSTEM_METADATA_HEADERS:
        value = ctx.headers.get(name)
        if name == "Content-Encoding":
            value = strip_aws_chunked(value)
        elif name == WEBSITE_REDIRECT and value is not None:
            check_website_redirect(value)
        if value is not None:
            result[name] = value
    return result


def check_website_redirect(value: str) -> None:
    """S3's rule: a path within the bucket ('/...') or an absolute http(s) URL, 2 KB."""
    if not value.startswith(("/", "http://", "https://")):
        raise S3Error("InvalidRedirectLocation")
    if len(value.encode()) > WEBSITE_REDIRECT_BYTES_MAX:
        raise S3Error("InvalidRedirectLocation", "The website redirect location is over 2 KB")


def storage_class(ctx: S3Context) -> str:
    value = ctx.headers.get("x-amz-storage-class", "STANDARD").strip().upper()
    if value not in STORAGE_CLASSES:
        raise S3Error("InvalidStorageClass", StorageClassRequested=value)
    return value


def written_object(ctx: S3Context, bucket: BucketRecord) -> tuple[str, dict[str, str]]:
    """(owner, system metadata holding its ACL) of the object this write creates
    (`authorization.written_object`; `BLOBSTORE_GATEWAY_ACLS=ignore` ignores ACLs where
    they are disabled)."""
    return authorization.written_object(
        ctx.headers, ctx.requester, bucket, ctx.authorizer, ctx.config.acls == "ignore"
    )


def require_length(ctx: S3Context) -> None:
    """S3 refuses uploads of unknown length: no Content-Length (and not chunked), or an
    aws-chunked body without x-amz-decoded-content-length (411 MissingContentLength)."""
    auth = ctx.auth
    streaming = (
        auth.streaming
        if auth is not None
        else ctx.headers.get("x-amz-content-sha256", "").startswith("STREAMING-")
    )
    if streaming:
        if "x-amz-decoded-content-length" not in ctx.headers:
            raise S3Error("MissingContentLength")
        return
    if "content-length" in ctx.headers:
        return
    if "chunked" in ctx.headers.get("transfer-encoding", "").lower():
        return
    raise S3Error("MissingContentLength")


def body_checksums(reader: PayloadReader) -> VerifiedBody:
    digest = reader.digest
    assert digest is not None, "the body was not read to its end"
    checksums = dict(digest.checksums)
    if checksums:
        checksums["type"] = FULL_OBJECT
    return VerifiedBody(checksums, digest.md5_hex)


def checksum_headers(checksums: dict[str, str]) -> dict[str, str]:
    headers = {header_name(a): v for a, v in checksums.items() if a != "type"}
    if headers and checksums.get("type"):
        headers["x-amz-checksum-type"] = checksums["type"]
    return headers


@dataclass(frozen=True, slots=True)
class CopySource:
    bucket: str
    key: str
    version_id: str | None


def parse_copy_source(value: str) -> CopySource:
    """x-amz-copy-source: [/]bucket/key[?versionId=id], percent-encoded."""
    path, _, query = value.partition("?")
    path = unquote(path, errors="strict").lstrip("/")
    bucket, _, key = path.partition("/")
    version_id = None
    if query:
        params = dict(parse_qsl(query, keep_blank_values=True))
        version_id = params.get("versionId")
    if not bucket or not key:
        raise S3Error(
            "InvalidArgument",
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
            ArgumentName="x-amz-copy-source",
            ArgumentValue=value,
        )
    validate_bucket_name(bucket)
    validate_key(key)
    check_version_id(version_id)
    return CopySource(bucket, key, version_id)


async def load_copy_source(ctx: S3Context) -> tuple[CopySource, ObjectRecord]:
    """The copy's source, once the requester may read it (s3:GetObject on the source,
    decided on the source's bucket and, where its ACLs are enabled, on the version)."""
    source = parse_copy_source(ctx.headers["x-amz-copy-source"])
    bucket = await ctx.store.catalog.get_bucket(source.bucket, ctx.view())
    expected = ctx.headers.get("x-amz-source-expected-bucket-owner")
    if expected is not None and expected != bucket.owner:
        raise S3Error("AccessDenied")
    read = required_accesses(
        OperationRequest("GetObject", source.bucket, source.key, source.version_id or "")
    )
    try:
        record = await ctx.store.catalog.get_object(
            source.bucket, source.key, source.version_id, view=ctx.view()
        )
    except DeleteMarkerError:
        if not ctx.decide(read, bucket).allowed:
            raise S3Error("AccessDenied") from None
        if source.version_id is not None:
            raise S3Error(
                "InvalidRequest",
                "The source of a copy request may not specifically refer to a delete marker by version id.",
            ) from None
        raise S3Error("NoSuchKey", Key=source.key) from None
    except Exception:
        if not ctx.decide(read, bucket).allowed:
            raise S3Error("AccessDenied") from None
        raise
    if not ctx.decide(read, bucket, record).allowed:
        raise S3Error("AccessDenied")
    check_copy_source_conditions(ctx.headers, record.etag, record.last_modified)
    return source, record


async def load_version(ctx: S3Context) -> ObjectRecord:
    """The version a GET/HEAD-like request names (latest unless versionId)."""
    version_id = ctx.query.get("versionId")
    check_version_id(version_id)
    try:
        return await ctx.store.catalog.get_object(ctx.bucket, ctx.key, version_id, view=ctx.view())
    except DeleteMarkerError as e:
        headers = {
            "x-amz-delete-marker": "true",
            "x-amz-version-id": e.record.version_id,
            "Last-Modified": http_date(e.record.last_modified),  # when it was deleted
        }
        if version_id is not None:
            headers["Allow"] = "DELETE"
            raise S3Error(
                "MethodNotAllowed", headers=headers, Method=ctx.method, ResourceType="DeleteMarker"
            ) from None
        raise S3Error("NoSuchKey", headers=headers, Key=ctx.key) from None
    except NoSuchKeyError:
        # A HEAD tells a deleted key from one whose latest version is a delete marker.
        headers = {"x-amz-delete-marker": "false"} if ctx.method == "HEAD" else {}
        raise S3Error("NoSuchKey", headers=headers, Key=ctx.key) from None
    except NoSuchVersionError:
        raise S3Error("NoSuchVersion", Key=ctx.key, VersionId=version_id or "") from None


def check_version_id(version_id: str | None) -> None:
    """A versionId no version can have, the empty one included: InvalidArgument, as S3
    answers it (an empty one is not the same as none)."""
    if version_id == "":
        raise S3Error("InvalidArgument", "Version id cannot be the empty string")
    if version_id is not None and not versioning.well_formed_version_id(version_id):
        raise S3Error("InvalidArgument", "Invalid version id specified")


# ---------------------------------------------------------------------- PutObject


async def put_object(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    require_length(ctx)
    # No sync: the commit checks the owner and the bucket's version again.
    bucket = await ctx.authorized_bucket(cached=True)
    owner, acl = written_object(ctx, bucket)
    sse = encryption.write_spec(ctx, bucket)
    lock = object_lock.parse_lock_headers(ctx.headers, time.time())
    if lock.named and bucket.object_lock is None:
        bucket = await ctx.authorized_bucket()  # the newest record, before refusing
    template = ObjectRecord(
        bucket=ctx.bucket,
        key=ctx.key,
        content_type=ctx.headers.get("content-type") or CONTENT_TYPE_DEFAULT,
        metadata=user_metadata(ctx.headers.items()),
        system_metadata=system_metadata(ctx) | acl,
        storage_class=storage_class(ctx),
        owner=owner,
        tags=parse_tagging_header(ctx.headers.get("x-amz-tagging")),
    )
    template = lock.applied(template)
    if_match, if_none_match = parse_write_conditions(ctx.headers)
    # An object uploaded without a checksum gets S3's default one.
    reader = ctx.payload(PUT_OBJECT_SIZE_MAX, default_algorithm=DEFAULT_ALGORITHM)
    object_lock.check_lock_request(ctx, bucket, lock, reader.expect)

    async def finish(data: WrittenData) -> VerifiedBody:
        return body_checksums(reader)

    result = await ctx.store.put_object(
        template,
        aiter(reader),
        size_max=PUT_OBJECT_SIZE_MAX,
        finish=finish,
        compute_md5=False,
        if_match=if_match,
        if_none_match=if_none_match,
        owner=bucket.owner,
        sse=sse,
    )
    record = result.record
    headers = {"ETag": quote_etag(record.etag)}
    headers.update(checksum_headers(record.checksums))
    headers.update(encryption.response_headers(record.sse, sse.customer_key))
    headers.update(written_version_headers(record.version_id))
    return Response(b"", headers=headers)


# ---------------------------------------------------------------------- GetObject


def _part_range(record: ObjectRecord, part_number: int) -> tuple[int, int]:
    """Bytes first..last of one part (a non-multipart object is its own part 1); a part
    the object does not have is 416 InvalidPartNumber, naming the part count as S3 does."""
    if not record.parts:
        if part_number != 1:
            raise _invalid_part_number(part_number, 1)
        return 0, record.size - 1
    offset = 0
    for part in record.parts:
        if part.part_number == part_number:
            return offset, offset + part.size - 1
        offset += part.size
    raise _invalid_part_number(part_number, len(record.parts))


def _invalid_part_number(requested: int, count: int) -> S3Error:
    return S3Error("InvalidPartNumber", PartNumberRequested=requested, ActualPartCount=count)


def object_headers(ctx: S3Context, record: ObjectRecord, versioning: str) -> dict[str, str]:
    headers = {
        "ETag": quote_etag(record.etag),
        "Last-Modified": http_date(record.last_modified),
        "Accept-Ranges": "bytes",
        "Content-Type": record.content_type,
    }
    headers.update(record.system_metadata)
    headers.pop(authorization.OBJECT_ACL, None)
    for name, value in record.metadata.items():
        headers["x-amz-meta-" + name] = metadata_header_value(value)
    if record.storage_class != "STANDARD":
        headers["x-amz-storage-class"] = record.storage_class
    if record.tags:
        headers["x-amz-tagging-count"] = str(len(record.tags))
    headers.update(version_headers(record.version_id, versioning))
    headers.update(object_lock.lock_headers(record))
    for parameter, header in RESPONSE_OVERRIDES.items():
        if parameter in ctx.query:
            headers[header] = ctx.query[parameter]
    return headers


async def authorized_bucket_and_version(ctx: S3Context) -> tuple[BucketRecord, ObjectRecord]:
    """The bucket check and the version lookup through the request's one view (one
    sync). The bucket's verdict (NoSuchBucket, AccessDenied) always wins, so nothing
    about the object is revealed before the request is allowed; the version read
    decides with it where ACLs are enabled (its owner and ACL).

    With the bucket's record in this process's cache (nearly always: it is kept under a
    watch), the check after the lookup costs no round trip, and the two run one after
    the other."""
    # A task (more CPU than the whole check when nothing is read) only for a record the
    # check must read: that read then overlaps the lookup's.
    bucket_task = (
        None
        if ctx.store.catalog.bucket_cached(ctx.bucket)
        else asyncio.ensure_future(ctx.store.catalog.get_bucket(ctx.bucket, ctx.view()))
    )
    try:
        record = await load_version(ctx)
    except asyncio.CancelledError:
        if bucket_task is not None:
            bucket_task.cancel()
        raise
    except Exception as exc:
        if bucket_task is not None:
            await asyncio.gather(bucket_task, return_exceptions=True)
        await _authorized_without_version(ctx, exc)  # its error, if any, is the answer
        raise
    if bucket_task is not None:
        await asyncio.gather(bucket_task, return_exceptions=True)
    return await ctx.authorized_bucket(obj=record), record


async def _authorized_without_version(ctx: S3Context, missing: Exception) -> None:
    """The bucket check of a request whose version was not found. A key with no
    version is NoSuchKey, as S3 answers it, also to a requester refused the read who may
    list the bucket under the key's name (s3:ListBucket, s3:prefix the key); to others
    AccessDenied, which tells nothing of the key."""
    try:
        await ctx.authorized_bucket()
    except S3Error as denied:
        record = ctx.bucket_record
        expected = ctx.headers.get("x-amz-expected-bucket-owner")
        if (
            denied.code != "AccessDenied"
            or not isinstance(missing, S3Error)
            or missing.code != "NoSuchKey"
            or record is None
            or expected not in (None, record.owner)
            or not ctx.may_list_key(record)
        ):
            raise
        raise missing from None


# GET bodies up to this size are answered in one piece instead of streamed.
WHOLE_BODY_BYTES_MAX = 1024 * 1024


async def get_object(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket, record = await authorized_bucket_and_version(ctx)
    check_read_conditions(ctx.headers, record.etag, record.last_modified)
    encryption.refuse_write_headers_on_read(ctx)
    given_key = encryption.customer_key(ctx)
    key = await encryption.read_key(ctx, record, given_key)
    headers = object_headers(ctx, record, bucket.versioning)
    headers.update(encryption.response_headers(record.sse, given_key))
    part_number_text = ctx.query.get("partNumber")
    checksum_mode = ctx.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"
    if part_number_text is None:
        status, first, last = _range_read(ctx.headers.get("range"), record, checksum_mode, headers)
    else:
        if "range" in ctx.headers:
            raise S3Error(
                "InvalidRequest", "Cannot specify both Range header and partNumber query parameter"
            )
        part_number = parse_part_number(part_number_text)
        record = await ctx.store.resolve(record)  # its part list may live in a manifest
        status, first, last = _part_read(record, part_number, checksum_mode, headers)
    length = max(0, last - first + 1)
    headers["Content-Length"] = str(length)
    if ctx.method == "HEAD" or length == 0:
        return Response(b"", status_code=status, headers=headers)
    if length <= WHOLE_BODY_BYTES_MAX:
        # Small bodies are read whole and sent as a plain response, without the
        # streaming machinery (a task group watching for disconnects, generators) that
        # costs more than the bytes themselves.
        body_bytes = await ctx.store.read_whole(record, first, last, key=key)
        if len(body_bytes) != length:
            raise AssertionError(f"{len(body_bytes)} bytes for {length} bytes of {record.key!r}")
        return Response(body_bytes, status_code=status, headers=headers, media_type=None)
    return await _streamed_response(ctx, (record, key), first, last, status, headers)


def _range_read(
    range_header: str | None, record: ObjectRecord, checksum_mode: bool, headers: dict[str, str]
) -> tuple[int, int, int]:
    """(status, first, last) of a GET without partNumber: the Range asked for, or the
    whole object (whose checksums the checksum mode adds to `headers`)."""
    byte_range = parse_range(range_header, record.size)
    if byte_range is not None:
        headers["Content-Range"] = byte_range.content_range
        if checksum_mode and byte_range.last - byte_range.first + 1 == record.size:
            headers.update(checksum_headers(record.checksums))  # the whole object
        return 206, byte_range.first, byte_range.last
    if checksum_mode:
        headers.update(checksum_headers(record.checksums))
    return 200, 0, record.size - 1


def _part_read(
    record: ObjectRecord, part_number: int, checksum_mode: bool, headers: dict[str, str]
) -> tuple[int, int, int]:
    """(status, first, last) of a GET of one part, with its headers added to `headers`."""
    first, last = _part_range(record, part_number)
    status = 200
    if record.parts or record.size:
        # A ranged read of the part; a single PUT's object is its own part 1 (S3
        # answers that with 206 too, without a part count).
        status = 206
        headers["Content-Range"] = (
            f"bytes {first}-{last}/{record.size}" if record.size else f"bytes */{record.size}"
        )
    if record.parts:
        headers["x-amz-mp-parts-count"] = str(len(record.parts))
        own = _part_checksums(record, part_number)
        if checksum_mode and own:
            headers.update(checksum_headers(own))
        elif checksum_mode and last - first + 1 == record.size:
            headers.update(checksum_headers(record.checksums))  # the part is the object
    elif checksum_mode:
        headers.update(checksum_headers(record.checksums))
    return status, first, last


def _part_checksums(record: ObjectRecord, part_number: int) -> dict[str, str]:
    """A part's own checksum, of the bytes a GET of that part carries, under the object's
    checksum type; none when the object's algorithm is another (a copy given a new one
    keeps the old part list) or the part kept none (records from before FULL_OBJECT
    uploads kept them)."""
    part = next(p for p in record.parts if p.part_number == part_number)
    algorithms = record.checksums.keys() - {"type"}
    if not algorithms or algorithms != part.checksums.keys():
        return {}
    return {**part.checksums, "type": record.checksums.get("type", COMPOSITE)}


async def _streamed_response(
    ctx: S3Context,
    opened: tuple[ObjectRecord, bytes | None],
    first: int,
    last: int,
    status: int,
    headers: dict[str, str],
) -> StreamingResponse:
    """The bytes first..last of a large body, streamed; its first piece is read before
    the answer starts, so a read that fails at once is an error response. `opened`: the
    record and its key (`encryption.read_key`)."""
    record, key = opened
    pieces = ctx.store.read(record, first, last, key=key)
    try:
        head = await anext(pieces)
    except StopAsyncIteration:
        length = last - first + 1
        raise AssertionError(f"no bytes for {length} bytes of {record.key!r}") from None
    except BaseException:
        await pieces.aclose()
        raise

    async def body() -> AsyncIterator[bytes | memoryview]:
        try:
            yield head
            async for piece in pieces:
                yield piece
        finally:
            await pieces.aclose()

    return StreamingResponse(body(), status_code=status, headers=headers, media_type=None)


async def head_object(ctx: S3Context) -> Response:
    return await get_object(ctx)


# ---------------------------------------------------------------------- DeleteObject


def parse_delete_condition(headers: Mapping[str, str]) -> str | None:
    """A conditional delete's If-Match (an ETag, or "*": the key exists), as S3 takes it
    for general purpose buckets; the conditions S3 supports only in directory buckets
    are NotImplemented rather than ignored (a delete that ignores its condition loses
    data)."""
    for name in ("if-none-match", "x-amz-if-match-last-modified-time", "x-amz-if-match-size"):
        if name in headers:
            raise S3Error(
                "NotImplemented",
                "A header you provided implies functionality that is not implemented",
                Header=name,
            )
    if_match, _ = parse_write_conditions(headers)
    return if_match


async def delete_object(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    if_match = parse_delete_condition(ctx.headers)
    bucket = await ctx.authorized_bucket()
    version_id = ctx.query.get("versionId")
    check_version_id(version_id)
    headers: dict[str, str] = {}
    # Deleting what is not there succeeds (no error); NoSuchKey only from If-Match.
    result = await ctx.store.catalog.delete_object(
        ctx.bucket,
        ctx.key,
        version_id,
        owner=ctx.requester or bucket.owner,
        if_match=if_match,
        guard=object_lock.removal_guard(ctx, bucket, ctx.key),
    )
    if result.delete_marker:
        headers["x-amz-delete-marker"] = "true"
    if result.version_id:
        headers.update(version_headers(result.version_id, bucket.versioning))
    return Response(b"", status_code=204, headers=headers)


# ---------------------------------------------------------------------- CopyObject


async def copy_object(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket = await ctx.authorized_bucket()
    written = written_object(ctx, bucket)
    sse = encryption.write_spec(ctx, bucket)
    source, record = await load_copy_source(ctx)
    source_key = encryption.customer_key(ctx, source=True)
    if record.size > PUT_OBJECT_SIZE_MAX:
        raise S3Error(
            "InvalidRequest",
            f"The specified copy source is larger than the maximum allowable size for a copy source: {PUT_OBJECT_SIZE_MAX}",
        )
    metadata_directive, tagging_directive = _copy_directives(ctx)
    # Without the header the copy is STANDARD, whatever the source's class (as S3).
    new_class = storage_class(ctx) if "x-amz-storage-class" in ctx.headers else "STANDARD"
    unchanged = _copies_to_itself_unchanged(
        ctx, source, record, metadata_directive, new_class
    ) and encryption.same_encryption(record, sse)
    if unchanged and bucket.versioning != "Enabled":
        raise S3Error(
            "InvalidRequest",
            "This copy request is illegal because it is trying to copy an object to itself "
            "without changing the object's metadata, storage class, website redirect location "
            "or encryption attributes.",
        )
    template = _copy_template(ctx, record, (metadata_directive, tagging_directive), new_class)
    lock = object_lock.parse_lock_headers(ctx.headers, time.time())
    object_lock.check_lock_request(ctx, bucket, lock, None)
    template = replace(
        template, owner=written[0], system_metadata=template.system_metadata | written[1]
    )
    template = lock.applied(template)
    if_match, if_none_match = parse_write_conditions(ctx.headers)
    algorithm_text = ctx.headers.get("x-amz-checksum-algorithm")
    if (if_match is not None or if_none_match) and _copy_reads_source(record, algorithm_text):
        # The commit checks these again; here they spare a doomed copy its source's read.
        await _check_destination_conditions(ctx, if_match, if_none_match)
    checksums = await _copy_checksums(ctx, record, algorithm_text, source_key)
    result = await ctx.store.copy_object(
        record,
        template,
        checksums=checksums,
        if_match=if_match,
        if_none_match=if_none_match,
        sse=sse,
        source_customer_key=source_key,
    )
    copied = result.record
    headers = written_version_headers(copied.version_id)
    headers.update(encryption.response_headers(copied.sse, sse.customer_key))
    if source.version_id or record.version_id != "null":
        headers["x-amz-copy-source-version-id"] = record.version_id
    body = xml_responses.copy_object_result(copied.etag, copied.last_modified, copied.checksums)
    return xml_response(body, headers=headers)


def _copy_directives(ctx: S3Context) -> tuple[str, str]:
    """x-amz-metadata-directive and x-amz-tagging-directive: COPY (the default) or
    REPLACE."""
    metadata_directive = ctx.headers.get("x-amz-metadata-directive", "COPY").upper()
    tagging_directive = ctx.headers.get("x-amz-tagging-directive", "COPY").upper()
    if metadata_directive not in ("COPY", "REPLACE") or tagging_directive not in (
        "COPY",
        "REPLACE",
    ):
        raise S3Error("InvalidArgument", "Unknown metadata or tagging directive")
    return metadata_directive, tagging_directive


def _copies_to_itself_unchanged(
    ctx: S3Context,
    source: CopySource,
    record: ObjectRecord,
    metadata_directive: str,
    new_class: str,
) -> bool:
    """Whether the copy writes the source's own version back as it is (which S3 refuses
    unless the bucket keeps versions)."""
    return (
        source.bucket == ctx.bucket
        and source.key == ctx.key
        and source.version_id in (None, record.version_id)
        and metadata_directive == "COPY"
        and WEBSITE_REDIRECT not in ctx.headers
        and new_class == record.storage_class
    )


def _copy_template(
    ctx: S3Context, record: ObjectRecord, directives: tuple[str, str], new_class: str
) -> ObjectRecord:
    """The copy's record but for its data, owner and ACL: metadata and tags from the
    source (COPY) or the request (REPLACE), the requested storage class."""
    metadata_directive, tagging_directive = directives
    if metadata_directive == "REPLACE":
        template = ObjectRecord(
            bucket=ctx.bucket,
            key=ctx.key,
            content_type=ctx.headers.get("content-type") or CONTENT_TYPE_DEFAULT,
            metadata=user_metadata(ctx.headers.items()),
            system_metadata=system_metadata(ctx),
        )
    else:
        template = ObjectRecord(
            bucket=ctx.bucket,
            key=ctx.key,
            content_type=record.content_type,
            metadata=dict(record.metadata),
            system_metadata=_copied_system_metadata(ctx, record),
        )
    tags = (
        parse_tagging_header(ctx.headers.get("x-amz-tagging"))
        if tagging_directive == "REPLACE"
        else dict(record.tags)
    )
    return replace(template, storage_class=new_class, tags=tags)


def _copied_system_metadata(ctx: S3Context, source: ObjectRecord) -> dict[str, str]:
    """The source's system metadata, but for its website redirect location: that is the
    object's own, so a copy takes the request's, if any (as S3)."""
    copied = {
        k: v
        for k, v in source.system_metadata.items()
        if k not in (WEBSITE_REDIRECT, authorization.OBJECT_ACL)  # a copy's ACL is its own
    }
    redirect = ctx.headers.get(WEBSITE_REDIRECT)
    if redirect is not None:
        check_website_redirect(redirect)
        copied[WEBSITE_REDIRECT] = redirect
    return copied


def _copy_reads_source(source: ObjectRecord, algorithm_text: str | None) -> bool:
    """Whether the copy's checksum must be computed from the source's bytes
    (`_copy_checksums`)."""
    algorithm = parse_algorithm(algorithm_text) if algorithm_text else None
    if algorithm is None:
        return not source.checksums
    return not (source.checksums.get(algorithm) and source.checksums.get("type") == FULL_OBJECT)


async def _check_destination_conditions(
    ctx: S3Context, if_match: str | None, if_none_match: str | None
) -> None:
    """If-Match / If-None-Match of a write, against the key's current version as of the
    request's view, as the commit checks them (`versioning.check_write_conditions`)."""
    try:
        current = await ctx.store.catalog.get_object(ctx.bucket, ctx.key, view=ctx.view())
    except (NoSuchKeyError, DeleteMarkerError):
        latest_etag = None
    else:
        latest_etag = current.etag
    versioning.check_write_conditions(
        ctx.bucket, ctx.key, latest_etag, if_match=if_match, if_none_match=if_none_match
    )


async def _copy_checksums(
    ctx: S3Context, source: ObjectRecord, algorithm_text: str | None, source_key: bytes
) -> dict[str, str]:
    """The copy's checksums, as S3 gives them: the source's, unless another algorithm is
    asked for (x-amz-checksum-algorithm) or the source has none (S3's default is added);
    then a whole-object checksum of the source's bytes, read here."""
    algorithm = parse_algorithm(algorithm_text) if algorithm_text else None
    if algorithm is None:
        if source.checksums:
            return dict(source.checksums)
        algorithm = DEFAULT_ALGORITHM
    elif source.checksums.get(algorithm) and source.checksums.get("type") == FULL_OBJECT:
        return dict(source.checksums)
    checksum = new_checksum(algorithm)  # hashed as it streams, as a PUT's body is
    if source.size:
        key = await ctx.store.open_sse(source.sse, source_key)
        pieces_read = ctx.store.read(source, 0, source.size - 1, key=key)
        async with contextlib.aclosing(pieces_read) as pieces:
            async for piece in pieces:
                checksum.update(piece)
    return {algorithm: checksum.b64(), "type": FULL_OBJECT}


# ---------------------------------------------------------------------- tagging


async def _retag(ctx: S3Context, tags: dict[str, str]) -> ObjectRecord:
    """Replace the tags of one version by compare-and-swap of its record."""
    for _ in range(TAGGING_CAS_ATTEMPTS_MAX):
        record = await load_version(ctx)
        if await ctx.store.catalog.swap_object(record, replace(record, tags=tags)):
            return record
        await asyncio.sleep(0.01)
    raise S3Error("SlowDown")


async def restore_object(ctx: S3Context) -> Response:
    """RestoreObject: a tiered version's bytes copied back to the bookies for the days
    asked (blobstore/objects/restore.py), before the answer: 202 for a new copy, 200
    when one was there (its expiry moved)."""
    validate_key(ctx.key)
    bucket, record = await authorized_bucket_and_version(ctx)
    days = xml_requests.parse_restore_request(await ctx.small_body())
    record = await ctx.store.resolve(record)
    _, again = await ctx.store.restore_object(record, days)
    headers = version_headers(record.version_id, bucket.versioning)
    return Response(b"", status_code=200 if again else 202, headers=headers)


async def get_object_tagging(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket, record = await authorized_bucket_and_version(ctx)
    return xml_response(
        xml_responses.tagging(dict(sorted(record.tags.items()))),  # by key, whatever the order sent
        headers=version_headers(record.version_id, bucket.versioning),
    )


async def put_object_tagging(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket, _ = await authorized_bucket_and_version(ctx)
    tags = xml_requests.parse_tagging(await ctx.small_body())
    record = await _retag(ctx, tags)
    return Response(b"", headers=version_headers(record.version_id, bucket.versioning))


async def delete_object_tagging(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    bucket, _ = await authorized_bucket_and_version(ctx)
    record = await _retag(ctx, {})
    return Response(
        b"", status_code=204, headers=version_headers(record.version_id, bucket.versioning)
    )


# ---------------------------------------------------------------------- attributes


async def get_object_attributes(ctx: S3Context) -> Response:
    validate_key(ctx.key)
    wanted_text = ctx.headers.get("x-amz-object-attributes", "")
    wanted = {a.strip() for a in wanted_text.split(",") if a.strip()}
    if not wanted or not wanted <= set(OBJECT_ATTRIBUTES):
        raise S3Error(
            "InvalidArgument",
            "Invalid attribute name specified.",
            ArgumentName="x-amz-object-attributes",
            ArgumentValue=wanted_text,
        )
    bucket, record = await authorized_bucket_and_version(ctx)
    check_read_conditions(ctx.headers, record.etag, record.last_modified)
    if record.sse is not None and record.sse["m"] == "SSE-C":  # as S3: its key, checked
        await ctx.store.open_sse(record.sse, encryption.customer_key(ctx))
    max_parts = parse_max_count(ctx.headers.get("x-amz-max-parts"), name="max-parts")
    marker_text = ctx.headers.get("x-amz-part-number-marker", "0")
    marker = int(marker_text) if marker_text.isdigit() else 0
    if "ObjectParts" in wanted:
        record = await ctx.store.resolve(record)  # its part list may live in a manifest
    parts = [p for p in record.parts if p.part_number > marker]
    shown = parts[:max_parts]
    truncated = len(parts) > len(shown)
    body = xml_responses.get_object_attributes_response(
        etag=record.etag if "ETag" in wanted else None,
        checksums=record.checksums if "Checksum" in wanted else None,
        parts=shown if "ObjectParts" in wanted and record.parts else None,
        parts_count=len(record.parts) if "ObjectParts" in wanted and record.parts else None,
        part_number_marker=marker,
        next_part_number_marker=shown[-1].part_number if truncated and shown else None,
        max_parts=max_parts,
        is_truncated=truncated,
        storage_class=record.storage_class if "StorageClass" in wanted else None,
        object_size=record.size if "ObjectSize" in wanted else None,
    )
    headers = {"Last-Modified": http_date(record.last_modified)}
    headers.update(version_headers(record.version_id, bucket.versioning))
    return xml_response(body, headers=headers)
