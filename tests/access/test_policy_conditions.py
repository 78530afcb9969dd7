"""Condition operators and keys (blobstore/access/conditions.py, policy_context.py)."""

from __future__ import annotations

import calendar
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from blobstore.access.conditions import all_hold, parse_conditions
from blobstore.access.policy_context import RequestFacts, condition_context, context_of
from blobstore.access.policy_errors import MalformedPolicy
from blobstore.access.policy_principal import user_arn

NOON_S = calendar.timegm((2024, 6, 1, 12, 0, 0))


def holds(block: dict[str, Any], values: dict[str, str | tuple[str, ...]]) -> bool:
    context = context_of(values)
    return all_hold(parse_conditions(block), context, lambda key: _single(context, key))


def _single(context: Any, key: str) -> str | None:
    found = context.get(key.lower(), ())
    return found[0] if len(found) == 1 else None


# (operator, policy value, request value, holds?)
CASES = [
    ("StringEquals", "a/b", "a/b", True),
    ("StringEquals", "a/b", "A/b", False),
    ("StringEquals", "a*", "ab", False),
    ("StringNotEquals", "a/b", "a/c", True),
    ("StringNotEquals", "a/b", "a/b", False),
    ("StringEqualsIgnoreCase", "Public", "PUBLIC", True),
    ("StringNotEqualsIgnoreCase", "Public", "PUBLIC", False),
    ("StringLike", "home/*", "home/a/b", True),
    ("StringLike", "h?me", "home", True),
    ("StringLike", "home/*", "work/a", False),
    ("StringNotLike", "home/*", "work/a", True),
    ("StringNotLike", "home/*", "home/a", False),
    ("NumericEquals", "10", "10.0", True),
    ("NumericNotEquals", "10", "11", True),
    ("NumericLessThan", "10", "9", True),
    ("NumericLessThan", "10", "10", False),
    ("NumericLessThanEquals", "10", "10", True),
    ("NumericGreaterThan", "10", "11", True),
    ("NumericGreaterThan", "10", "x", False),
    ("NumericGreaterThanEquals", "10", "10", True),
    ("DateEquals", "2024-06-01T12:00:00Z", str(NOON_S), True),
    ("DateNotEquals", "2024-06-01T12:00:00Z", "2024-06-01T12:00:01Z", True),
    ("DateLessThan", "2024-06-02", "2024-06-01T23:59:59Z", True),
    ("DateLessThan", "2024-06-01", "2024-06-01T00:00:00+00:00", False),
    ("DateLessThanEquals", "2024-06-01T00:00:00Z", "2024-06-01", True),
    ("DateGreaterThan", str(NOON_S), "2024-06-01T12:00:00.5Z", True),
    ("DateGreaterThanEquals", "2024-06-01T14:00:00+02:00", "2024-06-01T12:00:00Z", True),
    ("DateGreaterThan", "2024-06-01", "yesterday", False),
    ("Bool", "true", "true", True),
    ("Bool", "true", "false", False),
    ("Bool", "FALSE", "false", True),
    ("IpAddress", "192.0.2.0/24", "192.0.2.77", True),
    ("IpAddress", "192.0.2.0/24", "192.0.3.1", False),
    ("IpAddress", "192.0.2.7", "192.0.2.7", True),
    ("IpAddress", "2001:db8::/32", "2001:db8:1::5", True),
    ("IpAddress", "2001:db8::/32", "192.0.2.1", False),
    ("IpAddress", "0.0.0.0/0", "not an address", False),
    ("NotIpAddress", "192.0.2.0/24", "198.51.100.1", True),
    ("NotIpAddress", "192.0.2.0/24", "192.0.2.1", False),
    ("ArnEquals", "arn:aws:iam::000000000000:user/*", user_arn("alice"), True),
    ("ArnLike", "arn:aws:s3:::photos/*", "arn:aws:s3:::photos/a/b", True),
    ("ArnLike", "arn:aws:*:::photos", "arn:aws:s3:::photos", True),
    ("ArnLike", "arn:aws:s3:::photos", "not-an-arn", False),
    ("ArnNotEquals", "arn:aws:s3:::photos", "arn:aws:s3:::music", True),
    ("ArnNotLike", "arn:aws:s3:::ph*", "arn:aws:s3:::photos", False),
    ("BinaryEquals", "QmluYXJ5", "QmluYXJ5", True),
]


@pytest.mark.parametrize(("operator", "expected", "actual", "result"), CASES)
def test_each_operator_compares_as_iam(
    operator: str, expected: str, actual: str, result: bool
) -> None:
    assert holds({operator: {"k:k": expected}}, {"k:k": actual}) is result


