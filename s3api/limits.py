"""S3 limits, and validation of names, sizes and counts against them.

Every limit the gateway enforces on client input lives here, checked against each other
when the module loads. The helpers raise the S3 error that S3 itself returns.
"""

from __future__ import annotations

import base64
import binascii
import email.errors
import email.header
import re
from collections.abc import Iterable, Mapping

from s3api.errors import S3Error

__all__ = [
    "BUCKET_NAME_LENGTH_MAX",
    "BUCKET_NAME_LENGTH_MIN",
    "BUCKET_TAGS_MAX",
    "DELETE_OBJECTS_MAX",
    "KEY_LENGTH_BYTES_MAX",
    "LIST_KEYS_MAX",
    "OBJECT_SIZE_MAX",
    "OBJECT_TAGS_MAX",
    "PART_NUMBER_MAX",
    "PART_SIZE_MAX",
    "PART_SIZE_MIN",
    "PRESIGN_EXPIRES_SECONDS_MAX",
    "PUT_OBJECT_SIZE_MAX",
    "REQUEST_HEADER_SECTION_BYTES_DEFAULT",
    "REQUEST_HEADER_SECTION_BYTES_MAX",
    "REQUEST_HEADER_SECTION_BYTES_MIN",
    "REQUEST_XML_BYTES_MAX",
    "TAG_KEY_LENGTH_MAX",
    "TAG_VALUE_LENGTH_MAX",
    "USER_METADATA_BYTES_MAX",
    "USER_METADATA_PREFIX",
    "check_complete_part_sizes",
    "metadata_header_value",
    "parse_max_count",
    "parse_part_number",
    "user_metadata",
    "validate_bucket_name",
    "validate_content_length",
    "validate_key",
]

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

PUT_OBJECT_SIZE_MAX = 5 * GIB  # a single PUT (and each part)
OBJECT_SIZE_MAX = 5 * TIB
PART_NUMBER_MAX = 10_000
PART_SIZE_MIN = 5 * MIB  # every part but the last
PART_SIZE_MAX = 5 * GIB
KEY_LENGTH_BYTES_MAX = 1024  # UTF-8 bytes
USER_METADATA_BYTES_MAX = 2 * KIB  # sum of UTF-8 key (without prefix) and value lengths
USER_METADATA_PREFIX = "x-amz-meta-"
BUCKET_NAME_LENGTH_MIN = 3
BUCKET_NAME_LENGTH_MAX = 63
LIST_KEYS_MAX = 1000  # max-keys, max-uploads, max-parts are clamped to this
DELETE_OBJECTS_MAX = 1000
OBJECT_TAGS_MAX = 10
BUCKET_TAGS_MAX = 50
TAG_KEY_LENGTH_MAX = 128
TAG_VALUE_LENGTH_MAX = 256
REQUEST_XML_BYTES_MAX = 2 * MIB  # any request body parsed as XML (a full Delete of long keys)
PRESIGN_EXPIRES_SECONDS_MAX = 7 * 24 * 3600
# A request's header section (the field lines after the request line): S3 refuses more
# than 8 KiB (RequestHeaderSectionTooLarge); the gateway's bound is configurable
# (`--max-header-bytes`) within these limits.
REQUEST_HEADER_SECTION_BYTES_DEFAULT = 8 * KIB
REQUEST_HEADER_SECTION_BYTES_MIN = 4 * KIB
REQUEST_HEADER_SECTION_BYTES_MAX = 1 * MIB

assert PART_SIZE_MIN <= PART_SIZE_MAX, "a part may be as large as the minimum"
assert PART_SIZE_MAX <= PUT_OBJECT_SIZE_MAX, "a part is never larger than a single PUT"
assert PART_NUMBER_MAX * PART_SIZE_MAX >= OBJECT_SIZE_MAX, "the largest object fits in parts"
assert (
    REQUEST_HEADER_SECTION_BYTES_MIN
    <= REQUEST_HEADER_SECTION_BYTES_DEFAULT
    <= REQUEST_HEADER_SECTION_BYTES_MAX
), "the default header bound is one an operator may set"
assert REQUEST_HEADER_SECTION_BYTES_MIN >= 2 * USER_METADATA_BYTES_MAX, (
    "the largest user metadata fits the smallest header bound, with room for the rest"
)
assert REQUEST_XML_BYTES_MAX >= DELETE_OBJECTS_MAX * (KEY_LENGTH_BYTES_MAX + 64), (
    "a Delete request with the maximum number of maximal keys fits the XML bound"
)

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


def validate_bucket_name(name: str) -> None:
    """S3's bucket naming rules (general purpose buckets) -> InvalidBucketName."""
    ok = (
        BUCKET_NAME_LENGTH_MIN <= len(name) <= BUCKET_NAME_LENGTH_MAX
        and _BUCKET_NAME.match(name) is not None
        and ".." not in name
        and ".-" not in name
        and "-." not in name
        and _IPV4.match(name) is None
        and not name.startswith(("xn--", "sthree-", "amzn-s3-demo-"))
        and not name.endswith(("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"))
    )
    if not ok:
        raise S3Error("InvalidBucketName", BucketName=name)


