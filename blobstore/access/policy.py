"""S3's policy language: bucket policies and identity policies, parsed and validated.

    policy = parse_bucket_policy(body, bucket="photos")    # PutBucketPolicy's body
    policy = parse_identity_policy(text)                    # a user's or group's policy
    statement.applies(user, "s3:GetObject", "arn:aws:s3:::photos/a.jpg", context, variables)

Both raise `MalformedPolicy` carrying S3's message when S3 would refuse the document; the
evaluation (who wins when statements disagree) is `blobstore.access.decision`'s.

The language:
- `Version` "2012-10-17" (policy variables on) or "2008-10-17" (the default when
  absent: `${...}` is plain text); `Id`; `Statement`, one object or a list of them.
- Statement: `Sid` (unique within the document), `Effect` Allow or Deny, `Principal` or
  `NotPrincipal` (required in bucket policies, refused in identity policies; see
  `policy_principal` for how users are named), `Action` or `NotAction`, `Resource` or
  `NotResource`, `Condition` (see `conditions`). Each of the lists may be one string.
- Actions: `s3:GetObject`, wildcards `s3:*`, `s3:Get*`, `*`; compared without regard
  to case. An `s3:` pattern naming no S3 action is "Policy has invalid action"; a bucket
  policy names S3 actions only. Identity policies may name other services' actions
  (they never match a request here).
- Resources: `arn:aws:s3:::bucket`, `arn:aws:s3:::bucket/prefix*`, with `*` and `?`
  wildcards (`*` crosses `/`) and policy variables (`arn:aws:s3:::b/home/${aws:username}/*`);
  compared with regard to case. A bucket policy names only resources of its own bucket
  ("Policy has invalid resource" otherwise, `*` included). An identity policy may also
  name `*`, which matches everything, and is the one resource of the account-level
  actions (s3:ListAllMyBuckets), with `arn:aws:s3:::*`.
- In a bucket policy, a statement whose actions all apply to resources of a kind none of
  its resources can be (`s3:GetObject` on `arn:aws:s3:::b`) is "Action does not apply to
  any resource(s) in statement".
- Size: at most `POLICY_BYTES_MAX` (20 KB) written compactly (whitespace outside strings
  is not counted), as S3.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from blobstore.access import policy_errors as errors
from blobstore.access.actions import (
    ACCOUNT,
    ALL_RESOURCES,
    BUCKET,
    OBJECT,
    S3_ACTIONS,
    S3_ARN_PREFIX,
)
from blobstore.access.conditions import (
    Condition,
    ConditionContext,
    all_hold,
    normalize_key,
    parse_conditions,
)
from blobstore.access.policy_errors import MalformedPolicy
from blobstore.access.policy_match import Variables, matches
from blobstore.access.policy_principal import CLUSTER_ACCOUNT_ID, Principals, parse_principal

BUCKET_POLICY = "bucket"
IDENTITY_POLICY = "identity"
VERSION_2012 = "2012-10-17"
VERSION_2008 = "2008-10-17"
POLICY_BYTES_MAX = 20 * 1024
# A body longer than this is refused before it is parsed, whatever its whitespace.
POLICY_BODY_BYTES_MAX = 4 * POLICY_BYTES_MAX
assert POLICY_BODY_BYTES_MAX >= POLICY_BYTES_MAX, "a compact document of the bound is read"

_TOP_FIELDS = frozenset({"Version", "Id", "Statement"})
_STATEMENT_FIELDS = frozenset(
    {
        "Sid",
        "Effect",
        "Principal",
        "NotPrincipal",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Condition",
    }
)
_ACTION = re.compile(r"[A-Za-z0-9-]+:[A-Za-z0-9*?]+")
_ALL_KINDS = frozenset({OBJECT, BUCKET, ACCOUNT})
_LOWER_ACTIONS = {name.lower(): kind for name, kind in S3_ACTIONS.items()}


@dataclass(frozen=True, slots=True)
class Statement:
    index: int  # its place in the document, from 0
    sid: str
    allow: bool
    principals: Principals | None  # None: identity policy (the policy's holder)
    not_principal: bool
    actions: tuple[str, ...]  # patterns, lower case
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    conditions: tuple[Condition, ...]

    @property
    def name(self) -> str:
        """How the access log names the statement: its Sid, else its place."""
        return self.sid or f"Statement[{self.index}]"

    def names_principal(self, user: str | None) -> bool:
        if self.principals is None:
            return True
        return self.principals.includes(user) != self.not_principal

    def names_action(self, action: str) -> bool:
        action = action.lower()
        return any(matches(pattern, action) for pattern in self.actions) != self.not_action

    def names_resource(self, resource: str, variables: Variables | None) -> bool:
        found = any(_resource_matches(p, resource, variables) for p in self.resources)
        return found != self.not_resource

    def applies(
        self,
        user: str | None,
        action: str,
        resource: str,
        context: ConditionContext,
        variables: Variables | None,
    ) -> bool:
        """Whether the statement speaks of this request (its Effect then applies)."""
        return (
            self.names_principal(user)
            and self.names_action(action)
            and self.names_resource(resource, variables)
            and all_hold(self.conditions, context, variables)
        )


@dataclass(frozen=True, slots=True)
class Policy:
    kind: str  # BUCKET_POLICY or IDENTITY_POLICY
    version: str
    policy_id: str
    statements: tuple[Statement, ...]

    def variables(self, context: ConditionContext) -> Variables | None:
        """The policy variables' values for a request (None: the document has none)."""
        if self.version != VERSION_2012:
            return None
        return lambda key: _single_value(context, key)

    def named_users(self) -> frozenset[str]:
        """Every user the principals name (the caller may refuse unknown ones, as S3
        refuses a principal that does not exist)."""
        return frozenset().union(*(s.principals.users for s in self.statements if s.principals))


