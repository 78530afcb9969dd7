"""Catalog records: buckets, objects (one record per version), multipart uploads and parts,
plus the result types the catalog returns.

Every record is a frozen, slotted dataclass. `encode()` gives JSON bytes carrying
`format_version`; `decode()` rejects versions this code does not know. Inside index pages
object records are stored in their compact dict form (`to_dict()`: fields holding their
default value are left out; the page header carries the format version).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, NamedTuple, Self

import orjson

FORMAT_VERSION = 1
_new_object = object.__new__
_set_field = object.__setattr__
NULL_VERSION_ID = "null"
VERSIONING_UNSET = ""
VERSIONING_ENABLED = "Enabled"
VERSIONING_SUSPENDED = "Suspended"
VERSIONING_STATES = (VERSIONING_UNSET, VERSIONING_ENABLED, VERSIONING_SUSPENDED)
STORAGE_CLASS_DEFAULT = "STANDARD"
CONTENT_TYPE_DEFAULT = "binary/octet-stream"
# The "type" entry of a record's checksums: the object checksum is of the whole object,
# or a checksum of its parts' checksums (whose own checksums the record then keeps).
FULL_OBJECT = "FULL_OBJECT"
COMPOSITE = "COMPOSITE"


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)  # compact UTF-8 JSON


def _loads_versioned(buf: bytes, what: str) -> dict[str, Any]:
    value = orjson.loads(buf)
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object")
    version = value.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{what}: unknown format_version {version!r}")
    return value


@dataclass(frozen=True, slots=True)
class Extent:
    """Where some bytes of an object live: entries first_entry..last_entry of one ledger."""

    ledger_id: int
    first_entry: int  # first entry id in that ledger
    last_entry: int  # last entry id (inclusive)
    length: int  # bytes in this extent
    entry_size: int  # payload bytes per entry (all entries but the last are full)

    def __post_init__(self) -> None:
        assert self.ledger_id >= 0, self.ledger_id
        assert 0 <= self.first_entry <= self.last_entry, (self.first_entry, self.last_entry)
        assert self.length >= 0, self.length
        assert self.entry_size > 0, self.entry_size

    def to_list(self) -> list[int]:
        return [self.ledger_id, self.first_entry, self.last_entry, self.length, self.entry_size]

    @classmethod
    def from_list(cls, value: list[int]) -> Self:
        extent = _new_object(cls)  # the fast path of __init__: listings decode millions
        ledger_id, first_entry, last_entry, length, entry_size = value
        _set_field(extent, "ledger_id", ledger_id)
        _set_field(extent, "first_entry", first_entry)
        _set_field(extent, "last_entry", last_entry)
        _set_field(extent, "length", length)
        _set_field(extent, "entry_size", entry_size)
        extent.__post_init__()
        return extent


@dataclass(frozen=True, slots=True)
class PartInfo:
    """One part of a completed multipart object (for GetObject?partNumber and
    GetObjectAttributes). `etag` names the part when a completion is asked for; the
    committed record keeps it empty (`Catalog.complete_upload`)."""

    part_number: int
    size: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)
    # The part's own salt (hex) when the object is encrypted (blobstore.objects.
    # encryption): its bytes are sealed under a key derived from the object's and this.
    sse_salt: str = ""

    def to_list(self) -> list[Any]:
        if self.sse_salt:
            return [self.part_number, self.size, self.etag, self.checksums, self.sse_salt]
        if self.checksums:
            return [self.part_number, self.size, self.etag, self.checksums]
        return [self.part_number, self.size, self.etag]

    @classmethod
    def from_list(cls, value: list[Any]) -> Self:
        return cls(
            value[0],
            value[1],
            value[2],
            dict(value[3]) if len(value) > 3 else {},
            value[4] if len(value) > 4 else "",
        )


@dataclass(frozen=True, slots=True)
class BucketRecord:
    name: str
    owner: str
    created: float  # epoch seconds
    region: str = "us-east-1"
    versioning: str = VERSIONING_UNSET  # "" never set | "Enabled" | "Suspended"
    tags: dict[str, str] = field(default_factory=dict)
    cors: list[Any] | None = None  # JSON-able rules
    lifecycle: list[Any] | None = None  # JSON-able rules
    settings: dict[str, Any] = field(default_factory=dict)  # other JSON-able bucket settings
    # Object Lock: None when never enabled (and then absent from the encoding, so older
    # records read as before); else {"enabled": True} with the default retention, if
    # any, as `blobstore.objects.lock.BucketLock` writes it.
    object_lock: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        assert self.versioning in VERSIONING_STATES, self.versioning
        assert self.object_lock is None or self.versioning == VERSIONING_ENABLED, (
            "Object Lock needs versioning Enabled"
        )

    def to_dict(self) -> dict[str, Any]:
        d = self._base_dict()
        if self.object_lock is not None:
            d["object_lock"] = self.object_lock
        return d

    def _base_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "owner": self.owner,
            "created": self.created,
            "region": self.region,
            "versioning": self.versioning,
            "tags": self.tags,
            "cors": self.cors,
            "lifecycle": self.lifecycle,
            "settings": self.settings,
        }

    def encode(self) -> bytes:
        return _dumps(self.to_dict())

    @classmethod
    def decode(cls, buf: bytes) -> Self:
        d = _loads_versioned(buf, "bucket record")
        return cls(
            name=d["name"],
            owner=d["owner"],
            created=float(d["created"]),
            region=d.get("region", "us-east-1"),
            versioning=d.get("versioning", VERSIONING_UNSET),
            tags=dict(d.get("tags") or {}),
            cors=d.get("cors"),
            lifecycle=d.get("lifecycle"),
            settings=dict(d.get("settings") or {}),
            object_lock=d.get("object_lock"),
        )


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """One version of one object (or a delete marker)."""

    bucket: str
    key: str
    version_id: str = NULL_VERSION_ID  # assigned by the catalog on put
    size: int = 0
    etag: str = ""  # hex without quotes, or "<hex>-N" for multipart
    last_modified: float = 0.0  # epoch seconds
    content_type: str = CONTENT_TYPE_DEFAULT
    metadata: dict[str, str] = field(default_factory=dict)  # x-amz-meta-*
    system_metadata: dict[str, str] = field(default_factory=dict)  # Content-Encoding, ...
    checksums: dict[str, str] = field(default_factory=dict)  # {"CRC32": b64, "type": ...}
    storage_class: str = STORAGE_CLASS_DEFAULT
    extents: tuple[Extent, ...] = ()
    parts: tuple[PartInfo, ...] = ()
    is_delete_marker: bool = False
    owner: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    tier_location: str | None = None
    # Where the part list lives when it is too long for the index record (a multipart
    # object of many parts): entries holding `extents` and `parts` (blobstore.objects.
    # manifest). Such a record stores only this; `extents` and `parts` are empty as read
    # from the catalog and filled once the manifest is read ("resolved").
    manifest: tuple[Extent, ...] = ()
    # The ledgers the manifest's extents name, sorted: what the record references through
    # its manifest, visible without reading it (commits check them against the condemned
    # set; the maintenance scan counts them).
    manifest_ledgers: tuple[int, ...] = ()
    # The multipart upload whose completion made this version ("" otherwise): a repeated
    # CompleteMultipartUpload (a client's retry after a lost answer) is answered from it.
    upload_id: str = ""
    # Object Lock of this version (blobstore.objects.lock): a retention mode
    # ("GOVERNANCE" | "COMPLIANCE", "" for none) and its retain-until moment (epoch
    # seconds), and the legal hold. Absent from the compact form when unset.
    lock_mode: str = ""
    lock_until: float = 0.0
    legal_hold: bool = False
    # Server-side encryption of this version's bytes (blobstore.objects.encryption:
    # the mode, the wrapped data key or the customer key's check, the salt); None when
    # they are stored in clear.
    sse: dict[str, Any] | None = None
    is_latest: bool = False  # filled by reads and listings, never stored

    def __post_init__(self) -> None:
        assert self.size >= 0, self.size
        assert isinstance(self.extents, tuple), type(self.extents)
        assert isinstance(self.parts, tuple), type(self.parts)
        assert isinstance(self.manifest, tuple), type(self.manifest)

    @property
    def unresolved(self) -> bool:
        """The part list lives in a manifest not read yet (`extents`, `parts` empty)."""
        return bool(self.manifest) and not self.parts

    def to_dict(self) -> dict[str, Any]:
        """Compact form stored in index pages: defaults are left out, bucket and key too
        (the page knows them)."""
        d: dict[str, Any] = {"v": self.version_id}
        if self.is_delete_marker:
            d["dm"] = True
        if self.size:
            d["size"] = self.size
        if self.etag:
            d["etag"] = self.etag
        d["mtime"] = self.last_modified
        if self.content_type != CONTENT_TYPE_DEFAULT:
            d["ct"] = self.content_type
        if self.metadata:
            d["meta"] = self.metadata
        if self.system_metadata:
            d["sys"] = self.system_metadata
        if self.checksums:
            d["ck"] = self.checksums
        if self.storage_class != STORAGE_CLASS_DEFAULT:
            d["sc"] = self.storage_class
        self._put_bytes_location(d)
        if self.owner:
            d["owner"] = self.owner
        if self.tags:
            d["tags"] = self.tags
        if self.tier_location is not None:
            d["tier"] = self.tier_location
        if self.upload_id:
            d["up"] = self.upload_id
        self._put_protection(d)
        return d

    def _put_protection(self, d: dict[str, Any]) -> None:
        """Add the Object Lock and the encryption to the compact form, when set."""
        if self.lock_mode:
            d["lm"] = self.lock_mode
            d["lu"] = self.lock_until
        if self.legal_hold:
            d["lh"] = True
        if self.sse is not None:
            d["se"] = self.sse

    def _put_bytes_location(self, d: dict[str, Any]) -> None:
        """Add where the object's bytes live to its compact form: the manifest, or the
        extents and parts themselves."""
        if self.manifest:
            d["mf"] = [e.to_list() for e in self.manifest]  # extents and parts live there
            if self.manifest_ledgers:
                d["mfl"] = list(self.manifest_ledgers)
            return
        if self.extents:
            d["ext"] = [e.to_list() for e in self.extents]
        if self.parts:
            d["parts"] = [p.to_list() for p in self.parts]

    @classmethod
    def from_dict(
        cls,
        bucket: str,
        key: str,
        d: dict[str, Any],
        is_latest: bool = False,
    ) -> Self:
        """Decode the compact form. The fields are set directly, which costs less than
        __init__; the invariants of __post_init__ are still checked. (Listings decode
        the much cheaper `ObjectSummary`s instead.)"""
        record = _new_object(cls)
        get = d.get
        extents = get("ext")
        parts = get("parts")
        manifest = get("mf")
        _set_field(record, "bucket", bucket)
        _set_field(record, "key", key)
        _set_field(record, "version_id", d["v"])
        _set_field(record, "size", get("size", 0))
        _set_field(record, "etag", get("etag", ""))
        _set_field(record, "last_modified", get("mtime", 0.0))
        _set_field(record, "content_type", get("ct", CONTENT_TYPE_DEFAULT))
        _set_field(record, "metadata", get("meta") or {})
        _set_field(record, "system_metadata", get("sys") or {})
        _set_field(record, "checksums", get("ck") or {})
        _set_field(record, "storage_class", get("sc", STORAGE_CLASS_DEFAULT))
        _set_field(
            record, "extents", tuple([Extent.from_list(e) for e in extents]) if extents else ()
        )
        _set_field(record, "parts", tuple([PartInfo.from_list(p) for p in parts]) if parts else ())
        _set_field(record, "is_delete_marker", get("dm", False))
        _set_field(record, "owner", get("owner", ""))
        _set_field(record, "tags", get("tags") or {})
        _set_field(record, "tier_location", get("tier"))
        _set_field(
            record, "manifest", tuple([Extent.from_list(e) for e in manifest]) if manifest else ()
        )
        _set_field(record, "manifest_ledgers", tuple(get("mfl", ())))
        _set_field(record, "upload_id", get("up", ""))
        _set_field(record, "lock_mode", get("lm", ""))
        _set_field(record, "lock_until", get("lu", 0.0))
        _set_field(record, "legal_hold", get("lh", False))
        _set_field(record, "sse", get("se"))
        _set_field(record, "is_latest", is_latest)
        record.__post_init__()
        return record

    def encode(self) -> bytes:
        d = self.to_dict()
        d["format_version"] = FORMAT_VERSION
        d["bucket"] = self.bucket
        d["key"] = self.key
        return _dumps(d)

    @classmethod
    def decode(cls, buf: bytes) -> Self:
        d = _loads_versioned(buf, "object record")
        return cls.from_dict(d["bucket"], d["key"], d)

    def without_part_etags(self) -> ObjectRecord:
        """As a completed object keeps its parts: their ETags are checked at completion
        (`Catalog.complete_upload`) and read by nothing after it."""
        return replace(self, parts=tuple([replace(p, etag="") for p in self.parts]))

    def same_version(self, other: ObjectRecord) -> bool:
        """Equal as stored (ignores `is_latest`, which listings fill in)."""
        return (
            self.bucket == other.bucket
            and self.key == other.key
            and self.to_dict() == other.to_dict()
        )


assert len(fields(ObjectRecord)) == 25, "ObjectRecord.from_dict sets every field: update it"


@dataclass(frozen=True, slots=True)
class UploadRecord:
    """A multipart upload in progress."""

    bucket: str
    key: str
    upload_id: str = ""  # assigned by create_upload
    initiated: float = 0.0
    owner: str = ""
    content_type: str = CONTENT_TYPE_DEFAULT
    metadata: dict[str, str] = field(default_factory=dict)
    system_metadata: dict[str, str] = field(default_factory=dict)
    storage_class: str = STORAGE_CLASS_DEFAULT
    checksum_algorithm: str = ""
    checksum_type: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    # The Object Lock the completed version gets (as ObjectRecord's); stored only when
    # set, so older records read as before.
    lock_mode: str = ""
    lock_until: float = 0.0
    legal_hold: bool = False
    # The encryption every part is sealed with, and the completed version keeps (as
    # ObjectRecord's `sse`); stored only when set.
    sse: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = self._base_dict()
        if self.lock_mode:
            d["lock_mode"] = self.lock_mode
            d["lock_until"] = self.lock_until
        if self.legal_hold:
            d["legal_hold"] = True
        if self.sse is not None:
            d["sse"] = self.sse
        return d

    def _base_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "bucket": self.bucket,
            "key": self.key,
            "upload_id": self.upload_id,
            "initiated": self.initiated,
            "owner": self.owner,
            "content_type": self.content_type,
            "metadata": self.metadata,
            "system_metadata": self.system_metadata,
            "storage_class": self.storage_class,
            "checksum_algorithm": self.checksum_algorithm,
            "checksum_type": self.checksum_type,
            "tags": self.tags,
        }

    def encode(self) -> bytes:
        return _dumps(self.to_dict())

    @classmethod
    def decode(cls, buf: bytes) -> Self:
        d = _loads_versioned(buf, "upload record")
        d.pop("format_version")
        return cls(**d)


@dataclass(frozen=True, slots=True)
class PartRecord:
    """One uploaded part of a multipart upload."""

    part_number: int
    size: int
    etag: str
    last_modified: float = 0.0
    checksums: dict[str, str] = field(default_factory=dict)
    extents: tuple[Extent, ...] = ()
    sse_salt: str = ""  # as PartInfo's: set when the upload is encrypted

    def __post_init__(self) -> None:
        assert 1 <= self.part_number <= 10_000, self.part_number
        assert self.size >= 0, self.size

    def encode(self) -> bytes:
        d = {
            "format_version": FORMAT_VERSION,
            "part_number": self.part_number,
            "size": self.size,
            "etag": self.etag,
            "last_modified": self.last_modified,
            "checksums": self.checksums,
            "extents": [e.to_list() for e in self.extents],
        }
        if self.sse_salt:
            d["sse_salt"] = self.sse_salt
        return _dumps(d)

    @classmethod
    def decode(cls, buf: bytes) -> Self:
        d = _loads_versioned(buf, "part record")
        return cls(
            part_number=d["part_number"],
            size=d["size"],
            etag=d["etag"],
            last_modified=d.get("last_modified", 0.0),
            checksums=dict(d.get("checksums") or {}),
            extents=tuple(Extent.from_list(e) for e in d.get("extents", ())),
            sse_salt=d.get("sse_salt", ""),
        )


# ---------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class CommitResult:
    record: ObjectRecord  # as committed (version id assigned)
    garbage: list[ObjectRecord]  # records whose bytes are no longer referenced
    versioning: str = ""  # the bucket's versioning state the commit was decided on


@dataclass(frozen=True, slots=True)
class DeleteResult:
    version_id: str | None  # the marker created, or the version removed; None if nothing
    delete_marker: bool  # a marker was created, or the version removed was a marker
    garbage: list[ObjectRecord]


_NO_CHECKSUMS: MappingProxyType[str, str] = MappingProxyType({})


class ObjectSummary(NamedTuple):
    """What ListObjects shows of an object's latest version. A listing decodes up to
    1,000 of these per request, out of index pages that hold whole records: building an
    `ObjectRecord` (nineteen fields, four fresh dicts, extents) for each would cost
    several times as much, and be most of a listing's CPU. `get_object` gives the
    record."""

    key: str
    version_id: str
    size: int
    etag: str
    last_modified: float
    storage_class: str
    owner: str
    checksums: Mapping[str, str]  # {"CRC32": b64, "type": ...}; read-only

    @property
    def is_latest(self) -> bool:
        return True  # listings show latest versions only

    @property
    def is_delete_marker(self) -> bool:
        return False  # deleted keys are not listed

    @classmethod
    def from_dict(cls, key: str, d: dict[str, Any]) -> ObjectSummary:
        """From the compact form of ObjectRecord.to_dict (a page line's version)."""
        get = d.get
        return _new_tuple(
            cls,
            (
                key,
                d["v"],
                get("size", 0),
                get("etag", ""),
                get("mtime", 0.0),
                get("sc", STORAGE_CLASS_DEFAULT),
                get("owner", ""),
                get("ck") or _NO_CHECKSUMS,
            ),
        )

    @classmethod
    def of(cls, record: ObjectRecord) -> ObjectSummary:
        return cls(
            record.key,
            record.version_id,
            record.size,
            record.etag,
            record.last_modified,
            record.storage_class,
            record.owner,
            record.checksums or _NO_CHECKSUMS,
        )


_new_tuple = tuple.__new__


class VersionRefs:
    """What a maintenance scan needs of one version: the ledgers it references and what
    lifecycle rules judge it by, read from the page line's compact form without building
    an `ObjectRecord` (nineteen fields and their checks: most of a scan's CPU otherwise).
    Extents come as lists `[ledger_id, first_entry, last_entry, length, entry_size]`
    (`Extent.to_list`); `record` decodes the whole version when one is needed."""

    __slots__ = ("_d",)

    def __init__(self, d: dict[str, Any]) -> None:
        self._d = d

    @property
    def version_id(self) -> str:
        return str(self._d["v"])

    @property
    def last_modified(self) -> float:
        return float(self._d.get("mtime", 0.0))

    @property
    def size(self) -> int:
        return int(self._d.get("size", 0))

    @property
    def is_delete_marker(self) -> bool:
        return bool(self._d.get("dm", False))

    @property
    def tags(self) -> dict[str, str]:
        return self._d.get("tags") or {}

    @property
    def extents(self) -> list[list[int]]:
        """The object's own extents, or those a manifest's record names beside it."""
        return self._d.get("ext") or []

    @property
    def manifest(self) -> list[list[int]]:
        return self._d.get("mf") or []

    @property
    def manifest_ledgers(self) -> list[int]:
        return self._d.get("mfl") or []

    @property
    def tier_location(self) -> str | None:
        location: str | None = self._d.get("tier")
        return location

    @property
    def system_metadata(self) -> dict[str, str]:
        return self._d.get("sys") or {}

    @property
    def lock_mode(self) -> str:
        return str(self._d.get("lm", ""))

    @property
    def lock_until(self) -> float:
        return float(self._d.get("lu", 0.0))

    @property
    def legal_hold(self) -> bool:
        return bool(self._d.get("lh", False))

    def record(self, bucket: str, key: str, is_latest: bool = False) -> ObjectRecord:
        return ObjectRecord.from_dict(bucket, key, self._d, is_latest)


@dataclass(frozen=True, slots=True)
class ListResult:
    contents: list[ObjectSummary]
    common_prefixes: list[str]
    is_truncated: bool
    next_start_after: str  # "" when not truncated


@dataclass(frozen=True, slots=True)
class VersionListResult:
    versions: list[ObjectRecord]  # delete markers included, is_latest set
    common_prefixes: list[str]
    is_truncated: bool
    next_key_marker: str
    next_version_id_marker: str


@dataclass(frozen=True, slots=True)
class PartListResult:
    parts: list[PartRecord]
    is_truncated: bool
    next_part_number_marker: int


@dataclass(frozen=True, slots=True)
class UploadListResult:
    uploads: list[UploadRecord]
    common_prefixes: list[str]
    is_truncated: bool
    next_key_marker: str
    next_upload_id_marker: str
