"""Conditional requests: If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since.

Reads (GET/HEAD) follow RFC 7232 section 6 as S3 applies it:

1. If-Match present: an ETag mismatch is 412 (and If-Unmodified-Since is not consulted).
2. Otherwise If-Unmodified-Since: modified after that date is 412.
3. If-None-Match present: an ETag match is 304 (and If-Modified-Since is not consulted).
4. Otherwise If-Modified-Since: not modified since that date is 304.

CopyObject / UploadPartCopy evaluate the x-amz-copy-source-if-* headers the same way,
except that every failure is 412. Writes (PutObject, CopyObject, CompleteMultipartUpload)
take If-Match and If-None-Match (one ETag, or *) and hand them to the catalog, which
checks them in the same compare-and-swap that commits the object.

ETags are compared without quotes and weak prefixes. Dates are HTTP dates compared at
whole seconds, as Last-Modified is sent; unparseable dates are ignored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from email.utils import formatdate, parsedate_to_datetime

from s3api.errors import S3Error

__all__ = [
    "check_copy_source_conditions",
    "check_read_conditions",
    "etag_matches",
    "http_date",
    "parse_http_date",
    "parse_write_conditions",
]


def http_date(epoch_seconds: float) -> str:
    """Last-Modified and friends: 'Fri, 20 Nov 2026 23:18:56 GMT'. Objects written in the
    same second share the text: formatting it anew is a visible part of a small GET."""
    return _http_date(math.floor(epoch_seconds))


@functools.lru_cache(maxsize=4096)
def _http_date(seconds: int) -> str:
    return formatdate(seconds, usegmt=True)


def parse_http_date(value: str | None) -> float | None:
    """An HTTP date as epoch seconds; None when absent or unparseable (the header is ignored)."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None or parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def _normalize(etag: str) -> str:
    etag = etag.strip()
    if etag.startswith("W/"):
        etag = etag[2:]
    return etag.strip('"')


def etag_matches(header: str, etag: str) -> bool:
    """Whether an If-Match / If-None-Match list names etag (or is '*')."""
    wanted = _normalize(etag)
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or (candidate and _normalize(candidate) == wanted):
            return True
    return False


def _evaluate(
    if_match: str | None,
    if_none_match: str | None,
    if_modified_since: str | None,
    if_unmodified_since: str | None,
    etag: str,
    last_modified: float,
) -> str | None:
    """None if the request proceeds, else the failing condition's header name."""
    modified = math.floor(last_modified)
    if if_match is not None:
        if not etag_matches(if_match, etag):
            return "If-Match"
    else:
        since = parse_http_date(if_unmodified_since)
        if since is not None and modified > since:
            return "If-Unmodified-Since"
    if if_none_match is not None:
        if etag_matches(if_none_match, etag):
            return "If-None-Match"
    else:
        since = parse_http_date(if_modified_since)
        if since is not None and modified <= since:
            return "If-Modified-Since"
    return None


def check_read_conditions(headers: Mapping[str, str], etag: str, last_modified: float) -> None:
    """GET/HEAD preconditions -> PreconditionFailed (412) or NotModified (304).

    headers is looked up with lowercase names; etag is unquoted; last_modified is epoch
    seconds. The 304 carries ETag and Last-Modified as S3 sends them.
    """
    failed = _evaluate(
        headers.get("if-match"),
        headers.get("if-none-match"),
        headers.get("if-modified-since"),
        headers.get("if-unmodified-since"),
        etag,
        last_modified,
    )
    if failed is None:
        return
    if failed in ("If-None-Match", "If-Modified-Since"):
        raise S3Error(
            "NotModified",
            headers={"ETag": f'"{etag}"', "Last-Modified": http_date(last_modified)},
        )
    raise S3Error("PreconditionFailed", Condition=failed)


def check_copy_source_conditions(
    headers: Mapping[str, str], etag: str, last_modified: float
) -> None:
    """x-amz-copy-source-if-* of CopyObject / UploadPartCopy -> PreconditionFailed (412)."""
    prefix = "x-amz-copy-source-"
    failed = _evaluate(
        headers.get(prefix + "if-match"),
        headers.get(prefix + "if-none-match"),
        headers.get(prefix + "if-modified-since"),
        headers.get(prefix + "if-unmodified-since"),
        etag,
        last_modified,
    )
    if failed is not None:
        raise S3Error("PreconditionFailed", Condition=prefix + failed.lower())


def parse_write_conditions(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """If-Match / If-None-Match of a write -> (if_match, if_none_match), ETags unquoted.

    Each names one ETag, or '*': If-Match '*' means "exists", If-None-Match '*' "absent";
    If-None-Match with an ETag holds unless the current version has that ETag. A list of
    ETags is NotImplemented, as S3 reports it.
    """
    return (
        _write_condition(headers.get("if-match"), "If-Match"),
        _write_condition(headers.get("if-none-match"), "If-None-Match"),
    )


def _write_condition(value: str | None, header: str) -> str | None:
    if value is None:
        return None
    etag = _normalize(value)
    if not etag or "," in etag:
        raise S3Error(
            "NotImplemented",
            "A header you provided implies functionality that is not implemented",
            Header=header,
        )
    return etag
