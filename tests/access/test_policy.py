"""Parsing and validating policy documents (blobstore/access/policy.py), and the wildcard
and principal matching their statements use."""

from __future__ import annotations

import json
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from blobstore.access.policy import (
    POLICY_BYTES_MAX,
    VERSION_2008,
    Policy,
    parse_bucket_policy,
    parse_identity_policy,
)
from blobstore.access.policy_context import context_of
from blobstore.access.policy_errors import MalformedPolicy
from blobstore.access.policy_match import matches
from blobstore.access.policy_principal import CLUSTER_ACCOUNT_ID, parse_principal, user_arn

BUCKET = "photos"


def statement(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{BUCKET}/*",
    }
    base.update(fields)
    return {key: value for key, value in base.items() if value is not None}


def document(*statements: dict[str, Any], version: str = "2012-10-17") -> str:
    return json.dumps({"Version": version, "Statement": list(statements)})


def bucket_policy(*statements: dict[str, Any], version: str = "2012-10-17") -> Policy:
    return parse_bucket_policy(document(*statements, version=version), BUCKET)


def refusal(text: str, bucket: str = BUCKET) -> str:
    with pytest.raises(MalformedPolicy) as raised:
        parse_bucket_policy(text, bucket)
    return raised.value.message


# -- the document -------------------------------------------------------------------------


def test_a_public_read_policy_parses_with_its_parts() -> None:
    policy = bucket_policy(statement(Sid="PublicRead"))
    (only,) = policy.statements
    assert (only.sid, only.allow, only.actions, only.resources) == (
        "PublicRead",
        True,
        ("s3:getobject",),
        (f"arn:aws:s3:::{BUCKET}/*",),
    )
    assert only.principals is not None and only.principals.everyone


def test_a_single_statement_object_counts_as_a_list_of_one() -> None:
    text = json.dumps({"Version": "2012-10-17", "Statement": statement()})
    assert len(parse_bucket_policy(text, BUCKET).statements) == 1


def test_a_document_without_version_is_2008_10_17() -> None:
    text = json.dumps({"Statement": [statement()]})
    assert parse_bucket_policy(text, BUCKET).version == VERSION_2008


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Policies must be valid JSON and the first byte must be '{'"),
        ("[]", "Policies must be valid JSON and the first byte must be '{'"),
        ("{not json", "This policy contains invalid Json"),
        ('{"Version": "2012-10-17"}', "Missing required field Statement"),
        (
            '{"Version": "2012-10-17", "Statement": []}',
            "Could not parse the policy: Statement is empty!",
        ),
        (
            '{"Version": "2020-01-01", "Statement": []}',
            "The policy must contain a valid version string",
        ),
        ('{"Version": "2012-10-17", "Statement": [], "Extra": 1}', "Unknown field Extra"),
        ('{"Version": "2012-10-17", "Statement": ["text"]}', "Invalid policy syntax."),
    ],
)
def test_a_bad_document_is_refused_with_s3s_message(text: str, message: str) -> None:
    assert refusal(text) == message


def test_the_size_bound_counts_the_compact_form() -> None:
    sids = [f"S{i:05d}" for i in range(400)]
    statements = [statement(Sid=sid) for sid in sids]
    compact = json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))
    assert len(compact) > POLICY_BYTES_MAX
    assert refusal(compact) == "Policy exceeds the maximum allowed document size."
    small = json.dumps({"Version": "2012-10-17", "Statement": statements[:50]}, indent=12)
    assert parse_bucket_policy(small, BUCKET).statements[-1].sid == "S00049"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"Effect": None}, "Missing required field Effect"),
        ({"Effect": "allow"}, "Invalid effect: allow"),
        ({"Principal": None}, "Missing required field Principal"),
        ({"Action": None}, "Missing required field Action"),
        ({"Resource": None}, "Missing required field Resource"),
        ({"Principal": "alice"}, "Invalid principal in policy"),
        ({"NotPrincipal": "*"}, "Invalid policy syntax."),
        ({"NotAction": "s3:PutObject"}, "Invalid policy syntax."),
        ({"Action": "s3:Fly"}, "Policy has invalid action"),
        ({"Action": "s3:Fly*"}, "Policy has invalid action"),
        ({"Action": "iam:CreateUser"}, "Policy has invalid action"),
        ({"Action": "GetObject"}, "Policy has invalid action"),
        ({"Action": []}, "Invalid policy syntax."),
        ({"Resource": "*"}, "Policy has invalid resource"),
        ({"Resource": "arn:aws:s3:::other/*"}, "Policy has invalid resource"),
        ({"Resource": "arn:aws:s3:::"}, "Policy has invalid resource"),
        ({"Resource": "photos/*"}, "Policy has invalid resource"),
        (
            {"Resource": f"arn:aws:s3:::{BUCKET}"},
            "Action does not apply to any resource(s) in statement",
        ),
        (
            {"Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{BUCKET}/*"},
            "Action does not apply to any resource(s) in statement",
        ),
        (
            {"Action": "s3:ListAllMyBuckets", "Resource": f"arn:aws:s3:::{BUCKET}*"},
            "Action does not apply to any resource(s) in statement",
        ),
        ({"Colour": "blue"}, "Unknown field Colour"),
        ({"Sid": 5}, "Invalid policy syntax."),
        (
            {"Condition": {"StringEqualz": {"aws:Referer": "x"}}},
            "Invalid Condition type : StringEqualz",
        ),
    ],
)
def test_a_bad_statement_is_refused_with_s3s_message(fields: dict[str, Any], message: str) -> None:
    assert refusal(document(statement(**fields))) == message


def test_statement_ids_are_unique() -> None:
    text = document(statement(Sid="A"), statement(Sid="A"))
    assert refusal(text) == "Statement IDs (SID) in a single policy must be unique."


@pytest.mark.parametrize(
    "fields",
    [
        {"Action": "s3:*", "Resource": f"arn:aws:s3:::{BUCKET}"},
        {"Action": ["s3:ListBucket", "s3:GetObject"], "Resource": f"arn:aws:s3:::{BUCKET}"},
        {"Action": "s3:Get*", "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]},
        {"Action": "*", "Resource": f"arn:aws:s3:::{BUCKET}"},
        {"Action": "S3:getobject"},
        {"Resource": "arn:aws:s3:::pho*/*"},
        {"Resource": "arn:aws:s3:::photo?/a/b?c*"},
        {"Resource": "arn:aws:s3:::*"},
        {"NotAction": "s3:ListBucket", "Action": None, "Resource": f"arn:aws:s3:::{BUCKET}"},
        {"NotResource": f"arn:aws:s3:::{BUCKET}/private/*", "Resource": None},
        {"Principal": None, "NotPrincipal": {"AWS": "alice"}, "Effect": "Deny"},
        {"Resource": "arn:aws:s3:::photos/home/${aws:username}/*"},
        {"Principal": {"Service": "logging.s3.amazonaws.com"}},
    ],
)
def test_valid_statements_parse(fields: dict[str, Any]) -> None:
    assert len(bucket_policy(statement(**fields)).statements) == 1


