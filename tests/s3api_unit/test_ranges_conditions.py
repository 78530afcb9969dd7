"""Range parsing and conditional request evaluation, as tables."""

from __future__ import annotations

import pytest

from s3api.conditions import (
    check_copy_source_conditions,
    check_read_conditions,
    etag_matches,
    http_date,
    parse_http_date,
    parse_write_conditions,
)
from s3api.errors import S3Error
from s3api.ranges import ByteRange, parse_copy_source_range, parse_range


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 10, None),
        ("bytes=0-4", 10, (0, 4)),
        ("bytes=3-3", 10, (3, 3)),
        ("bytes=5-", 10, (5, 9)),
        ("bytes=0-100", 10, (0, 9)),
        ("bytes=-3", 10, (7, 9)),
        ("bytes=-100", 10, (0, 9)),
        ("bytes=9-", 10, (9, 9)),
        ("bytes=-5", 0, None),
        ("bytes = 2-4", 10, (2, 4)),
        ("bytes=0-99999999999999999999999", 10, (0, 9)),
        # ignored: whole object
        ("bytes=4-2", 10, None),
        ("bytes=0-1,3-4", 10, None),
        ("items=0-1", 10, None),
        ("bytes=a-b", 10, None),
        ("bytes=-", 10, None),
        ("garbage", 10, None),
        ("", 10, None),
    ],
)
def test_parse_range(header: str | None, size: int, expected: tuple[int, int] | None) -> None:
    result = parse_range(header, size)
    if expected is None:
        assert result is None
    else:
        assert result == ByteRange(expected[0], expected[1], size)


@pytest.mark.parametrize(
    ("header", "size"),
    [("bytes=10-", 10), ("bytes=10-20", 10), ("bytes=-0", 10), ("bytes=0-", 0), ("bytes=0-0", 0)],
)
def test_unsatisfiable_range(header: str, size: int) -> None:
    with pytest.raises(S3Error) as caught:
        parse_range(header, size)
    assert caught.value.code == "InvalidRange"
    assert caught.value.status == 416
    assert caught.value.fields["ActualObjectSize"] == str(size)
    assert caught.value.headers == {"Content-Range": f"bytes */{size}"}


def test_byte_range_properties() -> None:
    byte_range = ByteRange(2, 5, 10)
    assert byte_range.length == 4
    assert byte_range.content_range == "bytes 2-5/10"


def test_copy_source_range() -> None:
    assert parse_copy_source_range(None, 10) is None
    assert parse_copy_source_range("bytes=0-9", 10) == ByteRange(0, 9, 10)
    for bad, code in (
        ("bytes=0-", "InvalidArgument"),
        ("bytes=-5", "InvalidArgument"),
        ("0-5", "InvalidArgument"),
        ("bytes=0-10", "InvalidRequest"),
        ("bytes=5-4", "InvalidRequest"),
    ):
        with pytest.raises(S3Error) as caught:
            parse_copy_source_range(bad, 10)
        assert caught.value.code == code, bad


ETAG = "abc123"
MODIFIED = 1_000_000.7  # Last-Modified is sent at whole seconds: 1_000_000
BEFORE = http_date(999_000)
AT = http_date(1_000_000)
AFTER = http_date(1_001_000)


