"""S3 XML request bodies: bounded, defused parsers.

Parsers take the raw request body (at most REQUEST_XML_BYTES_MAX bytes), parse it with
defusedxml (no DTDs, entities or external references), accept the S3 namespace or none,
and raise MalformedXML (or the specific S3 error) on anything S3 would reject.
Configurations that the catalog stores (CORS, lifecycle) become JSON-able dicts that
s3api.xml_responses renders back to the same XML.
"""

from __future__ import annotations

import datetime
import secrets
import unicodedata
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as defused_element_tree
from defusedxml import DefusedXmlException

from blobstore.objects.lock import (
    DEFAULT_RETENTION_DAYS_MAX,
    DEFAULT_RETENTION_YEARS_MAX,
    MODES,
    BucketLock,
    DefaultRetention,
    Retention,
)
from blobstore.tier.tiers import TIER_NAME
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
    "CompletedPart",
    "DeleteRequest",
    "ObjectToDelete",
    "AclGrant",
    "parse_complete_multipart_upload",
    "parse_cors_configuration",
    "parse_create_bucket_configuration",
    "parse_access_control_policy",
    "parse_delete",
    "parse_legal_hold",
    "parse_lifecycle_configuration",
    "parse_object_lock_configuration",
    "parse_retention",
    "parse_ownership_controls",
    "parse_public_access_block",
    "parse_tagging",
    "parse_versioning_configuration",
    "read_bounded",
]

CORS_RULES_MAX = 100
LIFECYCLE_RULES_MAX = 1000
RULE_ID_LENGTH_MAX = 255
_CORS_METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD")


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


RESTORE_DAYS_MAX = 36_500


def transition_classes(rules: list[dict[str, Any]]) -> list[str]:
    """The storage classes the rules' transitions name, each once, in order."""
    named = [
        transition["StorageClass"]
        for rule in rules
        for action in ("Transition", "NoncurrentVersionTransition")
        for transition in rule.get(action, [])
    ]
    return list(dict.fromkeys(named))


def parse_restore_request(body: bytes) -> int:
    """RestoreObject's RestoreRequest -> Days (its GlacierJobParameters, the retrieval
    speed, have no meaning here: a restore is done before the answer). Select
    requests (Type SELECT) are not implemented."""
    element = _parse(body, "RestoreRequest")
    if _child(element, "Type") is not None or _child(element, "SelectParameters") is not None:
        raise S3Error("NotImplemented", "Restore requests of type SELECT are not implemented")
    days_text = _child_text(element, "Days")
    if days_text is None:
        raise S3Error("MalformedXML", "RestoreRequest needs Days (restores are kept that long)")
    try:
        days = int(days_text)
    except ValueError:
        raise _malformed() from None
    if not 1 <= days <= RESTORE_DAYS_MAX:
        raise S3Error("InvalidArgument", f"Days must be 1..{RESTORE_DAYS_MAX}")
    return days


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


_CORS_LISTS = ("AllowedHeader", "AllowedMethod", "AllowedOrigin", "ExposeHeader")
_CORS_ELEMENTS = frozenset(("ID", *_CORS_LISTS, "MaxAgeSeconds"))


def parse_cors_configuration(body: bytes) -> list[dict[str, Any]]:
    """PutBucketCors -> rules as JSON-able dicts (lists for the repeatable elements)."""
    element = _parse(body, "CORSConfiguration")
    rules_xml = _children(element, "CORSRule")
    if not rules_xml or len(rules_xml) > CORS_RULES_MAX:
        raise _malformed()
    return [_cors_rule(rule_xml) for rule_xml in rules_xml]


def _cors_rule(rule_xml: Element) -> dict[str, Any]:
    """One <CORSRule>, checked in the order S3 reports its errors."""
    rule: dict[str, Any] = {}
    rule_id = _child_text(rule_xml, "ID")
    if rule_id is not None:
        _check_rule_id_length(rule_id)
        rule["ID"] = rule_id
    for name in _CORS_LISTS:
        values = [(child.text or "").strip() for child in _children(rule_xml, name)]
        if values:
            rule[name] = values
    if not rule.get("AllowedMethod") or not rule.get("AllowedOrigin"):
        raise _malformed()
    _check_cors_wildcards(rule)
    _check_cors_methods(rule["AllowedMethod"])
    max_age = _child_text(rule_xml, "MaxAgeSeconds")
    if max_age is not None:
        rule["MaxAgeSeconds"] = _int(max_age)
    if any(_local(child.tag) not in _CORS_ELEMENTS for child in rule_xml):
        raise _malformed()
    return rule


def _check_rule_id_length(rule_id: str) -> None:
    if len(rule_id) > RULE_ID_LENGTH_MAX:
        raise S3Error("InvalidArgument", "ID length should not exceed allowed limit of 255")