@pytest.mark.parametrize(("operator", "expected", "actual", "result"), CASES)
def test_if_exists_holds_for_an_absent_key_and_otherwise_changes_nothing(
    operator: str, expected: str, actual: str, result: bool
) -> None:
    block = {operator + "IfExists": {"k:k": expected}}
    assert holds(block, {})
    assert holds(block, {"k:k": actual}) is result


@pytest.mark.parametrize(
    ("operator", "result"),
    [
        ("StringEquals", False),
        ("StringLike", False),
        ("NumericLessThan", False),
        ("IpAddress", False),
        ("Bool", False),
        ("StringNotEquals", True),
        ("StringNotLike", True),
        ("NotIpAddress", True),
        ("ArnNotLike", True),
    ],
)
def test_an_absent_key_fails_positive_operators_and_passes_negated_ones(
    operator: str, result: bool
) -> None:
    value = "10.0.0.0/8" if "Ip" in operator else "true" if operator == "Bool" else "1"
    assert holds({operator: {"aws:Nope": value}}, {}) is result


def test_values_in_a_list_are_alternatives_keys_and_operators_all_must_hold() -> None:
    block = {
        "StringEquals": {"s3:prefix": ["", "home/"], "s3:delimiter": "/"},
        "Bool": {"aws:SecureTransport": True},
    }
    assert holds(block, {"s3:prefix": "home/", "s3:delimiter": "/", "aws:SecureTransport": "true"})
    assert not holds(
        block, {"s3:prefix": "work/", "s3:delimiter": "/", "aws:SecureTransport": "true"}
    )
    assert not holds(block, {"s3:prefix": "", "s3:delimiter": "/", "aws:SecureTransport": "false"})
    assert not holds(block, {"s3:prefix": ""})


def test_keys_compare_without_regard_to_case_but_tag_keys_with_it() -> None:
    assert holds({"StringEquals": {"AWS:USERNAME": "alice"}}, {"aws:username": "alice"})
    tag = {"StringEquals": {"s3:ExistingObjectTag/Team": "red"}}
    assert holds(tag, {"S3:existingobjecttag/Team": "red"})
    assert not holds(tag, {"s3:ExistingObjectTag/team": "red"})


def test_null_says_whether_the_key_is_absent() -> None:
    assert holds({"Null": {"aws:username": "true"}}, {})
    assert not holds({"Null": {"aws:username": "true"}}, {"aws:username": "alice"})
    assert holds({"Null": {"aws:username": False}}, {"aws:username": "alice"})
    assert not holds({"Null": {"aws:username": "false"}}, {})


@pytest.mark.parametrize(
    ("qualifier", "values", "result"),
    [
        ("ForAnyValue", ("red", "blue"), True),
        ("ForAnyValue", ("blue",), False),
        ("ForAnyValue", (), False),
        ("ForAllValues", ("red", "green"), True),
        ("ForAllValues", ("red", "blue"), False),
        ("ForAllValues", (), True),
    ],
)
def test_set_qualifiers(qualifier: str, values: tuple[str, ...], result: bool) -> None:
    block = {f"{qualifier}:StringEquals": {"s3:RequestObjectTagKeys": ["red", "green"]}}
    context: dict[str, str | tuple[str, ...]] = (
        {"s3:RequestObjectTagKeys": values} if values else {}
    )
    assert holds(block, context) is result


def test_negated_operators_with_set_qualifiers_negate_each_value() -> None:
    block = {"ForAllValues:StringNotEquals": {"k:k": ["secret"]}}
    assert holds(block, {"k:k": ("a", "b")})
    assert not holds(block, {"k:k": ("a", "secret")})
    block = {"ForAnyValue:StringNotEquals": {"k:k": ["secret"]}}
    assert holds(block, {"k:k": ("a", "secret")})
    assert not holds(block, {"k:k": ("secret",)})


def test_string_values_read_policy_variables() -> None:
    block = {"StringLike": {"s3:prefix": ["home/${aws:username}/*"]}}
    assert holds(block, {"s3:prefix": "home/alice/docs", "aws:username": "alice"})
    assert not holds(block, {"s3:prefix": "home/bob/docs", "aws:username": "alice"})
    assert not holds(block, {"s3:prefix": "home/alice/docs"})


def test_variables_are_text_when_the_document_has_none() -> None:
    conditions = parse_conditions({"StringEquals": {"s3:prefix": "${aws:username}"}})
    context = context_of({"s3:prefix": "${aws:username}", "aws:username": "alice"})
    assert all_hold(conditions, context, None)


@pytest.mark.parametrize(
    "block",
    [
        {"StringEqualz": {"k:k": "v"}},
        {"ForSomeValues:StringEquals": {"k:k": "v"}},
        {"ForAnyValue:Null": {"k:k": "true"}},
        {"NullIfExists": {"k:k": "true"}},
        {"IfExists": {"k:k": "v"}},
    ],
)
def test_unknown_operators_make_the_policy_malformed(block: dict[str, Any]) -> None:
    with pytest.raises(MalformedPolicy, match="Invalid Condition type"):
        parse_conditions(block)