@pytest.mark.parametrize(
    ("headers", "outcome"),
    [
        ({}, None),
        ({"if-match": '"abc123"'}, None),
        ({"if-match": "abc123"}, None),
        ({"if-match": '"x", "abc123"'}, None),
        ({"if-match": "*"}, None),
        ({"if-match": '"nope"'}, "If-Match"),
        ({"if-unmodified-since": AT}, None),
        ({"if-unmodified-since": AFTER}, None),
        ({"if-unmodified-since": BEFORE}, "If-Unmodified-Since"),
        ({"if-unmodified-since": "not a date"}, None),
        # If-Match true wins over a failing If-Unmodified-Since (S3 returns 200)
        ({"if-match": ETAG, "if-unmodified-since": BEFORE}, None),
        ({"if-none-match": '"abc123"'}, 304),
        ({"if-none-match": "*"}, 304),
        ({"if-none-match": 'W/"abc123"'}, 304),
        ({"if-none-match": '"other"'}, None),
        ({"if-modified-since": AT}, 304),
        ({"if-modified-since": AFTER}, 304),
        ({"if-modified-since": BEFORE}, None),
        # If-None-Match false and If-Modified-Since true: 304 (If-None-Match decides)
        ({"if-none-match": ETAG, "if-modified-since": BEFORE}, 304),
        # If-None-Match true: If-Modified-Since is not consulted
        ({"if-none-match": '"other"', "if-modified-since": AFTER}, None),
        # 412 takes precedence over 304
        ({"if-match": '"nope"', "if-none-match": ETAG}, "If-Match"),
    ],
)
def test_read_conditions(headers: dict[str, str], outcome: object) -> None:
    if outcome is None:
        check_read_conditions(headers, ETAG, MODIFIED)
        return
    with pytest.raises(S3Error) as caught:
        check_read_conditions(headers, ETAG, MODIFIED)
    if outcome == 304:
        assert caught.value.code == "NotModified"
        assert caught.value.status == 304
        assert not caught.value.has_body
        assert caught.value.headers == {"ETag": '"abc123"', "Last-Modified": AT}
    else:
        assert caught.value.code == "PreconditionFailed"
        assert caught.value.status == 412
        assert caught.value.fields["Condition"] == outcome


@pytest.mark.parametrize(
    ("headers", "condition"),
    [
        ({"x-amz-copy-source-if-match": '"abc123"'}, None),
        ({"x-amz-copy-source-if-match": '"no"'}, "x-amz-copy-source-if-match"),
        ({"x-amz-copy-source-if-none-match": '"abc123"'}, "x-amz-copy-source-if-none-match"),
        ({"x-amz-copy-source-if-modified-since": AFTER}, "x-amz-copy-source-if-modified-since"),
        (
            {"x-amz-copy-source-if-unmodified-since": BEFORE},
            "x-amz-copy-source-if-unmodified-since",
        ),
        (
            {
                "x-amz-copy-source-if-match": ETAG,
                "x-amz-copy-source-if-unmodified-since": BEFORE,
            },
            None,
        ),
        (
            {
                "x-amz-copy-source-if-none-match": ETAG,
                "x-amz-copy-source-if-modified-since": BEFORE,
            },
            "x-amz-copy-source-if-none-match",
        ),
    ],
)
def test_copy_source_conditions(headers: dict[str, str], condition: str | None) -> None:
    if condition is None:
        check_copy_source_conditions(headers, ETAG, MODIFIED)
        return
    with pytest.raises(S3Error) as caught:
        check_copy_source_conditions(headers, ETAG, MODIFIED)
    assert caught.value.code == "PreconditionFailed"
    assert caught.value.fields["Condition"] == condition


def test_write_conditions() -> None:
    assert parse_write_conditions({}) == (None, None)
    assert parse_write_conditions({"if-none-match": "*"}) == (None, "*")
    assert parse_write_conditions({"if-none-match": '"abc"'}) == (None, "abc")
    assert parse_write_conditions({"if-match": '"abc"'}) == ("abc", None)
    for bad in ({"if-none-match": '"a", "b"'}, {"if-match": '"a", "b"'}, {"if-match": '""'}):
        with pytest.raises(S3Error) as caught:
            parse_write_conditions(bad)
        assert caught.value.code == "NotImplemented"


def test_etag_and_dates() -> None:
    assert etag_matches('W/"a", "b"', "b")
    assert not etag_matches("", "b")
    assert http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert parse_http_date("Thu, 01 Jan 1970 00:00:10 GMT") == 10
    assert parse_http_date("yesterday") is None
    assert parse_http_date(None) is None


def test_http_date_is_imf_fixdate_as_the_standard_library_writes_it() -> None:
    from email.utils import formatdate

    moments = [0, 951_782_400, 1_709_164_800.9, 1_767_225_599, 4_102_444_800]
    moments += [i * 7_919_777.31 for i in range(600)]
    for moment in moments:
        assert http_date(moment) == formatdate(int(moment), usegmt=True), moment