def _check_cors_wildcards(rule: dict[str, Any]) -> None:
    """An allowed origin or header holds at most one `*`."""
    for name in ("AllowedOrigin", "AllowedHeader"):
        for value in rule.get(name, ()):
            if value.count("*") > 1:
                raise S3Error(
                    "InvalidRequest",
                    f'{name} "{value}" can not have more than one wildcard.',
                )


def _check_cors_methods(methods: list[str]) -> None:
    for method in methods:
        if method not in _CORS_METHODS:
            raise S3Error(
                "InvalidRequest",
                "Found unsupported HTTP method in CORS config. Unsupported method is " + method,
            )


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
            _check_rule_id_length(rule_id)
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
    return [_with_id(rule, ids) for rule in rules]


def _with_id(rule: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    """The rule with an ID: S3 gives a rule sent without one a generated ID, unique in
    its configuration, and returns it."""
    if "ID" in rule:
        return rule
    rule_id = secrets.token_urlsafe(36)  # 48 characters, as S3's generated IDs
    while rule_id in ids:
        rule_id = secrets.token_urlsafe(36)
    ids.add(rule_id)
    return {"ID": rule_id, **rule}


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
        if target is None:
            raise _malformed()
        if target not in _TRANSITION_CLASSES:
            # A cold tier's name (checked against the tiers by the handler).
            if not TIER_NAME.match(target):
                raise S3Error("InvalidStorageClass", StorageClassRequested=target)
            continue
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
    """CompleteMultipartUpload -> parts in ascending order (InvalidPartOrder otherwise).

    A part number named again right after itself is one part, its last entry standing,
    as S3 takes it: a client that resent a part while its first upload was in flight
    lists both answers, the one that finished last being the part."""
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
        if parts and number < parts[-1].part_number:
            raise S3Error("InvalidPartOrder")
        if parts and number == parts[-1].part_number:
            parts.pop()
        parts.append(CompletedPart(number, etag.strip().strip('"'), checksums))
        if len(parts) > PART_NUMBER_MAX:
            raise S3Error("TooManyParts")
    if not parts:
        raise _malformed()
    return parts


@dataclass(frozen=True, slots=True)
class AclGrant:
    """One grant of an AccessControlPolicy: a grantee by canonical user id (`kind`
    "CanonicalUser") or group URI ("Group"), or by e-mail ("AmazonCustomerByEmail")."""

    kind: str
    identifier: str
    permission: str


_GRANTEE_TYPES = {"CanonicalUser": "ID", "Group": "URI", "AmazonCustomerByEmail": "EmailAddress"}
_XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
ACL_GRANTS_MAX = 100  # S3's bound on the grants of one ACL


def _acl_grant(grant: Element) -> AclGrant:
    grantee = _child(grant, "Grantee")
    permission = _child_text(grant, "Permission", required=True)
    if grantee is None or permission is None:
        raise _malformed()
    kind = grantee.get(_XSI_TYPE) or next(
        (k for k, field_name in _GRANTEE_TYPES.items() if _child(grantee, field_name) is not None),
        "",
    )
    field_name = _GRANTEE_TYPES.get(kind)
    if field_name is None:
        raise _malformed()
    identifier = _child_text(grantee, field_name)
    if not identifier:
        raise S3Error(
            "InvalidArgument", "Invalid id" if kind == "CanonicalUser" else "Invalid grantee"
        )
    return AclGrant(kind, identifier.strip(), permission.strip())


def parse_access_control_policy(body: bytes) -> tuple[str | None, tuple[AclGrant, ...]]:
    """PutBucketAcl / PutObjectAcl's body: (the Owner's ID, if given; the grants);
    MalformedACLError when it is not an AccessControlPolicy, as S3 answers."""
    try:
        element = _parse(body, "AccessControlPolicy")
        owner = _child(element, "Owner")
        owner_id = _child_text(owner, "ID") if owner is not None else None
        acl = _child(element, "AccessControlList")
        if acl is None:
            raise _malformed()
        grants = _children(acl, "Grant")
        if len(grants) > ACL_GRANTS_MAX:
            raise _malformed()
        return owner_id, tuple(_acl_grant(grant) for grant in grants)
    except S3Error as e:
        if e.code != "MalformedXML":
            raise
        raise S3Error(
            "MalformedACLError",
            "The XML you provided was not well-formed or did not validate against our "
            "published schema",
        ) from None


_PUBLIC_ACCESS_BLOCK_NAMES = (
    "BlockPublicAcls",
    "IgnorePublicAcls",
    "BlockPublicPolicy",
    "RestrictPublicBuckets",
)


def parse_public_access_block(body: bytes) -> dict[str, bool]:
    """PutPublicAccessBlock's body: S3's setting names -> on (a name left out is off)."""
    element = _parse(body, "PublicAccessBlockConfiguration")
    settings: dict[str, bool] = {}
    for child in element:
        name = _local(child.tag)
        if name not in _PUBLIC_ACCESS_BLOCK_NAMES or name in settings or len(child):
            raise _malformed()
        value = (child.text or "").strip().lower()
        if value not in ("true", "false"):
            raise _malformed()
        settings[name] = value == "true"
    return settings


OBJECT_OWNERSHIP_VALUES = ("BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter")


def parse_ownership_controls(body: bytes) -> str:
    """PutBucketOwnershipControls' body: its one rule's ObjectOwnership."""
    element = _parse(body, "OwnershipControls")
    rules = _children(element, "Rule")
    if len(rules) != 1 or len(element) != 1:
        raise _malformed()
    value = _child_text(rules[0], "ObjectOwnership", required=True)
    if value not in OBJECT_OWNERSHIP_VALUES:
        raise _malformed()
    assert value is not None
    return value


# ---------------------------------------------------------------------- Object Lock


def parse_iso8601(text: str) -> float | None:
    """An ISO 8601 date and time (a zone, or UTC without one) as epoch seconds; None
    when it is not one."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def parse_object_lock_configuration(body: bytes) -> BucketLock:
    """PutObjectLockConfiguration: ObjectLockEnabled=Enabled and an optional Rule with
    a DefaultRetention (Mode, and Days or Years). A period that is not a positive
    whole number is InvalidRetentionPeriod; anything else S3 would not take is
    MalformedXML."""
    element = _parse(body, "ObjectLockConfiguration")
    if _child_text(element, "ObjectLockEnabled") != "Enabled":
        raise _malformed()
    rule = _child(element, "Rule")
    if rule is None:
        return BucketLock()
    default = _child(rule, "DefaultRetention")
    if default is None:
        raise _malformed()
    mode = _child_text(default, "Mode", required=True)
    days_text = _child_text(default, "Days")
    years_text = _child_text(default, "Years")
    if mode not in MODES or (days_text is None) == (years_text is None):
        raise _malformed()
    if days_text is not None:
        return BucketLock(
            DefaultRetention(mode, days=_period(days_text, DEFAULT_RETENTION_DAYS_MAX))
        )
    assert years_text is not None
    return BucketLock(
        DefaultRetention(mode, years=_period(years_text, DEFAULT_RETENTION_YEARS_MAX))
    )


def _period(text: str, most: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise _malformed() from None
    if not 0 < value <= most:
        raise S3Error("InvalidRetentionPeriod", f"The retention period must be 1 to {most}")
    return value


def parse_retention(body: bytes) -> Retention | None:
    """PutObjectRetention: a Mode and a RetainUntilDate, or neither (the retention
    removed). The date's being in the future is the caller's to check."""
    element = _parse(body, "Retention")
    mode = _child_text(element, "Mode")
    until_text = _child_text(element, "RetainUntilDate")
    if mode is None and until_text is None:
        return None
    if mode not in MODES or until_text is None:
        raise _malformed()
    until = parse_iso8601(until_text)
    if until is None:
        raise _malformed()
    return Retention(mode, until)


def parse_legal_hold(body: bytes) -> bool:
    """PutObjectLegalHold: Status ON (True) or OFF (False)."""
    status = _child_text(_parse(body, "LegalHold"), "Status")
    if status not in ("ON", "OFF"):
        raise _malformed()
    return status == "ON"


SSE_ALGORITHMS = ("AES256", "aws:kms", "aws:kms:dsse")


def parse_bucket_encryption(body: bytes) -> tuple[str, str, bool]:
    """PutBucketEncryption: one Rule whose ApplyServerSideEncryptionByDefault names an
    SSEAlgorithm (AES256 or aws:kms) and, for aws:kms only, an optional KMSMasterKeyID;
    and BucketKeyEnabled. Returns (algorithm, key id, bucket key enabled)."""
    element = _parse(body, "ServerSideEncryptionConfiguration")
    rules = _children(element, "Rule")
    if len(rules) != 1:
        raise _malformed()
    default = _child(rules[0], "ApplyServerSideEncryptionByDefault")
    if default is None:
        raise _malformed()
    algorithm = _child_text(default, "SSEAlgorithm", required=True)
    key_id = _child_text(default, "KMSMasterKeyID") or ""
    if algorithm not in SSE_ALGORITHMS:
        raise S3Error("InvalidArgument", "The encryption method specified is not supported")
    if key_id and algorithm == "AES256":
        raise S3Error(
            "InvalidArgument",
            "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms",
        )
    bucket_key = (_child_text(rules[0], "BucketKeyEnabled") or "false").strip().lower()
    if bucket_key not in ("true", "false"):
        raise _malformed()
    return ("aws:kms" if algorithm != "AES256" else algorithm), key_id, bucket_key == "true"