@pytest.mark.parametrize(
    "block",
    [
        {"NumericLessThan": {"s3:max-keys": "ten"}},
        {"DateLessThan": {"aws:CurrentTime": "tomorrow"}},
        {"IpAddress": {"aws:SourceIp": "192.0.2.0/33"}},
        {"Bool": {"aws:SecureTransport": "yes"}},
        {"Null": {"aws:username": "maybe"}},
    ],
)
def test_values_an_operator_cannot_read_make_the_policy_malformed(block: dict[str, Any]) -> None:
    with pytest.raises(MalformedPolicy, match="Invalid Condition value"):
        parse_conditions(block)


@pytest.mark.parametrize(
    "block",
    [
        "text",
        {"StringEquals": "v"},
        {"StringEquals": {}},
        {"StringEquals": {"k:k": []}},
        {"StringEquals": {"k:k": None}},
    ],
)
def test_malformed_blocks_are_refused(block: Any) -> None:
    with pytest.raises(MalformedPolicy):
        parse_conditions(block)


def test_unknown_keys_are_absent_not_errors() -> None:
    assert not holds({"StringEquals": {"acme:colour": "red"}}, {"aws:username": "alice"})
    assert holds({"StringNotEquals": {"acme:colour": "red"}}, {"aws:username": "alice"})


@given(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6))
def test_numeric_operators_agree_with_arithmetic(expected: int, actual: int) -> None:
    pairs = {
        "NumericEquals": actual == expected,
        "NumericNotEquals": actual != expected,
        "NumericLessThan": actual < expected,
        "NumericLessThanEquals": actual <= expected,
        "NumericGreaterThan": actual > expected,
        "NumericGreaterThanEquals": actual >= expected,
    }
    for operator, result in pairs.items():
        assert holds({operator: {"k:k": str(expected)}}, {"k:k": str(actual)}) is result, operator


# -- the request's keys -------------------------------------------------------------------


def test_a_users_request_carries_the_keys_people_use() -> None:
    facts = RequestFacts(
        user="alice",
        source_ip="192.0.2.7",
        secure_transport=True,
        now_s=NOON_S,
        headers={
            "referer": "https://example.com/",
            "user-agent": "boto3",
            "x-amz-acl": "public-read",
            "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
            "x-amz-server-side-encryption": "AES256",
            "x-amz-server-side-encryption-customer-algorithm": "AES256",
            "x-amz-tagging": "team=red&empty=",
            "x-amz-object-lock-mode": "GOVERNANCE",
        },
        query={"prefix": "", "delimiter": "/", "max-keys": "100", "versionId": "v1"},
        existing_object_tags={"Stage": "final"},
    )
    context = condition_context(facts)
    expected = {
        "aws:sourceip": ("192.0.2.7",),
        "aws:securetransport": ("true",),
        "aws:currenttime": ("2024-06-01T12:00:00Z",),
        "aws:epochtime": (str(NOON_S),),
        "aws:referer": ("https://example.com/",),
        "aws:useragent": ("boto3",),
        "aws:username": ("alice",),
        "aws:userid": ("alice",),
        "aws:principaltype": ("User",),
        "aws:principalarn": (user_arn("alice"),),
        "s3:prefix": ("",),
        "s3:delimiter": ("/",),
        "s3:max-keys": ("100",),
        "s3:versionid": ("v1",),
        "s3:x-amz-acl": ("public-read",),
        "s3:x-amz-content-sha256": ("UNSIGNED-PAYLOAD",),
        "s3:x-amz-server-side-encryption": ("AES256",),
        "s3:x-amz-server-side-encryption-customer-algorithm": ("AES256",),
        "s3:object-lock-mode": ("GOVERNANCE",),
        "s3:requestobjecttag/team": ("red",),
        "s3:requestobjecttag/empty": ("",),
        "s3:requestobjecttagkeys": ("team", "empty"),
        "s3:existingobjecttag/Stage": ("final",),
        "s3:signatureversion": ("AWS4-HMAC-SHA256",),
        "s3:authtype": ("REST-HEADER",),
    }
    assert {key: context.get(key) for key in expected} == expected


def test_an_anonymous_request_has_no_user_keys() -> None:
    context = condition_context(
        RequestFacts(user=None, source_ip="192.0.2.7", secure_transport=False, now_s=NOON_S)
    )
    assert context["aws:userid"] == ("anonymous",)
    assert context["aws:principaltype"] == ("Anonymous",)
    assert context["aws:securetransport"] == ("false",)
    for key in (
        "aws:username",
        "aws:principalarn",
        "s3:signatureversion",
        "s3:prefix",
        "aws:referer",
    ):
        assert key not in context