def validate_key(key: str) -> None:
    """Object keys: non-empty, at most 1,024 UTF-8 bytes -> KeyTooLongError."""
    if not key:
        raise S3Error("InvalidArgument", "Object key must not be empty")
    if len(key) > KEY_LENGTH_BYTES_MAX // 4 and (
        len(key.encode("utf-8", "surrogatepass")) > KEY_LENGTH_BYTES_MAX
    ):
        raise S3Error(
            "KeyTooLongError",
            Size=len(key.encode("utf-8", "surrogatepass")),
            MaxSizeAllowed=KEY_LENGTH_BYTES_MAX,
        )


def validate_content_length(size: int, *, maximum: int = PUT_OBJECT_SIZE_MAX) -> None:
    """A declared body size against the single-request limit -> EntityTooLarge."""
    assert size >= 0, size
    if size > maximum:
        raise S3Error("EntityTooLarge", ProposedSize=size, MaxSizeAllowed=maximum)


def _wire_size(text: str) -> int:
    # Header values arrive as bytes decoded latin-1 (one char per byte on the wire); text
    # that cannot be latin-1 came from elsewhere and is measured as UTF-8.
    try:
        return len(text.encode("latin-1"))
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "surrogatepass"))


def _decoded_metadata_value(value: str) -> str:
    """A metadata header's value as S3 stores it: RFC 2047 encoded-words
    (`=?UTF-8?B?...?=`, `=?ISO-8859-1?Q?...?=`) decoded; anything else as received (a
    byte outside US-ASCII is the ISO-8859-1 character, as HTTP delivers it). A value
    that does not decode is kept as it came."""
    if "=?" not in value or not value.isascii():
        return value
    try:
        decoded = str(email.header.make_header(email.header.decode_header(value)))
    except (email.errors.HeaderParseError, LookupError, ValueError, binascii.Error):
        return value
    return decoded if decoded or not value.strip() else value  # nothing decoded: not words


def metadata_header_value(value: str) -> str:
    """A stored metadata value as S3 returns it in a header: as is when it is printable
    US-ASCII, else one RFC 2047 encoded-word over its UTF-8 bytes (`=?UTF-8?B?...?=`)."""
    if _PRINTABLE_ASCII.fullmatch(value):
        return value
    encoded = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode("ascii")
    return f"=?UTF-8?B?{encoded}?="


_PRINTABLE_ASCII = re.compile("[\t\x20-\x7e]*")


def user_metadata(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """x-amz-meta-* headers as {name-without-prefix: value}, checked against the 2 KB limit.

    S3 measures the limit as the sum of the UTF-8 lengths of each key (without the
    prefix) and value. Header names are taken lowercased. Repeated headers are joined
    with ',' as HTTP says. Values arrive RFC 2047 encoded where they are not US-ASCII
    and are stored decoded (`metadata_header_value` encodes them again).
    """
    items = headers.items() if isinstance(headers, Mapping) else headers
    result: dict[str, str] = {}
    for raw_name, raw_value in items:
        name = raw_name.lower()
        if not name.startswith(USER_METADATA_PREFIX):
            continue
        short = name[len(USER_METADATA_PREFIX) :]
        value = _decoded_metadata_value(raw_value)
        result[short] = f"{result[short]},{value}" if short in result else value
    size = sum(_wire_size(k) + _wire_size(v) for k, v in result.items())
    if size > USER_METADATA_BYTES_MAX:
        raise S3Error("MetadataTooLarge", Size=size, MaxSizeAllowed=USER_METADATA_BYTES_MAX)
    return result


def parse_part_number(text: str | None) -> int:
    """The partNumber query parameter -> 1..10,000, else InvalidArgument."""
    try:
        number = int(text) if text is not None and text.isdigit() else -1
    except ValueError:
        number = -1
    if not 1 <= number <= PART_NUMBER_MAX:
        raise S3Error(
            "InvalidArgument",
            f"Part number must be an integer between 1 and {PART_NUMBER_MAX}, inclusive",
            ArgumentName="partNumber",
            ArgumentValue=text or "",
        )
    return number


def parse_max_count(
    text: str | None, *, name: str = "max-keys", default: int = LIST_KEYS_MAX
) -> int:
    """max-keys / max-uploads / max-parts: a non-negative integer, clamped to 1,000."""
    if text is None or text == "":
        return default
    if not text.isdigit():
        raise S3Error(
            "InvalidArgument",
            "Provided max-keys not an integer or within integer range"
            if name == "max-keys"
            else f"Provided {name} not an integer or within integer range",
            ArgumentName=name,
            ArgumentValue=text,
        )
    return min(int(text), LIST_KEYS_MAX)


def check_complete_part_sizes(parts: Iterable[tuple[int, int, str]]) -> int:
    """(part_number, size, etag) in order for CompleteMultipartUpload -> total size.

    Every part but the last must be at least 5 MiB (EntityTooSmall, as S3 reports it);
    the total must fit the object limit (EntityTooLarge).
    """
    listed = list(parts)
    if len(listed) > PART_NUMBER_MAX:
        raise S3Error("TooManyParts")
    total = 0
    for index, (part_number, size, etag) in enumerate(listed):
        if size < PART_SIZE_MIN and index != len(listed) - 1:
            raise S3Error(
                "EntityTooSmall",
                ProposedSize=size,
                MinSizeAllowed=PART_SIZE_MIN,
                PartNumber=part_number,
                ETag=etag,
            )
        total += size
    if total > OBJECT_SIZE_MAX:
        raise S3Error("EntityTooLarge", ProposedSize=total, MaxSizeAllowed=OBJECT_SIZE_MAX)
    return total