# -- identity policies --------------------------------------------------------------------


def test_identity_policies_refuse_a_principal_and_allow_any_resource() -> None:
    with pytest.raises(MalformedPolicy, match="should not specify a principal"):
        parse_identity_policy(document(statement()))
    policy = parse_identity_policy(
        document(
            statement(Principal=None, Action="*", Resource="*"),
            statement(
                Principal=None, Action="iam:GetUser", Resource="arn:aws:iam::000000000000:user/x"
            ),
            statement(Principal=None, Resource="arn:aws:s3:::any-bucket/*"),
        )
    )
    assert [s.principals for s in policy.statements] == [None, None, None]
    with pytest.raises(MalformedPolicy, match="Policy has invalid resource"):
        parse_identity_policy(document(statement(Principal=None, Resource="bucket/*")))


# -- principals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        {"AWS": "alice"},
        {"AWS": [user_arn("alice")]},
        {"AWS": f"arn:aws:iam::{CLUSTER_ACCOUNT_ID}:user/team/alice"},
        {"CanonicalUser": "alice"},
    ],
)
def test_every_way_of_naming_a_user_names_that_user_only(raw: object) -> None:
    principals = parse_principal(raw)
    assert principals.includes("alice")
    assert not principals.includes("bob")
    assert not principals.includes(None)


