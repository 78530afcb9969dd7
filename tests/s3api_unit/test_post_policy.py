"""POST Object policy documents (s3api/post_policy.py) and form signatures
(s3api/sigv4.py `authenticate_form`), checked against botocore's own presigned POST."""

from __future__ import annotations

import base64
import calendar
import json
from typing import Any

import boto3
import pytest
from botocore.config import Config

from s3api.errors import S3Error
from s3api.post_policy import check_form, check_size, parse_policy
from s3api.sigv4 import authenticate_form, form_signature_v2
from tests.s3api_unit.helpers import ACCESS_KEY, SECRET_KEY, SECRETS

NOW_S = float(calendar.timegm((2030, 6, 1, 12, 0, 0, 0, 0, 0)))


def encoded(document: Any) -> str:
    return base64.b64encode(json.dumps(document).encode()).decode()


def policy_of(*conditions: Any, expiration: str = "2030-06-01T12:00:01.000Z") -> str:
    return encoded({"expiration": expiration, "conditions": list(conditions)})


def denial(policy: str, fields: dict[str, str], now_s: float = NOW_S) -> str:
    with pytest.raises(S3Error) as e:
        check_form(parse_policy(policy), fields, now_s)
    assert e.value.code == "AccessDenied"
    return e.value.message


# ---------------------------------------------------------------------- checks


def test_a_form_meeting_every_condition_passes() -> None:
    policy = parse_policy(
        policy_of(
            {"bucket": "photos"},
            ["starts-with", "$key", "user/"],
            ["eq", "$acl", "private"],
            ["starts-with", "$x-amz-meta-tag", ""],
            ["content-length-range", 1, 100],
        )
    )
    fields = {
        "bucket": "photos",
        "key": "user/cat.png",
        "acl": "private",
        "x-amz-meta-tag": "anything",
        "policy": "...",
        "signature": "...",
        "awsaccesskeyid": "...",
        "x-ignore-note": "not conditioned",
    }
    check_form(policy, fields, NOW_S)
    assert (policy.size_min, policy.size_max) == (1, 100)


def test_expiration_is_checked_first() -> None:
    policy = policy_of({"bucket": "other"}, expiration="2030-06-01T12:00:00Z")
    assert denial(policy, {"bucket": "photos"}) == "Invalid according to Policy: Policy expired."
    check_form(parse_policy(policy), {"bucket": "other"}, NOW_S - 0.5)


@pytest.mark.parametrize(
    ("condition", "value", "quoted"),
    [
        ({"key": "a"}, "b", '["eq", "$key", "a"]'),
        (["eq", "$key", "a"], "ab", '["eq", "$key", "a"]'),
        (["starts-with", "$key", "user/"], "users/x", '["starts-with", "$key", "user/"]'),
        (["eq", "$key", ""], None, '["eq", "$key", ""]'),  # a missing field fails
        (["starts-with", "$key", "a"], None, '["starts-with", "$key", "a"]'),
    ],
)
def test_a_failed_condition_is_quoted(condition: Any, value: str | None, quoted: str) -> None:
    fields = {} if value is None else {"key": value}
    message = denial(policy_of(condition), fields)
    assert message == f"Invalid according to Policy: Policy Condition failed: {quoted}"


def test_names_and_operators_are_case_insensitive_values_are_not() -> None:
    policy = policy_of({"bUcKeT": "photos"}, ["StArTs-WiTh", "$KeY", "Foo"])
    check_form(parse_policy(policy), {"bucket": "photos", "key": "Foo.txt"}, NOW_S)
    denial(policy, {"bucket": "photos", "key": "foo.txt"})


def test_content_type_starts_with_applies_to_each_value() -> None:
    policy = policy_of(["starts-with", "$Content-Type", "image/"])
    check_form(parse_policy(policy), {"content-type": "image/png, image/gif"}, NOW_S)
    denial(policy, {"content-type": "image/png,text/html"})


def test_fields_no_condition_names_are_refused() -> None:
    message = denial(policy_of({"key": "k"}), {"key": "k", "x-amz-meta-a": "1", "acl": "x"})
    assert message == "Invalid according to Policy: Extra input fields: acl, x-amz-meta-a"
    # The bucket is a field too: a policy must name it.
    message = denial(policy_of({"key": "k"}), {"key": "k", "bucket": "photos"})
    assert message.endswith("Extra input fields: bucket")


def test_content_length_range_bounds_the_size() -> None:
    policy = parse_policy(
        policy_of(["content-length-range", 10, 100], ["content-length-range", "20", "200"])
    )
    assert (policy.size_min, policy.size_max) == (20, 100)  # both hold
    check_size(policy, 50, complete=True)
    check_size(policy, 5, complete=False)  # still streaming: only the maximum
    for size, code in ((101, "EntityTooLarge"), (19, "EntityTooSmall")):
        with pytest.raises(S3Error) as e:
            check_size(policy, size, complete=True)
        assert e.value.code == code
    unbounded = parse_policy(policy_of())
    check_size(unbounded, 1 << 40, complete=True)


# ---------------------------------------------------------------------- grammar


