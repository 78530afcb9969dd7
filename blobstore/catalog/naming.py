"""S3 naming rules for buckets and object keys.

Keys are ordered by their UTF-8 bytes. Unicode code point order equals UTF-8 byte order
for every encodable string, so the catalog compares `str` values directly; keys that do
not encode (lone surrogates) are rejected here.
"""

from __future__ import annotations

import ipaddress
import re

from blobstore.catalog.errors import (
    InvalidBucketNameError,
    InvalidObjectKeyError,
    ObjectKeyTooLongError,
)

KEY_BYTES_MAX = 1024
_BUCKET_CHARS = re.compile(r"^[a-z0-9.-]+$")
_FORBIDDEN_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_FORBIDDEN_SUFFIXES = ("-s3alias", "--ol-s3", "--x-s3", "--table-s3", ".mrap")


def validate_bucket_name(name: str) -> None:
    """Raise InvalidBucketNameError unless `name` follows the S3 general purpose rules."""
    if name in _valid_names:
        return
    _check_bucket_name(name)
    if len(_valid_names) >= _VALID_NAMES_MAX:
        _valid_names.clear()
    _valid_names.add(name)


_VALID_NAMES_MAX = 4096
_valid_names: set[str] = set()  # names already checked (every request checks its bucket)


def _check_bucket_name(name: str) -> None:
    if not isinstance(name, str):
        raise InvalidBucketNameError(repr(name), "not a string")
    problem = _bucket_name_shape_problem(name) or _bucket_name_reserved_problem(name)
    if problem is not None:
        raise InvalidBucketNameError(name, problem)


def _bucket_name_shape_problem(name: str) -> str | None:
    """What is wrong with the name's length and characters, if anything."""
    if not 3 <= len(name) <= 63:
        return "must be 3 to 63 characters long"
    if not _BUCKET_CHARS.match(name):
        return "only lowercase letters, digits, dots and hyphens are allowed"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "must begin and end with a letter or digit"
    if ".." in name:
        return "must not contain two adjacent periods"
    if ".-" in name or "-." in name:
        return "a period must not be next to a hyphen"
    return None


def _bucket_name_reserved_problem(name: str) -> str | None:
    """Which reserved form the name takes (an IP address, a reserved prefix or suffix),
    if any."""
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        return "must not be formatted as an IP address"
    for prefix in _FORBIDDEN_PREFIXES:
        if name.startswith(prefix):
            return f"must not start with {prefix!r}"
    for suffix in _FORBIDDEN_SUFFIXES:
        if name.endswith(suffix):
            return f"must not end with {suffix!r}"
    return None


def validate_key(key: str) -> None:
    """Raise InvalidObjectKeyError unless `key` is 1..1024 bytes of valid UTF-8."""
    if not isinstance(key, str) or not key:
        raise InvalidObjectKeyError(str(key), "must not be empty")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidObjectKeyError(key, "is not valid UTF-8") from None
    if size > KEY_BYTES_MAX:
        raise ObjectKeyTooLongError(key, size, KEY_BYTES_MAX)


def prefix_successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix`
    (None: no such string, `prefix` is empty or all maximal code points)."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code == 0xD800:
            code = 0xE000  # surrogates never occur in keys
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def common_prefix(prefix: str, delimiter: str, key: str) -> str | None:
    """The common prefix a listing rolls `key` up into: `key` up to and including the
    first `delimiter` after `prefix` (None: no delimiter, or none in the rest)."""
    if not delimiter:
        return None
    j = key.find(delimiter, len(prefix))
    if j < 0:
        return None
    return key[: j + len(delimiter)]


def shortest_separator(left: str, right: str) -> str:
    """The shortest prefix of `right` that sorts after `left` (needs left < right)."""
    assert left < right, (left, right)
    for length in range(1, len(right) + 1):
        candidate = right[:length]
        if candidate > left:
            return candidate
    return right