def _single_value(context: ConditionContext, key: str) -> str | None:
    values = context.get(normalize_key(key), ())
    return values[0] if len(values) == 1 else None


def _resource_matches(pattern: str, resource: str, variables: Variables | None) -> bool:
    if resource == ALL_RESOURCES:
        return pattern in (ALL_RESOURCES, S3_ARN_PREFIX + "*")
    return matches(pattern, resource, variables=variables)


def parse_bucket_policy(
    text: str | bytes, bucket: str, account_id: str = CLUSTER_ACCOUNT_ID
) -> Policy:
    """A bucket's policy (PutBucketPolicy's body); MalformedPolicy as S3 refuses it."""
    return _parse(text, _Rules(BUCKET_POLICY, bucket, account_id))


def parse_identity_policy(text: str | bytes) -> Policy:
    """A policy attached to a user or group; MalformedPolicy as IAM refuses it."""
    return _parse(text, _Rules(IDENTITY_POLICY, "", CLUSTER_ACCOUNT_ID))


@dataclass(frozen=True, slots=True)
class _Rules:
    kind: str
    bucket: str
    account_id: str


def _document(text: str | bytes) -> object:
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > POLICY_BODY_BYTES_MAX:
        raise MalformedPolicy(errors.TOO_LARGE)
    if not raw.lstrip().startswith(b"{"):
        raise MalformedPolicy(errors.FIRST_BYTE)
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise MalformedPolicy(errors.INVALID_JSON) from None
    compact = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    if len(compact.encode()) > POLICY_BYTES_MAX:
        raise MalformedPolicy(errors.TOO_LARGE)
    return document


def _parse(text: str | bytes, rules: _Rules) -> Policy:
    document = _document(text)
    assert isinstance(document, dict), "a document starting with { is an object"
    for name in document:
        if name not in _TOP_FIELDS:
            raise errors.unknown_field(name)
    version = document.get("Version", VERSION_2008)
    if version not in (VERSION_2012, VERSION_2008):
        raise MalformedPolicy(errors.INVALID_VERSION)
    policy_id = document.get("Id", "")
    if not isinstance(policy_id, str):
        raise MalformedPolicy(errors.INVALID_SYNTAX)
    statements = _statements(document, rules)
    sids = [s.sid for s in statements if s.sid]
    if len(sids) != len(set(sids)):
        raise MalformedPolicy(errors.DUPLICATE_SID)
    return Policy(rules.kind, version, policy_id, statements)


def _statements(document: dict[str, object], rules: _Rules) -> tuple[Statement, ...]:
    if "Statement" not in document:
        raise MalformedPolicy(errors.MISSING_STATEMENT)
    raw = document["Statement"]
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise MalformedPolicy(errors.EMPTY_STATEMENT)
    return tuple(_statement(index, item, rules) for index, item in enumerate(items))


def _either(raw: dict[str, object], field: str, missing: str) -> tuple[object, bool]:
    """(value, negated?) of a field that comes as `X` or `NotX`."""
    negative = "Not" + field
    if field in raw and negative in raw:
        raise MalformedPolicy(errors.INVALID_SYNTAX)
    if field not in raw and negative not in raw:
        raise MalformedPolicy(missing)
    return (raw[field], False) if field in raw else (raw[negative], True)


