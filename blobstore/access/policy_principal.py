"""The Principal and NotPrincipal elements of a bucket policy, and how users are named.

The cluster is one account, `CLUSTER_ACCOUNT_ID`, whose users are its IAM users. A
policy names a user of the cluster in any of these ways (all the same user "alice"):

    "alice"                                        the user name alone
    "arn:aws:iam::000000000000:user/alice"         the user's ARN (`user_arn`)
    "arn:aws:iam::000000000000:user/team/alice"    an ARN with a path: the last part names
    {"CanonicalUser": "alice"}                     the canonical user id, which is the name

and every user of the cluster (authenticated, not anonymous) as the account:
`"000000000000"` or `"arn:aws:iam::000000000000:root"`. `"*"` or `{"AWS": "*"}` is
everyone, anonymous requests included. An ARN naming another account, a role, a group or
a wildcard inside an ARN is "Invalid principal in policy". `Service` and `Federated`
principals are accepted (policies written for AWS carry them) and match no request here.
Whether a named user exists is not this module's concern: `Principals.users` lists them
for the caller to check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from blobstore.access.policy_errors import INVALID_PRINCIPAL, MalformedPolicy

CLUSTER_ACCOUNT_ID = "000000000000"
_ACCOUNT_ID = re.compile(r"\d{12}")
_USER_NAME = re.compile(r"[\w+=,.@-]{1,64}", re.ASCII)
_USER_ARN = re.compile(r"arn:aws:iam::(\d{12}):user/(?:[\w+=,.@-]+/)*([\w+=,.@-]{1,64})", re.ASCII)
_ROOT_ARN = re.compile(r"arn:aws:iam::(\d{12}):root")
_KINDS = ("AWS", "CanonicalUser", "Service", "Federated")


def user_arn(name: str, account_id: str = CLUSTER_ACCOUNT_ID) -> str:
    """The ARN naming a user of the cluster (as aws:PrincipalArn carries it)."""
    return f"arn:aws:iam::{account_id}:user/{name}"


@dataclass(frozen=True, slots=True)
class Principals:
    """Who a Principal (or NotPrincipal) element names."""

    everyone: bool = False  # "*": every request, anonymous included
    account: bool = False  # every user of the cluster
    users: frozenset[str] = frozenset()
    others: frozenset[str] = frozenset()  # Service / Federated names: never a requester here

    def includes(self, user: str | None) -> bool:
        """Whether the element names this requester (None: anonymous)."""
        if self.everyone:
            return True
        if user is None:
            return False
        return self.account or user in self.users


def _aws_principal(value: str, account_id: str) -> Principals:
    if value == "*":
        return Principals(everyone=True)
    if _ACCOUNT_ID.fullmatch(value):
        account = value
    elif found := _ROOT_ARN.fullmatch(value):
        account = found.group(1)
    elif found := _USER_ARN.fullmatch(value):
        if found.group(1) != account_id:
            raise MalformedPolicy(INVALID_PRINCIPAL)
        return Principals(users=frozenset({found.group(2)}))
    elif _USER_NAME.fullmatch(value):
        return Principals(users=frozenset({value}))
    else:
        raise MalformedPolicy(INVALID_PRINCIPAL)
    if account != account_id:
        raise MalformedPolicy(INVALID_PRINCIPAL)
    return Principals(account=True)


def _one(kind: str, value: object, account_id: str) -> Principals:
    if not isinstance(value, str) or not value:
        raise MalformedPolicy(INVALID_PRINCIPAL)
    if kind == "AWS":
        return _aws_principal(value, account_id)
    if kind == "CanonicalUser":
        if not _USER_NAME.fullmatch(value):
            raise MalformedPolicy(INVALID_PRINCIPAL)
        return Principals(users=frozenset({value}))
    return Principals(others=frozenset({f"{kind}:{value}"}))


def _union(parts: list[Principals]) -> Principals:
    return Principals(
        everyone=any(part.everyone for part in parts),
        account=any(part.account for part in parts),
        users=frozenset().union(*(part.users for part in parts)),
        others=frozenset().union(*(part.others for part in parts)),
    )


def parse_principal(raw: object, account_id: str = CLUSTER_ACCOUNT_ID) -> Principals:
    """A Principal or NotPrincipal element; MalformedPolicy if S3 would refuse it."""
    if raw == "*":
        return Principals(everyone=True)
    if not isinstance(raw, dict) or not raw:
        raise MalformedPolicy(INVALID_PRINCIPAL)
    parts: list[Principals] = []
    for kind, values in raw.items():
        if kind not in _KINDS:
            raise MalformedPolicy(INVALID_PRINCIPAL)
        items = values if isinstance(values, list) else [values]
        if not items:
            raise MalformedPolicy(INVALID_PRINCIPAL)
        parts.extend(_one(kind, value, account_id) for value in items)
    return _union(parts)
