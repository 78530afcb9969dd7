"""S3 XML documents: response builders and bounded, defused request parsers.

Builders return the UTF-8 bytes of a document in the S3 namespace, with elements in the
order S3 emits them and timestamps as `2026-11-20T23:18:56.000Z`. They take the catalog's
records (or anything with the same attribute names, see the Protocols below), so the
handlers pass what the catalog returned.

Parsers take the raw request body (at most REQUEST_XML_BYTES_MAX bytes), parse it with
defusedxml (no DTDs, entities or external references), accept the S3 namespace or none,
and raise MalformedXML (or the specific S3 error) on anything S3 would reject.
Configurations that the catalog stores (CORS, lifecycle) become JSON-able dicts that
render back to the same XML.
"""

from __future__ import annotations

import datetime
import re
import time
import unicodedata
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote_plus
from xml.etree.ElementTree import Element, ParseError
from xml.sax.saxutils import escape as _escape

import defusedxml.ElementTree as defused_element_tree
from defusedxml import DefusedXmlException

from s3api.errors import S3Error
from s3api.limits import (
    BUCKET_TAGS_MAX,
    DELETE_OBJECTS_MAX,
    OBJECT_TAGS_MAX,
    PART_NUMBER_MAX,
    REQUEST_XML_BYTES_MAX,
    TAG_KEY_LENGTH_MAX,
    TAG_VALUE_LENGTH_MAX,
)

__all__ = [
    "NAMESPACE",
    "CompletedPart",
    "DeleteError",
    "DeleteRequest",
    "Deleted",
    "ObjectToDelete",
    "complete_multipart_upload_result",
    "copy_object_result",
    "copy_part_result",
    "cors_configuration",
    "delete_result",
    "get_object_attributes_response",
    "initiate_multipart_upload_result",
    "iso_timestamp",
    "lifecycle_configuration",
    "list_all_my_buckets_result",
    "list_bucket_result_v1",
    "list_bucket_result_v2",
    "list_multipart_uploads_result",
    "list_parts_result",
    "list_versions_result",
    "location_constraint",
    "parse_complete_multipart_upload",
    "parse_cors_configuration",
    "parse_create_bucket_configuration",
    "parse_delete",
    "parse_lifecycle_configuration",
    "parse_tagging",
    "parse_versioning_configuration",
    "read_bounded",
    "tagging",
    "versioning_configuration",
]

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
_ENTITIES = {'"': "&quot;"}
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0d\x0e-\x1f]")
CORS_RULES_MAX = 100
LIFECYCLE_RULES_MAX = 1000
RULE_ID_LENGTH_MAX = 255
_CORS_METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD")


# ---------------------------------------------------------------------------- records


class BucketLike(Protocol):
    """What the builders read of a bucket record (blobstore.catalog.records.BucketRecord)."""

    @property
    def name(self) -> str: ...

    @property
    def created(self) -> float: ...

    @property
    def region(self) -> str: ...


