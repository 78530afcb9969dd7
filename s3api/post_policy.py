"""The policy document of a browser-form upload (POST Object): parse it, check a form
against it.

A signed form carries `policy`, the base64 of a JSON document such as::

    {"expiration": "2030-01-01T12:00:00.000Z",
     "conditions": [{"bucket": "photos"},
                    ["starts-with", "$key", "user/eric/"],
                    ["eq", "$acl", "private"],
                    ["content-length-range", 1, 10485760]]}

The signature covers the base64 text (s3api/sigv4.py `authenticate_form`); this module
decides, as S3 does, whether the form it came with may be stored:

- `expiration` has passed: AccessDenied "Invalid according to Policy: Policy expired.";
- a condition does not hold: AccessDenied "... Policy Condition failed: [...]". An exact
  match (`{"field": "value"}` or `["eq", "$field", "value"]`) compares the whole value,
  `starts-with` its beginning (for Content-Type, each of its comma-separated values); a
  field the form lacks fails its condition;
- the form has a field no condition names (but for the signature fields, `file`,
  `policy` and `x-ignore-*`): AccessDenied "... Extra input fields: name";
- `content-length-range` bounds the file's size (EntityTooLarge / EntityTooSmall).

Field names and operators are taken case-insensitively (lowercased), values as written;
the keys `expiration` and `conditions` are case-sensitive. A document that does not
follow this grammar is InvalidPolicyDocument. Pure: no I/O, the time is a parameter.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from s3api.errors import S3Error

__all__ = [
    "EXACT",
    "STARTS_WITH",
    "Condition",
    "PostPolicy",
    "UNCONDITIONED_FIELDS",
    "check_form",
    "check_size",
    "parse_policy",
]

EXACT = "eq"
STARTS_WITH = "starts-with"
LENGTH_RANGE = "content-length-range"
# Form fields no condition needs to name: the signature itself, the file, the policy and
# the fields S3 leaves to the page (x-ignore-*).
UNCONDITIONED_FIELDS = frozenset(
    {"policy", "file", "signature", "awsaccesskeyid", "x-amz-signature"}
)
IGNORED_FIELD_PREFIX = "x-ignore-"
_EXPIRATION = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?Z\Z")


@dataclass(frozen=True, slots=True)
class Condition:
    """One field condition: `field` (lowercase, without "$") must equal `value` (EXACT)
    or begin with it (STARTS_WITH)."""

    operator: str
    field: str
    value: str

    def text(self) -> str:
        """The condition as S3 quotes it in an error message."""
        return json.dumps([self.operator, "$" + self.field, self.value])

    def holds(self, fields: Mapping[str, str]) -> bool:
        value = fields.get(self.field)
        if value is None:  # absent: only `starts-with ""` (any value) lets it be
            return self.operator == STARTS_WITH and not self.value
        if self.operator == EXACT:
            return value == self.value
        if self.field == "content-type":
            return all(v.strip().startswith(self.value) for v in value.split(","))
        return value.startswith(self.value)


@dataclass(frozen=True, slots=True)
class PostPolicy:
    expiration_s: float  # seconds since the epoch
    conditions: tuple[Condition, ...]
    size_min: int = 0
    size_max: int | None = None  # None: no content-length-range


def _invalid(detail: str) -> S3Error:
    return S3Error("InvalidPolicyDocument", f"Invalid Policy: {detail}")


def _denied(detail: str) -> S3Error:
    return S3Error("AccessDenied", f"Invalid according to Policy: {detail}")


def parse_policy(encoded: str) -> PostPolicy:
    """The policy of a form's `policy` field (base64 JSON) -> InvalidPolicyDocument."""
    try:
        text = base64.b64decode(encoded.strip(), validate=True)
        document = json.loads(text)
    except (binascii.Error, ValueError):
        raise _invalid("Invalid JSON.") from None
    if not isinstance(document, dict):
        raise _invalid("Invalid JSON.")
    if "expiration" not in document:
        raise _invalid("Policy missing expiration.")
    if "conditions" not in document:
        raise _invalid("Policy missing conditions.")
    unexpected = sorted(set(document) - {"expiration", "conditions"})
    if unexpected:
        raise _invalid(f"Unexpected field: '{unexpected[0]}'")
    expiration_s = _parse_expiration(document["expiration"])
    raw_conditions = document["conditions"]
    if not isinstance(raw_conditions, list):
        raise _invalid("Invalid 'conditions' value: must be a list.")
    conditions: list[Condition] = []
    size_min, size_max = 0, None
    for raw in raw_conditions:
        if isinstance(raw, list) and raw and str(raw[0]).lower() == LENGTH_RANGE:
            low, high = _parse_length_range(raw)
            size_min = max(size_min, low)
            size_max = high if size_max is None else min(size_max, high)
        else:
            conditions.append(_parse_condition(raw))
    return PostPolicy(expiration_s, tuple(conditions), size_min, size_max)


