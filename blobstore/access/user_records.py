"""The records of users, groups and identity policies, their limits and the pure
decisions on them (names, keys, rotation); `users.py` stores them in ZooKeeper.

Znode layout (every value JSON but policies, whose text is stored as given)::

    /access/users/<name>           {"format_version": 1, "name", "status": "enabled" |
                                    "disabled", "access_keys": [{"access_key",
                                    "sealed_secret", "created", "expires"?}],
                                    "policies": [names], "groups": [names], "created"}
    /access/groups/<name>          {"format_version": 1, "name", "policies": [names], "created"}
    /access/policies/<name>        an identity policy document (S3's policy language)
    /access/keys/<access_key>      the user name: one znode per access key, so a key
                                   belongs to one user at most

Secret keys are sealed under the cluster key (`sealing.py`); no plain secret is ever
written here. The built-in policies (`readwrite`, `readonly`, `writeonly`, `admin`, as
MinIO's canned policies) have no znode: they cannot be changed or removed.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

from blobstore.access.policy import parse_identity_policy
from blobstore.access.policy_errors import MalformedPolicy

ROOT_PATH = "/access"
USERS_PATH = f"{ROOT_PATH}/users"
GROUPS_PATH = f"{ROOT_PATH}/groups"
POLICIES_PATH = f"{ROOT_PATH}/policies"
KEYS_PATH = f"{ROOT_PATH}/keys"

FORMAT_VERSION = 1
ENABLED = "enabled"
DISABLED = "disabled"

# Every gateway worker holds all of these in memory (directory.py): bounded.
USERS_MAX = 10_000
GROUPS_MAX = 1_000
POLICIES_MAX = 1_000
ACCESS_KEYS_PER_USER_MAX = 2  # the current key and one in its grace period, as AWS
POLICIES_PER_ENTITY_MAX = 20
GROUPS_PER_USER_MAX = 10
POLICY_BYTES_MAX = 20 * 1024
RECORD_BYTES_MAX = 64 * 1024
GRACE_S_MAX = 30 * 24 * 3600.0

ACCESS_KEY_PREFIX = "BS"
ACCESS_KEY_GENERATED_CHARS = 18
SECRET_KEY_CHARS = 40

assert ACCESS_KEYS_PER_USER_MAX >= 2, "rotation with a grace period keeps two keys"
assert POLICY_BYTES_MAX * 2 <= RECORD_BYTES_MAX, "a policy fits a znode with room to spare"

NAME_PATTERN = re.compile(r"[A-Za-z0-9+=,.@_-]{1,64}")  # as IAM user names
ACCESS_KEY_PATTERN = re.compile(r"[A-Za-z0-9+=,.@_-]{3,128}")
SECRET_KEY_PATTERN = re.compile(r"[\x21-\x7e]{8,128}")  # printable ASCII, no space


BUILTIN_POLICIES: dict[str, dict[str, Any]] = {
    "readwrite": {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]}],
    },
    "readonly": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation", "s3:GetObject"],
                "Resource": ["arn:aws:s3:::*"],
            }
        ],
    },
    "writeonly": {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": ["arn:aws:s3:::*"]}
        ],
    },
    # Everything: every S3 action on every bucket, and the cluster's administration.
    "admin": {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:*", "admin:*"], "Resource": ["arn:aws:s3:::*"]}
        ],
    },
}
ADMIN_POLICY = "admin"


# ---------------------------------------------------------------------- errors


class AccessError(Exception):
    """Base of the errors of user, group and policy management (a user's mistake or a
    conflict with the stored state; the admin command prints it as one line)."""


class InvalidNameError(AccessError):
    pass


class UserExistsError(AccessError):
    pass


class NoSuchUserError(AccessError):
    pass


class GroupExistsError(AccessError):
    pass


class NoSuchGroupError(AccessError):
    pass


class NoSuchPolicyError(AccessError):
    pass


class AccessKeyInUseError(AccessError):
    pass


class MalformedPolicyError(AccessError):
    pass


class EntityInUseError(AccessError):
    """A group with members or a policy still attached: not removed."""


class LimitExceededError(AccessError):
    pass


class AccessBusyError(AccessError):
    """The records kept changing: CAS_ATTEMPTS_MAX compare-and-sets failed."""


# ---------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class AccessKey:
    access_key: str
    sealed_secret: str = field(repr=False)
    created: float
    expires: float | None = None  # set on the previous key by a rotation with a grace

    def live(self, now: float) -> bool:
        return self.expires is None or now < self.expires

    def to_dict(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "access_key": self.access_key,
            "sealed_secret": self.sealed_secret,
            "created": self.created,
        }
        if self.expires is not None:
            value["expires"] = self.expires
        return value


@dataclass(frozen=True, slots=True)
class UserRecord:
    name: str
    status: str
    access_keys: tuple[AccessKey, ...]
    policies: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    created: float = 0.0

    def __post_init__(self) -> None:
        assert self.status in (ENABLED, DISABLED), self.status
        assert len(self.access_keys) <= ACCESS_KEYS_PER_USER_MAX, len(self.access_keys)
        assert len(set(self.policies)) == len(self.policies), self.policies
        assert len(set(self.groups)) == len(self.groups), self.groups

    @property
    def enabled(self) -> bool:
        return self.status == ENABLED

    def encode(self) -> bytes:
        value = {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "status": self.status,
            "access_keys": [k.to_dict() for k in self.access_keys],
            "policies": list(self.policies),
            "groups": list(self.groups),
            "created": self.created,
        }
        return json.dumps(value, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        """ValueError when it is not a user record of a known format."""
        value = _decoded_object(raw)
        keys = value.get("access_keys")
        if not isinstance(keys, list):
            raise ValueError("access_keys is not a list")
        try:
            return cls(
                name=str(value["name"]),
                status=str(value["status"]),
                access_keys=tuple(
                    AccessKey(
                        str(k["access_key"]),
                        str(k["sealed_secret"]),
                        float(k["created"]),
                        None if k.get("expires") is None else float(k["expires"]),
                    )
                    for k in keys
                ),
                policies=_names(value.get("policies", [])),
                groups=_names(value.get("groups", [])),
                created=float(value.get("created", 0.0)),
            )
        except (KeyError, TypeError, AssertionError, AttributeError) as e:
            raise ValueError(f"not a user record: {e!r}") from None


@dataclass(frozen=True, slots=True)
class GroupRecord:
    name: str
    policies: tuple[str, ...] = ()
    created: float = 0.0

    def encode(self) -> bytes:
        value = {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "policies": list(self.policies),
            "created": self.created,
        }
        return json.dumps(value, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        value = _decoded_object(raw)
        try:
            return cls(
                name=str(value["name"]),
                policies=_names(value.get("policies", [])),
                created=float(value.get("created", 0.0)),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a group record: {e!r}") from None


def _decoded_object(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    if value.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"unknown format_version {value.get('format_version')!r}")
    return value


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of names")
    return tuple(value)


# ---------------------------------------------------------------------- decisions


def check_name(kind: str, name: str) -> str:
    """A user, group or policy name as IAM allows them (letters, digits, `+=,.@_-`, up
    to 64); they are znode names, so nothing else gets through."""
    if not NAME_PATTERN.fullmatch(name) or name in (".", ".."):
        raise InvalidNameError(
            f"{kind} name {name!r}: use 1 to 64 letters, digits or any of + = , . @ _ -"
        )
    return name


def check_access_key(access_key: str) -> str:
    if not ACCESS_KEY_PATTERN.fullmatch(access_key) or access_key in (".", ".."):
        raise InvalidNameError(
            f"access key {access_key!r}: use 3 to 128 letters, digits or any of + = , . @ _ -"
        )
    return access_key


def check_secret_key(secret_key: str) -> str:
    if not SECRET_KEY_PATTERN.fullmatch(secret_key):
        # The secret itself is not repeated: it may land in a terminal's scrollback.
        raise InvalidNameError("secret key: use 8 to 128 printable ASCII characters, no spaces")
    return secret_key


def new_access_key() -> str:
    alphabet = string.ascii_uppercase + string.digits
    return ACCESS_KEY_PREFIX + "".join(
        secrets.choice(alphabet) for _ in range(ACCESS_KEY_GENERATED_CHARS)
    )


def new_secret_key() -> str:
    secret = secrets.token_urlsafe(SECRET_KEY_CHARS * 3 // 4)
    assert len(secret) == SECRET_KEY_CHARS, len(secret)
    return secret


def check_policy_document(name: str, text: str) -> dict[str, Any]:
    """The document parsed: a JSON object with a Statement (one object or a list of
    them), within the size limit, and an identity policy in S3's policy language
    (`blobstore.access.policy`: S3's message when it is not)."""
    if len(text.encode()) > POLICY_BYTES_MAX:
        raise MalformedPolicyError(
            f"policy {name}: {len(text.encode())} bytes; at most {POLICY_BYTES_MAX}"
        )
    try:
        document = json.loads(text)
    except ValueError as e:
        raise MalformedPolicyError(f"policy {name}: not JSON ({e})") from None
    if not isinstance(document, dict):
        raise MalformedPolicyError(f"policy {name}: not a JSON object")
    statements = document.get("Statement")
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list) or not statements:
        raise MalformedPolicyError(f"policy {name}: needs a Statement list")
    if not all(isinstance(s, dict) for s in statements):
        raise MalformedPolicyError(f"policy {name}: every statement is a JSON object")
    try:
        parse_identity_policy(text)
    except MalformedPolicy as e:
        raise MalformedPolicyError(f"policy {name}: {e}") from None
    return document