class ObjectLike(Protocol):
    """What the builders read of an object record (ObjectRecord)."""

    @property
    def key(self) -> str: ...

    @property
    def version_id(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def etag(self) -> str: ...

    @property
    def last_modified(self) -> float: ...

    @property
    def storage_class(self) -> str: ...

    @property
    def owner(self) -> str: ...

    @property
    def is_delete_marker(self) -> bool: ...

    @property
    def is_latest(self) -> bool: ...

    @property
    def checksums(self) -> Mapping[str, str]: ...


class UploadLike(Protocol):
    """What the builders read of a multipart upload record (UploadRecord)."""

    @property
    def key(self) -> str: ...

    @property
    def upload_id(self) -> str: ...

    @property
    def initiated(self) -> float: ...

    @property
    def owner(self) -> str: ...

    @property
    def storage_class(self) -> str: ...

    @property
    def checksum_algorithm(self) -> str | None: ...

    @property
    def checksum_type(self) -> str | None: ...


class PartLike(Protocol):
    """What ListParts reads of a part record (PartRecord)."""

    @property
    def part_number(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def etag(self) -> str: ...

    @property
    def last_modified(self) -> float: ...

    @property
    def checksums(self) -> dict[str, str]: ...


class PartSizeLike(Protocol):
    """What GetObjectAttributes reads of a part (PartInfo or PartRecord)."""

    @property
    def part_number(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def checksums(self) -> dict[str, str]: ...


@dataclass(frozen=True, slots=True)
class Deleted:
    """One <Deleted> entry of DeleteResult."""

    key: str
    version_id: str | None = None
    delete_marker: bool = False
    delete_marker_version_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteError:
    """One <Error> entry of DeleteResult."""

    key: str
    code: str
    message: str
    version_id: str | None = None


@dataclass(frozen=True, slots=True)
class ObjectToDelete:
    key: str
    version_id: str | None = None
    etag: str | None = None  # delete only if the current version has it ("*": exists)


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    quiet: bool
    objects: tuple[ObjectToDelete, ...]


@dataclass(frozen=True, slots=True)
class CompletedPart:
    """One <Part> of CompleteMultipartUpload: number, ETag (unquoted), checksums (b64)."""

    part_number: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------- writing


def iso_timestamp(epoch_seconds: float) -> str:
    """S3's XML timestamp with milliseconds: 2026-11-20T23:18:56.000Z."""
    whole = int(epoch_seconds // 1)
    millis = int(round((epoch_seconds - whole) * 1000))
    if millis == 1000:
        whole, millis = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def _char_reference(match: re.Match[str]) -> str:
    return f"&#{ord(match.group())};"


def _text(value: object) -> str:
    """Escape for element text; carriage returns and control characters (legal in keys)
    become character references, as S3 writes them, so parsers cannot fold them away."""
    text = _escape(str(value), _ENTITIES)
    return _CONTROL.sub(_char_reference, text) if _CONTROL.search(text) else text


class _Doc:
    """A tiny append-only XML writer (S3 documents are flat and small per element)."""

    __slots__ = ("_parts",)

    def __init__(self, root: str, namespace: bool = True) -> None:
        xmlns = f' xmlns="{NAMESPACE}"' if namespace else ""
        self._parts = [_DECLARATION, f"<{root}{xmlns}>"]

    def open(self, name: str) -> None:
        self._parts.append(f"<{name}>")

    def close(self, name: str) -> None:
        self._parts.append(f"</{name}>")

    def add(self, name: str, value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool):
            value = "true" if value else "false"
        self._parts.append(f"<{name}>{_text(value)}</{name}>")

    def empty(self, name: str) -> None:
        self._parts.append(f"<{name}></{name}>")

    def raw(self, markup: str) -> None:
        """Markup written as given (an element with attributes): never client text."""
        self._parts.append(markup)

    def done(self, root: str) -> bytes:
        self._parts.append(f"</{root}>")
        return "".join(self._parts).encode("utf-8")


def _quoted(etag: str) -> str:
    return etag if etag.startswith('"') else f'"{etag}"'


def _encode(value: str | None, encoding_type: str | None) -> str | None:
    if value is None or encoding_type != "url":
        return value
    return quote_plus(value, safe="/")


def _owner(doc: _Doc, owner: str, tag: str = "Owner") -> None:
    doc.open(tag)
    doc.add("ID", owner)
    doc.add("DisplayName", owner)
    doc.close(tag)


def _checksums(doc: _Doc, checksums: Mapping[str, str] | None, *, with_type: bool = True) -> None:
    if not checksums:
        return
    for algorithm in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"):
        value = checksums.get(algorithm)
        if value:
            doc.add(f"Checksum{algorithm}", value)
    if with_type and checksums.get("type"):
        doc.add("ChecksumType", checksums["type"])


def list_all_my_buckets_result(
    buckets: Iterable[BucketLike],
    owner: str,
    *,
    prefix: str | None = None,
    continuation_token: str | None = None,
) -> bytes:
    doc = _Doc("ListAllMyBucketsResult")
    _owner(doc, owner)
    doc.open("Buckets")
    for bucket in buckets:
        doc.open("Bucket")
        doc.add("Name", bucket.name)
        doc.add("CreationDate", iso_timestamp(bucket.created))
        doc.add("BucketRegion", bucket.region)
        doc.close("Bucket")
    doc.close("Buckets")
    doc.add("ContinuationToken", continuation_token)
    doc.add("Prefix", prefix)
    return doc.done("ListAllMyBucketsResult")


def _contents(doc: _Doc, item: ObjectLike, encoding_type: str | None, fetch_owner: bool) -> None:
    doc.open("Contents")
    doc.add("Key", _encode(item.key, encoding_type))
    doc.add("LastModified", iso_timestamp(item.last_modified))
    doc.add("ETag", _quoted(item.etag))
    algorithms = [
        a for a in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256") if a in (item.checksums or {})
    ]
    for algorithm in algorithms:
        doc.add("ChecksumAlgorithm", algorithm)
    if algorithms and item.checksums.get("type"):
        doc.add("ChecksumType", item.checksums["type"])
    doc.add("Size", item.size)
    if fetch_owner:
        _owner(doc, item.owner)
    doc.add("StorageClass", item.storage_class or "STANDARD")
    doc.close("Contents")


def _common_prefixes(doc: _Doc, prefixes: Iterable[str], encoding_type: str | None) -> None:
    for prefix in prefixes:
        doc.open("CommonPrefixes")
        doc.add("Prefix", _encode(prefix, encoding_type))
        doc.close("CommonPrefixes")


def list_bucket_result_v1(
    bucket: str,
    *,
    prefix: str,
    delimiter: str,
    marker: str,
    max_keys: int,
    is_truncated: bool,
    next_marker: str | None,
    contents: Sequence[ObjectLike],
    common_prefixes: Sequence[str],
    encoding_type: str | None = None,
) -> bytes:
    """ListObjects (v1). next_marker is sent only when a delimiter was given, as S3 does."""
    doc = _Doc("ListBucketResult")
    doc.add("Name", bucket)
    doc.add("Prefix", _encode(prefix, encoding_type))
    doc.add("Marker", _encode(marker, encoding_type))
    if is_truncated and delimiter and next_marker:
        doc.add("NextMarker", _encode(next_marker, encoding_type))
    doc.add("MaxKeys", max_keys)
    if delimiter:
        doc.add("Delimiter", _encode(delimiter, encoding_type))
    doc.add("EncodingType", encoding_type)
    doc.add("IsTruncated", is_truncated)
    for item in contents:
        _contents(doc, item, encoding_type, fetch_owner=True)
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.done("ListBucketResult")


def list_bucket_result_v2(
    bucket: str,
    *,
    prefix: str,
    delimiter: str,
    max_keys: int,
    is_truncated: bool,
    contents: Sequence[ObjectLike],
    common_prefixes: Sequence[str],
    continuation_token: str | None = None,
    next_continuation_token: str | None = None,
    start_after: str | None = None,
    fetch_owner: bool = False,
    encoding_type: str | None = None,
) -> bytes:
    """ListObjectsV2; KeyCount counts contents plus common prefixes."""
    doc = _Doc("ListBucketResult")
    doc.add("Name", bucket)
    doc.add("Prefix", _encode(prefix, encoding_type))
    if delimiter:
        doc.add("Delimiter", _encode(delimiter, encoding_type))
    doc.add("MaxKeys", max_keys)
    doc.add("EncodingType", encoding_type)
    doc.add("KeyCount", len(contents) + len(common_prefixes))
    doc.add("IsTruncated", is_truncated)
    doc.add("ContinuationToken", continuation_token)
    if is_truncated:
        doc.add("NextContinuationToken", next_continuation_token)
    doc.add("StartAfter", _encode(start_after, encoding_type) if start_after else None)
    for item in contents:
        _contents(doc, item, encoding_type, fetch_owner=fetch_owner)
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.done("ListBucketResult")


def list_versions_result(
    bucket: str,
    *,
    prefix: str,
    delimiter: str,
    key_marker: str,
    version_id_marker: str,
    max_keys: int,
    is_truncated: bool,
    next_key_marker: str | None,
    next_version_id_marker: str | None,
    versions: Sequence[ObjectLike],
    common_prefixes: Sequence[str],
    encoding_type: str | None = None,
) -> bytes:
    """ListObjectVersions: <Version> and <DeleteMarker> entries in the order given."""
    doc = _Doc("ListVersionsResult")
    doc.add("Name", bucket)
    doc.add("Prefix", _encode(prefix, encoding_type))
    doc.add("KeyMarker", _encode(key_marker, encoding_type))
    doc.add("VersionIdMarker", version_id_marker)
    if is_truncated:
        doc.add("NextKeyMarker", _encode(next_key_marker, encoding_type))
        doc.add("NextVersionIdMarker", next_version_id_marker)
    doc.add("MaxKeys", max_keys)
    if delimiter:
        doc.add("Delimiter", _encode(delimiter, encoding_type))
    doc.add("EncodingType", encoding_type)
    doc.add("IsTruncated", is_truncated)
    for item in versions:
        tag = "DeleteMarker" if item.is_delete_marker else "Version"
        doc.open(tag)
        doc.add("Key", _encode(item.key, encoding_type))
        doc.add("VersionId", item.version_id)
        doc.add("IsLatest", bool(item.is_latest))
        doc.add("LastModified", iso_timestamp(item.last_modified))
        if not item.is_delete_marker:
            doc.add("ETag", _quoted(item.etag))
            algorithms = [
                a
                for a in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")
                if a in (item.checksums or {})
            ]
            for algorithm in algorithms:
                doc.add("ChecksumAlgorithm", algorithm)
            if algorithms and item.checksums.get("type"):
                doc.add("ChecksumType", item.checksums["type"])
            doc.add("Size", item.size)
            doc.add("StorageClass", item.storage_class or "STANDARD")
        _owner(doc, item.owner)
        doc.close(tag)
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.done("ListVersionsResult")


def initiate_multipart_upload_result(bucket: str, key: str, upload_id: str) -> bytes:
    doc = _Doc("InitiateMultipartUploadResult")
    doc.add("Bucket", bucket)
    doc.add("Key", key)
    doc.add("UploadId", upload_id)
    return doc.done("InitiateMultipartUploadResult")


def complete_multipart_upload_result(
    location: str,
    bucket: str,
    key: str,
    etag: str,
    checksums: Mapping[str, str] | None = None,
) -> bytes:
    doc = _Doc("CompleteMultipartUploadResult")
    doc.add("Location", location)
    doc.add("Bucket", bucket)
    doc.add("Key", key)
    doc.add("ETag", _quoted(etag))
    _checksums(doc, checksums)
    return doc.done("CompleteMultipartUploadResult")


def list_parts_result(
    bucket: str,
    key: str,
    upload_id: str,
    *,
    part_number_marker: int,
    next_part_number_marker: int | None,
    max_parts: int,
    is_truncated: bool,
    parts: Sequence[PartLike],
    owner: str,
    storage_class: str = "STANDARD",
    checksum_algorithm: str | None = None,
    checksum_type: str | None = None,
) -> bytes:
    doc = _Doc("ListPartsResult")
    doc.add("Bucket", bucket)
    doc.add("Key", key)
    doc.add("UploadId", upload_id)
    doc.add("PartNumberMarker", part_number_marker)
    if next_part_number_marker is not None:
        doc.add("NextPartNumberMarker", next_part_number_marker)
    doc.add("MaxParts", max_parts)
    doc.add("IsTruncated", is_truncated)
    for part in parts:
        doc.open("Part")
        doc.add("PartNumber", part.part_number)
        doc.add("LastModified", iso_timestamp(part.last_modified))
        doc.add("ETag", _quoted(part.etag))
        _checksums(doc, part.checksums, with_type=False)
        doc.add("Size", part.size)
        doc.close("Part")
    _owner(doc, owner, "Initiator")
    _owner(doc, owner)
    doc.add("StorageClass", storage_class)
    doc.add("ChecksumAlgorithm", checksum_algorithm or None)
    doc.add("ChecksumType", checksum_type or None)
    return doc.done("ListPartsResult")


def list_multipart_uploads_result(
    bucket: str,
    *,
    prefix: str,
    delimiter: str,
    key_marker: str,
    upload_id_marker: str,
    next_key_marker: str | None,
    next_upload_id_marker: str | None,
    max_uploads: int,
    is_truncated: bool,
    uploads: Sequence[UploadLike],
    common_prefixes: Sequence[str],
    encoding_type: str | None = None,
) -> bytes:
    doc = _Doc("ListMultipartUploadsResult")
    doc.add("Bucket", bucket)
    doc.add("KeyMarker", _encode(key_marker, encoding_type))
    doc.add("UploadIdMarker", upload_id_marker)
    doc.add("NextKeyMarker", _encode(next_key_marker or "", encoding_type))
    doc.add("NextUploadIdMarker", next_upload_id_marker or "")
    doc.add("Prefix", _encode(prefix, encoding_type))
    if delimiter:
        doc.add("Delimiter", _encode(delimiter, encoding_type))
    doc.add("MaxUploads", max_uploads)
    doc.add("EncodingType", encoding_type)
    doc.add("IsTruncated", is_truncated)
    for upload in uploads:
        doc.open("Upload")
        doc.add("Key", _encode(upload.key, encoding_type))
        doc.add("UploadId", upload.upload_id)
        _owner(doc, upload.owner, "Initiator")
        _owner(doc, upload.owner)
        doc.add("StorageClass", upload.storage_class or "STANDARD")
        doc.add("Initiated", iso_timestamp(upload.initiated))
        doc.add("ChecksumAlgorithm", upload.checksum_algorithm or None)
        doc.add("ChecksumType", upload.checksum_type or None)
        doc.close("Upload")
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.done("ListMultipartUploadsResult")


def copy_object_result(
    etag: str, last_modified: float, checksums: Mapping[str, str] | None = None
) -> bytes:
    doc = _Doc("CopyObjectResult")
    doc.add("ETag", _quoted(etag))
    doc.add("LastModified", iso_timestamp(last_modified))
    _checksums(doc, checksums)
    return doc.done("CopyObjectResult")


def copy_part_result(
    etag: str, last_modified: float, checksums: Mapping[str, str] | None = None
) -> bytes:
    doc = _Doc("CopyPartResult")
    doc.add("ETag", _quoted(etag))
    doc.add("LastModified", iso_timestamp(last_modified))
    _checksums(doc, checksums, with_type=False)
    return doc.done("CopyPartResult")


def delete_result(deleted: Iterable[Deleted], errors: Iterable[DeleteError]) -> bytes:
    """DeleteObjects; pass no `deleted` entries in quiet mode."""
    doc = _Doc("DeleteResult")
    for entry in deleted:
        doc.open("Deleted")
        doc.add("Key", entry.key)
        doc.add("VersionId", entry.version_id)
        if entry.delete_marker:
            doc.add("DeleteMarker", True)
            doc.add("DeleteMarkerVersionId", entry.delete_marker_version_id)
        doc.close("Deleted")
    for error in errors:
        doc.open("Error")
        doc.add("Key", error.key)
        doc.add("VersionId", error.version_id)
        doc.add("Code", error.code)
        doc.add("Message", error.message)
        doc.close("Error")
    return doc.done("DeleteResult")


def location_constraint(region: str) -> bytes:
    """GetBucketLocation: empty for us-east-1, as S3 answers."""
    doc = _Doc("LocationConstraint")
    if region and region != "us-east-1":
        doc._parts.append(_text(region))
    return doc.done("LocationConstraint")


def versioning_configuration(status: str) -> bytes:
    """GetBucketVersioning: no Status element when versioning was never set."""
    doc = _Doc("VersioningConfiguration")
    doc.add("Status", status or None)
    return doc.done("VersioningConfiguration")


def tagging(tags: Mapping[str, str]) -> bytes:
    doc = _Doc("Tagging")
    doc.open("TagSet")
    for key, value in tags.items():
        doc.open("Tag")
        doc.add("Key", key)
        doc.add("Value", value)
        doc.close("Tag")
    doc.close("TagSet")
    return doc.done("Tagging")


def _render_value(doc: _Doc, name: str, value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _render_value(doc, name, item)
    elif isinstance(value, dict):
        doc.open(name)
        for child_name, child in value.items():
            _render_value(doc, child_name, child)
        doc.close(name)
    else:
        doc.add(name, value)


def cors_configuration(rules: Sequence[Mapping[str, Any]]) -> bytes:
    """GetBucketCors from the rules parse_cors_configuration returned."""
    doc = _Doc("CORSConfiguration")
    for rule in rules:
        _render_value(doc, "CORSRule", dict(rule))
    return doc.done("CORSConfiguration")


def lifecycle_configuration(rules: Sequence[Mapping[str, Any]]) -> bytes:
    """GetBucketLifecycleConfiguration from the rules parse_lifecycle_configuration returned."""
    doc = _Doc("LifecycleConfiguration")
    for rule in rules:
        _render_value(doc, "Rule", dict(rule))
    return doc.done("LifecycleConfiguration")


def get_object_attributes_response(
    *,
    etag: str | None = None,
    checksums: Mapping[str, str] | None = None,
    parts: Sequence[PartSizeLike] | None = None,
    parts_count: int | None = None,
    part_number_marker: int = 0,
    next_part_number_marker: int | None = None,
    max_parts: int = 1000,
    is_truncated: bool = False,
    storage_class: str | None = None,
    object_size: int | None = None,
) -> bytes:
    """GetObjectAttributes: only the attributes asked for are passed (others stay None).

    ETag is unquoted here, as S3 returns it in this document.
    """
    doc = _Doc("GetObjectAttributesResponse")
    doc.add("ETag", etag.strip('"') if etag is not None else None)
    if checksums:
        doc.open("Checksum")
        _checksums(doc, checksums)
        doc.close("Checksum")
    if parts_count is not None:
        doc.open("ObjectParts")
        doc.add("PartsCount", parts_count)
        doc.add("PartNumberMarker", part_number_marker)
        if next_part_number_marker is not None:
            doc.add("NextPartNumberMarker", next_part_number_marker)
        doc.add("MaxParts", max_parts)
        doc.add("IsTruncated", is_truncated)
        for part in parts or ():
            doc.open("Part")
            doc.add("PartNumber", part.part_number)
            doc.add("Size", part.size)
            _checksums(doc, part.checksums, with_type=False)
            doc.close("Part")
        doc.close("ObjectParts")
    doc.add("StorageClass", storage_class)
    doc.add("ObjectSize", object_size)
    return doc.done("GetObjectAttributesResponse")


# ---------------------------------------------------------------------------- reading


async def read_bounded(source: AsyncIterable[bytes], limit: int = REQUEST_XML_BYTES_MAX) -> bytes:
    """Read a request body meant for XML parsing, refusing more than limit bytes."""
    buffer = bytearray()
    async for data in source:
        buffer += data
        if len(buffer) > limit:
            raise S3Error(
                "MalformedXML", "The XML you provided was larger than the maximum allowed size"
            )
    return bytes(buffer)


def _malformed() -> S3Error:
    return S3Error("MalformedXML")


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _parse(body: bytes, root: str) -> Element:
    if len(body) > REQUEST_XML_BYTES_MAX:
        raise S3Error(
            "MalformedXML", "The XML you provided was larger than the maximum allowed size"
        )
    if not body.strip():
        raise _malformed()
    try:
        element: Element = defused_element_tree.fromstring(body, forbid_dtd=True)
    except (ParseError, DefusedXmlException, ValueError, UnicodeError):
        raise _malformed() from None
    if _local(element.tag) != root:
        raise _malformed()
    return element


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element if _local(child.tag) == name]


def _child(element: Element, name: str) -> Element | None:
    found = _children(element, name)
    if len(found) > 1:
        raise _malformed()
    return found[0] if found else None


def _child_text(element: Element, name: str, *, required: bool = False) -> str | None:
    child = _child(element, name)
    if child is None:
        if required:
            raise _malformed()
        return None
    if len(child):
        raise _malformed()
    return child.text or ""


def _int(text: str | None) -> int:
    if text is None or not text.strip().isdigit() or not text.strip().isascii():
        raise _malformed()
    return int(text.strip())


def parse_create_bucket_configuration(body: bytes) -> str | None:
    """CreateBucket's optional body -> LocationConstraint (None when no body or no element)."""
    if not body.strip():
        return None
    element = _parse(body, "CreateBucketConfiguration")
    region = _child_text(element, "LocationConstraint")
    return region or None


def parse_versioning_configuration(body: bytes) -> str:
    """PutBucketVersioning -> "Enabled" | "Suspended"; MFADelete Enabled is NotImplemented."""
    element = _parse(body, "VersioningConfiguration")
    status = _child_text(element, "Status")
    mfa_delete = _child_text(element, "MfaDelete") or _child_text(element, "MFADelete")
    if mfa_delete == "Enabled":
        raise S3Error("NotImplemented", "MFA Delete is not supported")
    if status not in ("Enabled", "Suspended"):
        raise _malformed()
    return status


# Besides letters, numbers and spaces (any Unicode separator), what a bucket's tag keys
# and values may contain: AWS's rule for resource tags, `^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$`.
_TAG_PUNCTUATION = frozenset("_.:/=+-@")


def _resource_tag_text(text: str) -> bool:
    return all(
        c.isalnum() or c in _TAG_PUNCTUATION or unicodedata.category(c).startswith("Z")
        for c in text
    )


def parse_tagging(body: bytes, *, bucket: bool = False) -> dict[str, str]:
    """PutObjectTagging / PutBucketTagging -> {key: value} (InvalidTag on S3's rules;
    a bucket's tags are resource tags, held to AWS's character set too)."""
    element = _parse(body, "Tagging")
    tag_set = _child(element, "TagSet")
    if tag_set is None:
        raise _malformed()
    tags: dict[str, str] = {}
    limit = BUCKET_TAGS_MAX if bucket else OBJECT_TAGS_MAX
    for tag in _children(tag_set, "Tag"):
        key = _child_text(tag, "Key", required=True)
        value = _child_text(tag, "Value", required=True)
        assert key is not None and value is not None
        if not key or len(key) > TAG_KEY_LENGTH_MAX or bucket and not _resource_tag_text(key):
            raise S3Error("InvalidTag", "The TagKey you have provided is invalid")
        if len(value) > TAG_VALUE_LENGTH_MAX or bucket and not _resource_tag_text(value):
            raise S3Error("InvalidTag", "The TagValue you have provided is invalid")
        if key.startswith("aws:"):
            raise S3Error("InvalidTag", "Your TagKey cannot be prefixed with aws:")
        if key in tags:
            raise S3Error(
                "InvalidTag", "Cannot provide multiple Tags with the same key", TagKey=key
            )
        tags[key] = value
        if len(tags) > limit:
            what = "Bucket tag count" if bucket else "Object tags"
            raise S3Error("InvalidTag", f"{what} cannot be greater than {limit}")
    return tags


def parse_cors_configuration(body: bytes) -> list[dict[str, Any]]:
    """PutBucketCors -> rules as JSON-able dicts (lists for the repeatable elements)."""
    element = _parse(body, "CORSConfiguration")
    rules_xml = _children(element, "CORSRule")
    if not rules_xml or len(rules_xml) > CORS_RULES_MAX:
        raise _malformed()
    rules: list[dict[str, Any]] = []
    for rule_xml in rules_xml:
        rule: dict[str, Any] = {}
        rule_id = _child_text(rule_xml, "ID")
        if rule_id is not None:
            if len(rule_id) > RULE_ID_LENGTH_MAX:
                raise S3Error("InvalidArgument", "ID length should not exceed allowed limit of 255")
            rule["ID"] = rule_id
        for name in ("AllowedHeader", "AllowedMethod", "AllowedOrigin", "ExposeHeader"):
            values = [(child.text or "").strip() for child in _children(rule_xml, name)]
            if values:
                rule[name] = values
        if not rule.get("AllowedMethod") or not rule.get("AllowedOrigin"):
            raise _malformed()
        for name in ("AllowedOrigin", "AllowedHeader"):
            for value in rule.get(name, ()):
                if value.count("*") > 1:
                    raise S3Error(
                        "InvalidRequest",
                        f'{name} "{value}" can not have more than one wildcard.',
                    )
        for method in rule["AllowedMethod"]:
            if method not in _CORS_METHODS:
                raise S3Error(
                    "InvalidRequest",
                    "Found unsupported HTTP method in CORS config. Unsupported method is " + method,
                )
        max_age = _child_text(rule_xml, "MaxAgeSeconds")
        if max_age is not None:
            rule["MaxAgeSeconds"] = _int(max_age)
        known = {
            "ID",
            "AllowedHeader",
            "AllowedMethod",
            "AllowedOrigin",
            "ExposeHeader",
            "MaxAgeSeconds",
        }
        if any(_local(child.tag) not in known for child in rule_xml):
            raise _malformed()
        rules.append(rule)
    return rules


# Lifecycle elements S3 accepts, by parent: child name -> (kind, repeatable).
# kind "text" / "int" / "bool" / "date" are leaves; anything else names a nested element.
_LIFECYCLE_SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "Rule": {
        "ID": ("text", False),
        "Prefix": ("text", False),
        "Filter": ("Filter", False),
        "Status": ("text", False),
        "Expiration": ("Expiration", False),
        "Transition": ("Transition", True),
        "NoncurrentVersionExpiration": ("NoncurrentVersionExpiration", False),
        "NoncurrentVersionTransition": ("NoncurrentVersionTransition", True),
        "AbortIncompleteMultipartUpload": ("AbortIncompleteMultipartUpload", False),
    },
    "Filter": {
        "Prefix": ("text", False),
        "Tag": ("Tag", False),
        "ObjectSizeGreaterThan": ("int", False),
        "ObjectSizeLessThan": ("int", False),
        "And": ("And", False),
    },
    "And": {
        "Prefix": ("text", False),
        "Tag": ("Tag", True),
        "ObjectSizeGreaterThan": ("int", False),
        "ObjectSizeLessThan": ("int", False),
    },
    "Tag": {"Key": ("text", False), "Value": ("text", False)},
    "Expiration": {
        "Days": ("int", False),
        "Date": ("date", False),
        "ExpiredObjectDeleteMarker": ("bool", False),
    },
    "Transition": {
        "Days": ("int", False),
        "Date": ("date", False),
        "StorageClass": ("text", False),
    },
    "NoncurrentVersionExpiration": {
        "NoncurrentDays": ("int", False),
        "NewerNoncurrentVersions": ("int", False),
    },
    "NoncurrentVersionTransition": {
        "NoncurrentDays": ("int", False),
        "NewerNoncurrentVersions": ("int", False),
        "StorageClass": ("text", False),
    },
    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ("int", False)},
}
_LIFECYCLE_ACTIONS = (
    "Expiration",
    "Transition",
    "NoncurrentVersionExpiration",
    "NoncurrentVersionTransition",
    "AbortIncompleteMultipartUpload",
)


def _lifecycle_element(element: Element, kind: str) -> dict[str, Any]:
    schema = _LIFECYCLE_SCHEMA[kind]
    result: dict[str, Any] = {}
    for child in element:
        name = _local(child.tag)
        if name not in schema:
            raise _malformed()
        child_kind, repeatable = schema[name]
        if child_kind in _LIFECYCLE_SCHEMA:
            value: Any = _lifecycle_element(child, child_kind)
        else:
            if len(child):
                raise _malformed()
            text = (child.text or "").strip()
            if child_kind == "int":
                value = _int(text)
            elif child_kind == "bool":
                if text not in ("true", "false"):
                    raise _malformed()
                value = text == "true"
            elif child_kind == "date":
                if len(text) < 10 or not text[:4].isdigit():
                    raise S3Error("InvalidArgument", "'Date' must be at midnight GMT")
                value = text
            else:
                value = child.text or ""
        if repeatable:
            result.setdefault(name, []).append(value)
        elif name in result:
            raise _malformed()
        else:
            result[name] = value
    return result


def parse_lifecycle_configuration(body: bytes) -> list[dict[str, Any]]:
    """PutBucketLifecycleConfiguration -> rules as JSON-able dicts, structure validated."""
    element = _parse(body, "LifecycleConfiguration")
    rules_xml = _children(element, "Rule")
    if not rules_xml or len(rules_xml) > LIFECYCLE_RULES_MAX or len(rules_xml) != len(element):
        raise _malformed()
    rules = []
    ids: set[str] = set()
    for rule_xml in rules_xml:
        rule = _lifecycle_element(rule_xml, "Rule")
        if rule.get("Status") not in ("Enabled", "Disabled"):
            raise _malformed()
        if "Filter" in rule and "Prefix" in rule:
            raise _malformed()
        rule_id = rule.get("ID")
        if rule_id is not None:
            if len(rule_id) > RULE_ID_LENGTH_MAX:
                raise S3Error("InvalidArgument", "ID length should not exceed allowed limit of 255")
            if rule_id in ids:
                raise S3Error(
                    "InvalidArgument",
                    "Rule ID must be unique. Found same ID for more than one rule",
                )
            ids.add(rule_id)
        if not any(action in rule for action in _LIFECYCLE_ACTIONS):
            raise _malformed()
        lifecycle_filter = rule.get("Filter")
        if lifecycle_filter is not None and len(lifecycle_filter) > 1:
            raise _malformed()
        expiration = rule.get("Expiration")
        if expiration is not None and len(expiration) != 1:
            raise _malformed()
        _check_lifecycle_values(rule)
        rules.append(rule)
    return rules


# Where a lifecycle transition may send objects, and the least age for each that has one.
_TRANSITION_CLASSES = {
    "GLACIER": 0,
    "GLACIER_IR": 0,
    "DEEP_ARCHIVE": 0,
    "INTELLIGENT_TIERING": 0,
    "STANDARD_IA": 30,
    "ONEZONE_IA": 30,
}


def _check_lifecycle_values(rule: dict[str, Any]) -> None:
    """The values S3 checks in a rule: ages in days (positive for expirations, at least
    the class's minimum for transitions), dates at midnight UTC, transition classes, and
    no tag filter with AbortIncompleteMultipartUpload."""

    def positive(value: int | None, field: str, action: str) -> None:
        if value is not None and value <= 0:
            raise S3Error(
                "InvalidArgument", f"'{field}' for {action} action must be a positive integer"
            )

    expiration = rule.get("Expiration", {})
    positive(expiration.get("Days"), "Days", "Expiration")
    positive(
        rule.get("NoncurrentVersionExpiration", {}).get("NoncurrentDays"),
        "NoncurrentDays",
        "NoncurrentVersionExpiration",
    )
    positive(
        rule.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation"),
        "DaysAfterInitiation",
        "AbortIncompleteMultipartUpload",
    )
    for date in [expiration.get("Date")] + [t.get("Date") for t in rule.get("Transition", [])]:
        if date is not None:
            _midnight_utc(date)
    transitions = [(t, "Days", "Transition") for t in rule.get("Transition", [])]
    transitions += [
        (t, "NoncurrentDays", "NoncurrentVersionTransition")
        for t in rule.get("NoncurrentVersionTransition", [])
    ]
    for transition, age_field, action in transitions:
        target = transition.get("StorageClass")
        if target not in _TRANSITION_CLASSES:
            raise _malformed()
        age = transition.get(age_field)
        if age is not None and age < _TRANSITION_CLASSES[target]:
            raise S3Error(
                "InvalidArgument",
                f"'{age_field}' in {action} action must be greater than or equal to "
                f"{_TRANSITION_CLASSES[target]} for storageClass '{target}'",
            )
    if "AbortIncompleteMultipartUpload" in rule:
        lifecycle_filter = rule.get("Filter", {})
        if "Tag" in lifecycle_filter or lifecycle_filter.get("And", {}).get("Tag"):
            raise S3Error(
                "InvalidRequest", "AbortIncompleteMultipartUpload cannot be specified with Tags."
            )


def _midnight_utc(text: str) -> None:
    """A lifecycle date: ISO 8601, at midnight UTC (InvalidArgument otherwise)."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if (
        moment is None
        or moment.utcoffset() not in (None, datetime.timedelta(0))
        or (moment.hour, moment.minute, moment.second, moment.microsecond) != (0, 0, 0, 0)
    ):
        raise S3Error("InvalidArgument", "'Date' must be at midnight GMT")


def parse_delete(body: bytes) -> DeleteRequest:
    """DeleteObjects: up to 1,000 keys; more (or none) is MalformedXML, as S3 answers."""
    element = _parse(body, "Delete")
    quiet_text = _child_text(element, "Quiet")
    if quiet_text is not None and quiet_text.strip().lower() not in ("true", "false"):
        raise _malformed()
    quiet = quiet_text is not None and quiet_text.strip().lower() == "true"
    objects = []
    for item in _children(element, "Object"):
        key = _child_text(item, "Key", required=True)
        assert key is not None
        # An empty <VersionId/> names no version (answered NoSuchVersion), not the latest.
        version_id = _child_text(item, "VersionId")
        # A conditional delete of this key: its current version's ETag (or "*"). The
        # conditions S3 takes only in directory buckets are refused, not ignored.
        etag_text = _child_text(item, "ETag")
        etag = None if etag_text is None else etag_text.strip().removeprefix("W/").strip('"')
        if etag == "":
            raise _malformed()
        if etag is not None and "," in etag:  # one ETag, as DeleteObject's If-Match
            raise S3Error("NotImplemented", "A conditional delete names one ETag (or *)")
        for name in ("LastModifiedTime", "Size"):
            if _child(item, name) is not None:
                raise S3Error(
                    "NotImplemented", f"Conditional deletes by {name} are not implemented"
                )
        objects.append(ObjectToDelete(key, version_id, etag))
        if len(objects) > DELETE_OBJECTS_MAX:
            raise _malformed()
    if not objects:
        raise _malformed()
    return DeleteRequest(quiet, tuple(objects))


def parse_complete_multipart_upload(body: bytes) -> list[CompletedPart]:
    """CompleteMultipartUpload -> parts in ascending order (InvalidPartOrder otherwise)."""
    element = _parse(body, "CompleteMultipartUpload")
    parts: list[CompletedPart] = []
    for item in _children(element, "Part"):
        number = _int(_child_text(item, "PartNumber", required=True))
        if not 1 <= number <= PART_NUMBER_MAX:
            raise S3Error(
                "InvalidArgument",
                f"Part number must be an integer between 1 and {PART_NUMBER_MAX}, inclusive",
                ArgumentName="partNumber",
                ArgumentValue=number,
            )
        etag = _child_text(item, "ETag", required=True)
        assert etag is not None
        checksums = {}
        for algorithm in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"):
            value = _child_text(item, f"Checksum{algorithm}")
            if value:
                checksums[algorithm] = value.strip()
        if parts and number <= parts[-1].part_number:
            raise S3Error("InvalidPartOrder")
        parts.append(CompletedPart(number, etag.strip().strip('"'), checksums))
        if len(parts) > PART_NUMBER_MAX:
            raise S3Error("TooManyParts")
    if not parts:
        raise _malformed()
    return parts


# --------------------------------------------------------------------------- ACLs

_XSI = "http://www.w3.org/2001/XMLSchema-instance"


def access_control_policy(owner: str) -> bytes:
    """GetBucketAcl / GetObjectAcl: the one grant there is, the owner's FULL_CONTROL
    (what S3 shows for a bucket or object with the default `private` ACL)."""
    doc = _Doc("AccessControlPolicy")
    _owner(doc, owner)
    doc.open("AccessControlList")
    doc.open("Grant")
    doc.raw(f'<Grantee xmlns:xsi="{_XSI}" xsi:type="CanonicalUser">')
    doc.add("ID", owner)
    doc.add("DisplayName", owner)
    doc.close("Grantee")
    doc.add("Permission", "FULL_CONTROL")
    doc.close("Grant")
    doc.close("AccessControlList")
    return doc.done("AccessControlPolicy")


def acl_grants_only_owner(body: bytes, owner: str) -> bool:
    """PutBucketAcl / PutObjectAcl body: whether it grants FULL_CONTROL to `owner` and
    nothing to anyone else (the `private` ACL written out); MalformedXML if it is not an
    AccessControlPolicy."""
    element = _parse(body, "AccessControlPolicy")
    acl = _child(element, "AccessControlList")
    if acl is None:
        raise _malformed()
    grants = _children(acl, "Grant")
    for grant in grants:
        grantee = _child(grant, "Grantee")
        if grantee is None:
            raise _malformed()
        if _child_text(grant, "Permission") != "FULL_CONTROL":
            return False
        if _child_text(grantee, "ID") != owner or _child(grantee, "URI") is not None:
            return False
    return bool(grants)


def empty_configuration(root: str) -> bytes:
    """A bucket configuration document with nothing set (GetBucketLogging,
    GetBucketNotificationConfiguration, GetBucketAccelerateConfiguration)."""
    doc = _Doc(root)
    return doc.done(root)


def request_payment_configuration() -> bytes:
    doc = _Doc("RequestPaymentConfiguration")
    doc.add("Payer", "BucketOwner")
    return doc.done("RequestPaymentConfiguration")


def ownership_controls(ownership: str) -> bytes:
    doc = _Doc("OwnershipControls")
    doc.open("Rule")
    doc.add("ObjectOwnership", ownership)
    doc.close("Rule")
    return doc.done("OwnershipControls")