@pytest.mark.parametrize("raw", [CLUSTER_ACCOUNT_ID, f"arn:aws:iam::{CLUSTER_ACCOUNT_ID}:root"])
def test_the_account_names_every_user_but_not_anonymous(raw: str) -> None:
    principals = parse_principal({"AWS": raw})
    assert principals.includes("alice") and principals.includes("bob")
    assert not principals.includes(None)


@pytest.mark.parametrize("raw", ["*", {"AWS": "*"}, {"AWS": ["alice", "*"]}])
def test_a_wildcard_principal_names_everyone_anonymous_included(raw: object) -> None:
    assert parse_principal(raw).includes(None)


@pytest.mark.parametrize(
    "raw",
    [
        "alice",
        {},
        {"AWS": []},
        {"AWS": ""},
        {"AWS": "arn:aws:iam::123456789012:user/alice"},
        {"AWS": "123456789012"},
        {"AWS": f"arn:aws:iam::{CLUSTER_ACCOUNT_ID}:role/admin"},
        {"AWS": f"arn:aws:iam::{CLUSTER_ACCOUNT_ID}:user/*"},
        {"AWS": "ali ce"},
        {"Users": "alice"},
        {"AWS": 5},
    ],
)
def test_bad_principals_are_refused(raw: object) -> None:
    with pytest.raises(MalformedPolicy, match="Invalid principal in policy"):
        parse_principal(raw)


def test_named_users_lists_every_user_the_principals_name() -> None:
    policy = bucket_policy(
        statement(Principal={"AWS": ["alice", user_arn("bob")]}),
        statement(Principal={"CanonicalUser": "carol"}, Effect="Deny"),
    )
    assert policy.named_users() == {"alice", "bob", "carol"}


def test_not_principal_applies_to_everyone_it_does_not_name() -> None:
    (deny,) = bucket_policy(
        statement(Principal=None, NotPrincipal={"AWS": "alice"}, Effect="Deny")
    ).statements
    assert not deny.names_principal("alice")
    assert deny.names_principal("bob")
    assert deny.names_principal(None)


# -- actions and resources ----------------------------------------------------------------


def test_actions_match_without_regard_to_case_and_with_wildcards() -> None:
    (only,) = bucket_policy(
        statement(Action=["s3:Get*", "s3:ListBucket"], Resource=["arn:aws:s3:::photos*"])
    ).statements
    assert only.names_action("s3:GetObject")
    assert only.names_action("S3:GETOBJECTVERSION")
    assert only.names_action("s3:ListBucket")
    assert not only.names_action("s3:PutObject")
    assert not only.names_action("s3:ListBucketVersions")


def test_not_action_names_every_other_action() -> None:
    (only,) = bucket_policy(
        statement(Action=None, NotAction="s3:Delete*", Resource="arn:aws:s3:::photos/*")
    ).statements
    assert only.names_action("s3:GetObject")
    assert not only.names_action("s3:DeleteObject")


def test_resources_match_with_regard_to_case_and_star_crosses_slashes() -> None:
    (only,) = bucket_policy(statement(Resource="arn:aws:s3:::photos/public/*")).statements
    assert only.names_resource("arn:aws:s3:::photos/public/a/b/c.jpg", None)
    assert not only.names_resource("arn:aws:s3:::photos/Public/a.jpg", None)
    assert not only.names_resource("arn:aws:s3:::photos/private/a.jpg", None)