def _parse_expiration(value: Any) -> float:
    """ISO 8601 in UTC with a 'Z', as S3 takes it: 2030-01-01T12:00:00.000Z."""
    match = _EXPIRATION.match(value) if isinstance(value, str) else None
    if match is None:
        raise _invalid(f"Invalid 'expiration' value: '{value}'")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 60):
        raise _invalid(f"Invalid 'expiration' value: '{value}'")
    fraction = float(match.group(7)) if match.group(7) else 0.0
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) + fraction


def _parse_length_range(raw: list[Any]) -> tuple[int, int]:
    if len(raw) != 3:
        raise _invalid(
            "Invalid 'content-length-range' condition: it takes a minimum and a maximum."
        )
    low, high = (_length(bound) for bound in raw[1:])
    if low is None or high is None or low > high:
        raise _invalid(f"Invalid 'content-length-range' condition: {json.dumps(raw)}")
    return low, high


def _length(value: Any) -> int | None:
    """A content-length-range bound: a non-negative integer (or a string of digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _parse_condition(raw: Any) -> Condition:
    if isinstance(raw, dict):
        if len(raw) != 1:
            raise _invalid(
                "Invalid Simple-Condition: Simple-Conditions must have exactly one property "
                "specified."
            )
        ((name, value),) = raw.items()
        if not isinstance(value, str):
            raise _invalid(f"Invalid Simple-Condition: value of '{name}' must be a string.")
        return Condition(EXACT, name.lower(), value)
    if not isinstance(raw, list) or len(raw) != 3:
        raise _invalid(f"Invalid Condition: {json.dumps(raw)}")
    operator, name, value = raw
    operator = operator.lower() if isinstance(operator, str) else operator
    if operator not in (EXACT, STARTS_WITH):
        raise _invalid(f"Invalid Condition: unknown operation {json.dumps(raw[0])}.")
    if not isinstance(name, str) or not name.startswith("$") or len(name) < 2:
        raise _invalid(f"Invalid Condition: the field must be a '$' followed by a name: {name}")
    if not isinstance(value, str):
        raise _invalid(f"Invalid Condition: the value of {name} must be a string.")
    return Condition(operator, name[1:].lower(), value)


def check_form(policy: PostPolicy, fields: Mapping[str, str], now_s: float) -> None:
    """AccessDenied unless the form may be stored under `policy` at `now_s`. `fields`:
    the form's fields by lowercase name, with `bucket` (the bucket written to) and `key`
    as it will be stored (${filename} replaced)."""
    if now_s >= policy.expiration_s:
        raise _denied("Policy expired.")
    for condition in policy.conditions:
        if not condition.holds(fields):
            raise _denied(f"Policy Condition failed: {condition.text()}")
    named = {condition.field for condition in policy.conditions}
    extra = [
        name
        for name in fields
        if name not in named
        and name not in UNCONDITIONED_FIELDS
        and not name.startswith(IGNORED_FIELD_PREFIX)
    ]
    if extra:
        raise _denied(f"Extra input fields: {', '.join(sorted(extra))}")


def check_size(policy: PostPolicy, size: int, *, complete: bool) -> None:
    """The file's size against content-length-range: while it streams (`complete`
    False, only the maximum) and once it is whole (both bounds)."""
    if policy.size_max is not None and size > policy.size_max:
        raise S3Error("EntityTooLarge", ProposedSize=size, MaxSizeAllowed=policy.size_max)
    if complete and size < policy.size_min:
        raise S3Error("EntityTooSmall", ProposedSize=size, MinSizeAllowed=policy.size_min)