def _strings(value: object) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, str) and item for item in items):
        raise MalformedPolicy(errors.INVALID_SYNTAX)
    return tuple(str(item) for item in items)


def _statement(index: int, raw: object, rules: _Rules) -> Statement:
    if not isinstance(raw, dict):
        raise MalformedPolicy(errors.INVALID_SYNTAX)
    for name in raw:
        if name not in _STATEMENT_FIELDS:
            raise errors.unknown_field(name)
    sid = raw.get("Sid", "")
    if not isinstance(sid, str):
        raise MalformedPolicy(errors.INVALID_SYNTAX)
    principals, not_principal = _principals(raw, rules)
    action_value, not_action = _either(raw, "Action", errors.MISSING_ACTION)
    actions = tuple(_action(pattern, rules) for pattern in _strings(action_value))
    resource_value, not_resource = _either(raw, "Resource", errors.MISSING_RESOURCE)
    resources = tuple(_resource(pattern, rules) for pattern in _strings(resource_value))
    if rules.kind == BUCKET_POLICY and not not_action and not not_resource:
        _check_applies(actions, resources)
    conditions = parse_conditions(raw["Condition"]) if "Condition" in raw else ()
    allow = _effect(raw)
    return Statement(
        index,
        sid,
        allow,
        principals,
        not_principal,
        actions,
        not_action,
        resources,
        not_resource,
        conditions,
    )


def _effect(raw: dict[str, object]) -> bool:
    if "Effect" not in raw:
        raise MalformedPolicy(errors.MISSING_EFFECT)
    effect = raw["Effect"]
    if effect not in ("Allow", "Deny"):
        raise errors.invalid_effect(effect)
    return effect == "Allow"


def _principals(raw: dict[str, object], rules: _Rules) -> tuple[Principals | None, bool]:
    if rules.kind == IDENTITY_POLICY:
        if "Principal" in raw or "NotPrincipal" in raw:
            raise MalformedPolicy(errors.IDENTITY_PRINCIPAL)
        return None, False
    value, negated = _either(raw, "Principal", errors.MISSING_PRINCIPAL)
    return parse_principal(value, rules.account_id), negated


def _action(pattern: str, rules: _Rules) -> str:
    pattern = pattern.lower()
    if pattern == "*":
        return pattern
    if not _ACTION.fullmatch(pattern):
        raise MalformedPolicy(errors.INVALID_ACTION)
    service = pattern.partition(":")[0]
    if service != "s3":
        if rules.kind == BUCKET_POLICY:
            raise MalformedPolicy(errors.INVALID_ACTION)
        return pattern
    if not any(matches(pattern, name) for name in _LOWER_ACTIONS):
        raise MalformedPolicy(errors.INVALID_ACTION)
    return pattern


def _resource(pattern: str, rules: _Rules) -> str:
    if rules.kind == IDENTITY_POLICY:
        if pattern != ALL_RESOURCES and (not pattern.startswith("arn:") or pattern.count(":") < 5):
            raise MalformedPolicy(errors.INVALID_RESOURCE)
        return pattern
    if not pattern.startswith(S3_ARN_PREFIX) or len(pattern) == len(S3_ARN_PREFIX):
        raise MalformedPolicy(errors.INVALID_RESOURCE)
    bucket_part = pattern[len(S3_ARN_PREFIX) :].split("/", 1)[0]
    as_pattern = re.sub(r"\$\{[^}]*\}", "*", bucket_part)
    if not matches(as_pattern, rules.bucket):
        raise MalformedPolicy(errors.INVALID_RESOURCE)
    return pattern


def _resource_kinds(pattern: str) -> frozenset[str]:
    """The kinds of resource an S3 ARN pattern can name."""
    rest = pattern[len(S3_ARN_PREFIX) :]
    if "/" in rest:
        return frozenset({OBJECT})
    if "*" in rest or "${" in rest:
        return frozenset({BUCKET, OBJECT})
    return frozenset({BUCKET})


def _action_kinds(pattern: str) -> frozenset[str]:
    if pattern == "*":
        return _ALL_KINDS
    return frozenset(kind for name, kind in _LOWER_ACTIONS.items() if matches(pattern, name))


def _check_applies(actions: tuple[str, ...], resources: tuple[str, ...]) -> None:
    action_kinds = frozenset().union(*(_action_kinds(pattern) for pattern in actions))
    resource_kinds = frozenset().union(*(_resource_kinds(pattern) for pattern in resources))
    if action_kinds.isdisjoint(resource_kinds):
        raise MalformedPolicy(errors.ACTION_RESOURCE_MISMATCH)