@pytest.mark.parametrize(
    "policy",
    [
        "not base64!",
        base64.b64encode(b"{not json").decode(),
        encoded(["a list"]),
        encoded({"conditions": []}),  # no expiration
        encoded({"expiration": "2030-01-01T00:00:00Z"}),  # no conditions
        encoded({"EXPIRATION": "2030-01-01T00:00:00Z", "conditions": []}),
        encoded({"expiration": "2030-01-01T00:00:00Z", "CONDITIONS": []}),
        encoded({"expiration": "2030-01-01 00:00:00", "conditions": []}),
        encoded({"expiration": "2030-13-01T00:00:00Z", "conditions": []}),
        encoded({"expiration": 1893456000, "conditions": []}),
        encoded({"expiration": "2030-01-01T00:00:00Z", "conditions": {}}),
        policy_of({}),
        policy_of({"a": "1", "b": "2"}),
        policy_of({"key": 1}),
        policy_of(["eq", "$key"]),
        policy_of(["eq", "key", "v"]),
        policy_of(["eq", "$", "v"]),
        policy_of(["ends-with", "$key", "v"]),
        policy_of(["eq", "$key", 5]),
        policy_of("a string"),
        policy_of(["content-length-range", 0]),
        policy_of(["content-length-range", -1, 0]),
        policy_of(["content-length-range", 10, 1]),
        policy_of(["content-length-range", True, 1]),
        policy_of(["content-length-range", "1e3", 5000]),
    ],
)
def test_malformed_policies_are_invalid_policy_documents(policy: str) -> None:
    with pytest.raises(S3Error) as e:
        parse_policy(policy)
    assert e.value.code == "InvalidPolicyDocument"
    assert e.value.message.startswith("Invalid Policy: ")


def test_expiration_forms() -> None:
    for text in ("2030-06-01T12:00:01Z", "2030-06-01T12:00:01.000Z", "2030-06-01T12:00:01.5Z"):
        assert parse_policy(policy_of(expiration=text)).expiration_s >= NOW_S + 1


# ---------------------------------------------------------------------- signatures


def presigned_post(**kwargs: Any) -> dict[str, str]:
    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="eu-west-3",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    fields: dict[str, str] = client.generate_presigned_post("photos", "k", **kwargs)["fields"]
    return {name.lower(): value for name, value in fields.items()}


def test_botocore_presigned_post_verifies() -> None:
    fields = presigned_post(Conditions=[["content-length-range", 1, 10]])
    auth = authenticate_form(fields, SECRETS.get)
    assert auth is not None
    assert (auth.access_key, auth.region, auth.signature_version) == (ACCESS_KEY, "eu-west-3", 4)
    policy = parse_policy(fields["policy"])
    check_form(policy, {**fields, "bucket": "photos"}, NOW_S - 365 * 86400 * 10)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"x-amz-signature": "0" * 64}, "SignatureDoesNotMatch"),
        (
            {"policy": encoded({"expiration": "2099-01-01T00:00:00Z", "conditions": []})},
            "SignatureDoesNotMatch",
        ),
        ({"x-amz-credential": "nobody/{day}/eu-west-3/s3/aws4_request"}, "InvalidAccessKeyId"),
        ({"x-amz-credential": "k/{day}/eu-west-3/sqs/aws4_request"}, "InvalidArgument"),
        ({"x-amz-credential": "k/20200101/eu-west-3/s3/aws4_request"}, "InvalidArgument"),
        ({"x-amz-algorithm": "AWS4-HMAC-SHA1"}, "InvalidArgument"),
        ({"x-amz-date": "yesterday"}, "InvalidArgument"),
        ({"x-amz-signature": ""}, "InvalidArgument"),
        ({"policy": ""}, "InvalidArgument"),
    ],
)
def test_altered_v4_forms_are_refused(change: dict[str, str], code: str) -> None:
    fields = presigned_post()
    day = fields["x-amz-date"][:8]
    fields.update({name: value.replace("{day}", day) for name, value in change.items()})
    with pytest.raises(S3Error) as e:
        authenticate_form(fields, SECRETS.get)
    assert e.value.code == code


def test_v2_forms_and_anonymous_forms() -> None:
    policy = policy_of({"key": "k"})
    fields = {
        "awsaccesskeyid": ACCESS_KEY,
        "policy": policy,
        "signature": form_signature_v2(SECRET_KEY, policy),
    }
    auth = authenticate_form(fields, SECRETS.get)
    assert auth is not None
    assert (auth.access_key, auth.signature_version) == (ACCESS_KEY, 2)
    forged = {**fields, "signature": form_signature_v2("another secret", policy)}
    with pytest.raises(S3Error) as e:
        authenticate_form(forged, SECRETS.get)
    assert e.value.code == "SignatureDoesNotMatch"
    assert authenticate_form({"key": "k", "acl": "public-read"}, SECRETS.get) is None
    for missing in ("signature", "awsaccesskeyid"):
        unsigned = {name: value for name, value in fields.items() if name != missing}
        with pytest.raises(S3Error) as e:
            authenticate_form(unsigned, SECRETS.get)
        assert e.value.code == "InvalidArgument"
        assert e.value.fields["ArgumentName"] in ("signature", "AWSAccessKeyId")


def test_starts_with_nothing_lets_a_field_be_absent() -> None:
    """`["starts-with", "$f", ""]` allows any value of f, and its absence too."""
    policy = parse_policy(
        policy_of({"bucket": "photos"}, ["starts-with", "$x-amz-server-side-encryption", ""])
    )
    check_form(policy, {"bucket": "photos"}, NOW_S)
    check_form(policy, {"bucket": "photos", "x-amz-server-side-encryption": "AES256"}, NOW_S)
