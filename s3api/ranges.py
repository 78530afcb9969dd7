"""The Range header of GET/HEAD Object, as S3 reads it (RFC 7233, single range only).

S3 honours one byte range: `bytes=first-last`, `bytes=first-` or `bytes=-suffix`.
A header it cannot parse, with another unit, or with several ranges is ignored and the
whole object is returned. A well-formed range that selects no byte of the object is
InvalidRange (416); on an empty object that is every range but a suffix (`bytes=-n`
reads the whole, empty object, as readers of file tails expect). A range past the end
is clamped to the object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from s3api.errors import S3Error

__all__ = ["ByteRange", "parse_range", "parse_copy_source_range"]

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_DIGITS_MAX = 19  # 5 TiB needs 13; longer numbers are clamped, never parsed unbounded


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes first..last (inclusive) of an object of object_size bytes."""

    first: int
    last: int
    object_size: int

    def __post_init__(self) -> None:
        assert 0 <= self.first <= self.last < self.object_size, (
            self.first,
            self.last,
            self.object_size,
        )

    @property
    def length(self) -> int:
        return self.last - self.first + 1

    @property
    def content_range(self) -> str:
        """The Content-Range header of the 206 response."""
        return f"bytes {self.first}-{self.last}/{self.object_size}"


def _number(text: str) -> int:
    # Numbers beyond any object size behave the same as a very large number.
    return int(text) if len(text) <= _DIGITS_MAX else 10**_DIGITS_MAX


def _unsatisfiable(header: str, object_size: int) -> S3Error:
    return S3Error(
        "InvalidRange",
        headers={"Content-Range": f"bytes */{object_size}"},
        RangeRequested=header,
        ActualObjectSize=object_size,
    )


def parse_range(header: str | None, object_size: int) -> ByteRange | None:
    """The range a Range header selects; None for the whole object; InvalidRange (416)."""
    assert object_size >= 0, object_size
    if header is None:
        return None
    match = _RANGE.match(header.strip().replace(" ", ""))
    if match is None:
        return None  # other units, several ranges, garbage: S3 serves the whole object
    first_text, last_text = match.groups()
    if not first_text:
        if not last_text:
            return None
        suffix = _number(last_text)
        if suffix == 0:
            raise _unsatisfiable(header, object_size)
        if object_size == 0:
            return None  # a suffix of an empty object is the (empty) whole object
        return ByteRange(max(0, object_size - suffix), object_size - 1, object_size)
    first = _number(first_text)
    last = _number(last_text) if last_text else None
    if last is not None and last < first:
        return None  # syntactically invalid: ignored
    if first >= object_size:
        raise _unsatisfiable(header, object_size)
    end = object_size - 1 if last is None else min(last, object_size - 1)
    return ByteRange(first, end, object_size)


def parse_copy_source_range(header: str | None, object_size: int) -> ByteRange | None:
    """x-amz-copy-source-range of UploadPartCopy: strictly `bytes=first-last` within the source.

    Unlike Range, a malformed value is InvalidArgument and a range past the end of the
    source is InvalidRequest, as S3 reports them.
    """
    if header is None:
        return None
    match = _RANGE.match(header.strip())
    if match is None or not match.group(1) or not match.group(2):
        raise S3Error(
            "InvalidArgument",
            "The x-amz-copy-source-range value must be of the form bytes=first-last where "
            "first and last are the zero-based offsets of the first and last bytes to copy",
            ArgumentName="x-amz-copy-source-range",
            ArgumentValue=header,
        )
    first = _number(match.group(1))
    last = _number(match.group(2))
    if last < first or last >= object_size:
        raise S3Error(
            "InvalidRequest",
            f"The specified copy range is invalid for the source object size: {object_size}",
        )
    return ByteRange(first, last, object_size)
