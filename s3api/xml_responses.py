"""S3 XML response documents: what the gateway answers with.

Builders return the UTF-8 bytes of a document in the S3 namespace, with elements in the
order S3 emits them and timestamps as `2026-11-20T23:18:56.000Z`. They take the catalog's
records (or anything with the same attribute names, see the Protocols below), so the
handlers pass what the catalog returned. Configurations that the catalog stores (CORS,
lifecycle) render from the JSON-able dicts that s3api.xml_requests parses them into.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote
from xml.sax.saxutils import escape as _escape

__all__ = [
    "NAMESPACE",
    "DeleteError",
    "Deleted",
    "access_control_policy",
    "complete_multipart_upload_result",
    "copy_object_result",
    "copy_part_result",
    "cors_configuration",
    "delete_result",
    "empty_configuration",
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
    "ownership_controls",
    "policy_status",
    "public_access_block_configuration",
    "request_payment_configuration",
    "tagging",
    "versioning_configuration",
]

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
_ENTITIES = {'"': "&quot;"}
_CHECKSUM_ALGORITHMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0d\x0e-\x1f]")

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


class GranteeLike(Protocol):
    @property
    def kind(self) -> str: ...  # "CanonicalUser" or "Group"

    @property
    def identifier(self) -> str: ...  # the user's id, or the group's URI


class AclGrantLike(Protocol):
    """What the builders read of an ACL's grant (blobstore.access.acl.Grant)."""

    @property
    def grantee(self) -> GranteeLike: ...

    @property
    def permission(self) -> str: ...


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


# ---------------------------------------------------------------------------- builders


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
    """A key-like value under encoding-type=url, as S3 writes it: UTF-8 percent-encoded
    but for unreserved characters and '/' (a space is %20, never '+', so a decoder
    that takes '+' for a space and one that does not read the same key)."""
    if value is None or encoding_type != "url":
        return value
    return quote(value, safe="/")


def _owner(doc: _Doc, owner: str, tag: str = "Owner") -> None:
    doc.open(tag)
    doc.add("ID", owner)
    doc.add("DisplayName", owner)
    doc.close(tag)


def _checksums(doc: _Doc, checksums: Mapping[str, str] | None, *, with_type: bool = True) -> None:
    if not checksums:
        return
    for algorithm in _CHECKSUM_ALGORITHMS:
        value = checksums.get(algorithm)
        if value:
            doc.add(f"Checksum{algorithm}", value)
    if with_type and checksums.get("type"):
        doc.add("ChecksumType", checksums["type"])


def _checksum_algorithms(doc: _Doc, checksums: Mapping[str, str] | None) -> None:
    """A listing names an object's checksum algorithms (and their type), not the values."""
    algorithms = [a for a in _CHECKSUM_ALGORITHMS if a in (checksums or {})]
    for algorithm in algorithms:
        doc.add("ChecksumAlgorithm", algorithm)
    if algorithms and checksums and checksums.get("type"):
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
    _checksum_algorithms(doc, item.checksums)
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
    """ListObjects (v1). next_marker is sent only when a delimiter was given, as S3 does.
    The top-level Prefix is sent as given even with encoding-type=url, as S3 sends it
    (SDKs decode it in ListObjectsV2 responses only)."""
    doc = _Doc("ListBucketResult")
    doc.add("Name", bucket)
    doc.add("Prefix", prefix)
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
            _checksum_algorithms(doc, item.checksums)
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


# --------------------------------------------------------------------------- ACLs

_XSI = "http://www.w3.org/2001/XMLSchema-instance"


def access_control_policy(owner: str, grants: Iterable[AclGrantLike] | None = None) -> bytes:
    """GetBucketAcl / GetObjectAcl: the owner and the grants (None: the owner's
    FULL_CONTROL alone, what S3 shows for the `private` ACL and where ACLs are
    disabled)."""
    doc = _Doc("AccessControlPolicy")
    _owner(doc, owner)
    doc.open("AccessControlList")
    if grants is None:
        _grant(doc, "CanonicalUser", owner, "FULL_CONTROL")
    else:
        for grant in grants:
            _grant(doc, grant.grantee.kind, grant.grantee.identifier, grant.permission)
    doc.close("AccessControlList")
    return doc.done("AccessControlPolicy")


def _grant(doc: _Doc, kind: str, identifier: str, permission: str) -> None:
    doc.open("Grant")
    doc.raw(f'<Grantee xmlns:xsi="{_XSI}" xsi:type="{kind}">')
    if kind == "CanonicalUser":
        doc.add("ID", identifier)
        doc.add("DisplayName", identifier)
    else:
        doc.add("URI", identifier)
    doc.close("Grantee")
    doc.add("Permission", permission)
    doc.close("Grant")


def public_access_block_configuration(settings: Mapping[str, bool]) -> bytes:
    """GetPublicAccessBlock: S3's four settings, by S3's names."""
    doc = _Doc("PublicAccessBlockConfiguration")
    for name, value in settings.items():
        doc.add(name, value)
    return doc.done("PublicAccessBlockConfiguration")


def policy_status(is_public: bool) -> bytes:
    doc = _Doc("PolicyStatus")
    doc.add("IsPublic", is_public)
    return doc.done("PolicyStatus")


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


def object_lock_configuration(default: tuple[str, int, int] | None) -> bytes:
    """GetObjectLockConfiguration of a bucket with Object Lock: its default retention
    as (mode, days, years), one of days and years 0; None for none."""
    doc = _Doc("ObjectLockConfiguration")
    doc.add("ObjectLockEnabled", "Enabled")
    if default is not None:
        mode, days, years = default
        doc.open("Rule")
        doc.open("DefaultRetention")
        doc.add("Mode", mode)
        doc.add("Days", days or None)
        doc.add("Years", years or None)
        doc.close("DefaultRetention")
        doc.close("Rule")
    return doc.done("ObjectLockConfiguration")


def retention(mode: str, until: float) -> bytes:
    doc = _Doc("Retention")
    doc.add("Mode", mode)
    doc.add("RetainUntilDate", iso_timestamp(until))
    return doc.done("Retention")


def legal_hold(on: bool) -> bytes:
    doc = _Doc("LegalHold")
    doc.add("Status", "ON" if on else "OFF")
    return doc.done("LegalHold")


def bucket_encryption(algorithm: str, key_id: str, bucket_key: bool) -> bytes:
    """GetBucketEncryption: the bucket's one default encryption rule."""
    doc = _Doc("ServerSideEncryptionConfiguration")
    doc.open("Rule")
    doc.open("ApplyServerSideEncryptionByDefault")
    doc.add("SSEAlgorithm", algorithm)
    doc.add("KMSMasterKeyID", key_id or None)
    doc.close("ApplyServerSideEncryptionByDefault")
    doc.add("BucketKeyEnabled", "true" if bucket_key else "false")
    doc.close("Rule")
    return doc.done("ServerSideEncryptionConfiguration")