def test_not_resource_names_every_other_resource() -> None:
    (only,) = bucket_policy(
        statement(Resource=None, NotResource="arn:aws:s3:::photos/private/*")
    ).statements
    assert only.names_resource("arn:aws:s3:::photos/a.jpg", None)
    assert not only.names_resource("arn:aws:s3:::photos/private/a.jpg", None)


def test_a_username_variable_gives_each_user_a_home() -> None:
    policy = bucket_policy(statement(Resource="arn:aws:s3:::photos/home/${aws:username}/*"))
    (only,) = policy.statements
    alice = context_of({"aws:username": "alice"})
    anonymous = context_of({})
    resource = "arn:aws:s3:::photos/home/alice/a.jpg"
    assert only.names_resource(resource, policy.variables(alice))
    assert not only.names_resource("arn:aws:s3:::photos/home/bob/a.jpg", policy.variables(alice))
    assert not only.names_resource(resource, policy.variables(anonymous))


def test_variables_are_plain_text_in_2008_10_17_documents() -> None:
    policy = bucket_policy(
        statement(Resource="arn:aws:s3:::photos/${aws:username}"), version="2008-10-17"
    )
    (only,) = policy.statements
    alice = context_of({"aws:username": "alice"})
    assert policy.variables(alice) is None
    assert only.names_resource("arn:aws:s3:::photos/${aws:username}", None)
    assert not only.names_resource("arn:aws:s3:::photos/alice", None)


def test_the_account_resource_is_matched_by_star_and_every_s3_arn() -> None:
    policy = parse_identity_policy(
        document(statement(Principal=None, Action="s3:ListAllMyBuckets", Resource="arn:aws:s3:::*"))
    )
    assert policy.statements[0].names_resource("*", None)
    narrow = parse_identity_policy(
        document(statement(Principal=None, Action="s3:*", Resource="arn:aws:s3:::photos*"))
    )
    assert not narrow.statements[0].names_resource("*", None)


# -- wildcards against an oracle ----------------------------------------------------------

ALPHABET = "ab/*?:."


def oracle(pattern: str, value: str) -> bool:
    """Wildcard matching by dynamic programming: `*` any run, `?` one character."""
    reachable = [True] + [False] * len(value)
    for symbol in pattern:
        if symbol == "*":
            for i in range(1, len(value) + 1):
                reachable[i] = reachable[i] or reachable[i - 1]
        else:
            reachable = [False] + [
                reachable[i] and (symbol == "?" or symbol == value[i]) for i in range(len(value))
            ]
    return reachable[len(value)]


@given(st.text(ALPHABET, max_size=8), st.text(ALPHABET, max_size=10))
def test_wildcard_matching_agrees_with_the_oracle(pattern: str, value: str) -> None:
    assert matches(pattern, value) == oracle(pattern, value)


@given(st.text(ALPHABET, max_size=10))
def test_without_wildcards_a_pattern_is_its_own_text(value: str) -> None:
    assert matches(value, value, wildcards=False)
    assert matches("*", value)
    assert not matches(value + "x", value, wildcards=False)


@given(st.text("ab*?", min_size=1, max_size=6), st.text("ab", min_size=1, max_size=6))
def test_a_variables_value_stands_for_itself(name: str, other: str) -> None:
    """A user named `a*` is no wildcard: its home holds only its own name."""
    variables = {"aws:username": name}.get
    pattern = "home/${aws:username}/*"
    assert matches(pattern, f"home/{name}/x", variables=variables)
    assert matches(pattern, f"home/{other}/x", variables=variables) == (other == name)


def test_escapes_and_defaults_of_variables() -> None:
    lookup = {"aws:username": "alice"}.get
    assert matches("a${*}b", "a*b", variables=lookup, wildcards=False)
    assert not matches("a${*}b", "axb", variables=lookup)
    assert matches("${?}${$}", "?$", variables=lookup, wildcards=False)
    assert matches("home/${aws:userid, 'nobody'}", "home/nobody", variables=lookup)
    assert not matches("home/${aws:userid}", "home/", variables=lookup)