def rotated_keys(
    keys: Sequence[AccessKey], new_key: AccessKey, now: float, grace_s: float
) -> tuple[tuple[AccessKey, ...], tuple[AccessKey, ...]]:
    """(the keys after a rotation, the keys it drops). Without a grace every old key
    goes; with one the newest live key stays until `now + grace_s` (never longer than
    it was to live anyway), and every other goes."""
    assert grace_s >= 0, grace_s
    live = [k for k in keys if k.live(now)]
    kept: list[AccessKey] = []
    if grace_s > 0 and live:
        current = max(live, key=lambda k: k.created)
        expires = now + grace_s
        if current.expires is not None:
            expires = min(expires, current.expires)
        kept.append(replace(current, expires=expires))
    kept_names = {k.access_key for k in kept}
    dropped = tuple(k for k in keys if k.access_key not in kept_names)
    return (*kept, new_key), dropped


def pruned_keys(
    keys: Sequence[AccessKey], now: float
) -> tuple[tuple[AccessKey, ...], tuple[AccessKey, ...]]:
    """(live keys, expired keys): a change of a user drops its expired keys."""
    return tuple(k for k in keys if k.live(now)), tuple(k for k in keys if not k.live(now))


def with_names(
    current: Sequence[str], added: Iterable[str] = (), removed: Iterable[str] = ()
) -> tuple[str, ...]:
    """`current` with `added` appended (once each) and `removed` taken out, order kept."""
    gone = set(removed)
    result = [n for n in current if n not in gone]
    for name in added:
        if name not in result and name not in gone:
            result.append(name)
    return tuple(result)
