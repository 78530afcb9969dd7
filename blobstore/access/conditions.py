"""The Condition element of a policy statement: its operators, parsed and evaluated.

A block `{"Operator": {"key": value-or-list, ...}, ...}` holds when every operator's
every key holds; a key holds when the request's value matches any of the listed values.

Operators (each also as `...IfExists`: true when the request lacks the key):

| family | operators | values |
|---|---|---|
| string | StringEquals, StringNotEquals, StringEqualsIgnoreCase, StringNotEqualsIgnoreCase, StringLike, StringNotLike | text; `*`/`?` in the Like forms; policy variables |
| numeric | NumericEquals, NumericNotEquals, NumericLessThan, NumericLessThanEquals, NumericGreaterThan, NumericGreaterThanEquals | numbers |
| date | DateEquals, DateNotEquals, DateLessThan, DateLessThanEquals, DateGreaterThan, DateGreaterThanEquals | ISO 8601 or epoch seconds |
| boolean | Bool | true / false |
| IP | IpAddress, NotIpAddress | IPv4 or IPv6 CIDR (or one address) |
| ARN | ArnEquals, ArnLike, ArnNotEquals, ArnNotLike | ARNs, wildcards per colon component (ArnEquals as ArnLike, as IAM) |
| binary | BinaryEquals | base64 text |
| existence | Null | true (the key is absent) / false (present) |

Set qualifiers, for keys with several values (tags, ...): `ForAnyValue:` holds when at
least one of the request's values matches (never for an absent key), `ForAllValues:`
when every one does (always for an absent key). Without one, a positive operator
holds when any value matches; a negated one (`...Not...`) when no value matches the
positive form, so it holds for an absent key, as in IAM.

An unknown operator, or a value its operator cannot read, makes the policy malformed.
An unknown key is no error: the request lacks it (AWS keeps adding keys, and refusing
one would refuse a valid policy). Keys compare without regard to case (the part after a
`/`, a tag key, with regard to it); values with regard to it unless the operator says.

`ConditionContext` is the request's side: normalized key -> its values, built by
`blobstore.access.policy_context.condition_context`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from blobstore.access.policy_errors import (
    INVALID_CONDITION_VALUE,
    INVALID_SYNTAX,
    MalformedPolicy,
    invalid_condition_type,
)
from blobstore.access.policy_match import Variables, matches

ConditionContext = Mapping[str, tuple[str, ...]]
Compare = Callable[[str, str, Variables | None], bool | None]

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")
_EPOCH = re.compile(r"\d+(\.\d+)?")


def normalize_key(key: str) -> str:
    """A condition key as contexts store it: the name in lower case, a `/<tag key>` kept."""
    name, slash, rest = key.partition("/")
    return name.lower() + slash + rest


def _number(text: str) -> float | None:
    return float(text) if _NUMBER.fullmatch(text.strip()) else None


def _epoch_s(text: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 date (UTC when it names no zone) or of a
    number of seconds."""
    text = text.strip()
    if _EPOCH.fullmatch(text):
        return float(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None


def _ordered(parse: Callable[[str], float | None], test: Callable[[float, float], bool]) -> Compare:
    def compare(actual: str, expected: str, variables: Variables | None) -> bool | None:
        left, right = parse(actual), parse(expected)
        if left is None or right is None:
            return None
        return test(left, right)

    return compare


def _string(ignore_case: bool, wildcards: bool) -> Compare:
    def compare(actual: str, expected: str, variables: Variables | None) -> bool:
        return matches(
            expected, actual, variables=variables, ignore_case=ignore_case, wildcards=wildcards
        )

    return compare


def _ip(actual: str, expected: str, variables: Variables | None) -> bool | None:
    network = _network(expected)
    try:
        address = ipaddress.ip_address(actual.strip())
    except ValueError:
        return None
    return network is not None and address.version == network.version and address in network


def _arn(actual: str, expected: str, variables: Variables | None) -> bool:
    actual_parts = actual.split(":", 5)
    expected_parts = expected.split(":", 5)
    if len(actual_parts) != 6 or len(expected_parts) != 6:
        return False
    return all(
        matches(pattern, part, variables=variables)
        for pattern, part in zip(expected_parts, actual_parts, strict=True)
    )


def _bool(actual: str, expected: str, variables: Variables | None) -> bool:
    return actual.lower() == expected.lower()


def _binary(actual: str, expected: str, variables: Variables | None) -> bool:
    return actual == expected


def _any_text(value: str) -> bool:
    return True


def _is_bool(value: str) -> bool:
    return value.lower() in ("true", "false")


@dataclass(frozen=True, slots=True)
class _Operator:
    compare: Compare
    negated: bool
    valid: Callable[[str], bool]  # whether a policy value is one the operator can read


def _family(
    compare: Compare, valid: Callable[[str], bool], positive: str, negative: str
) -> dict[str, _Operator]:
    return {
        positive: _Operator(compare, False, valid),
        negative: _Operator(compare, True, valid),
    }


def _readable(parse: Callable[[str], float | None]) -> Callable[[str], bool]:
    def valid(value: str) -> bool:
        return parse(value) is not None

    return valid


def _numeric_and_date() -> dict[str, _Operator]:
    tests: dict[str, Callable[[float, float], bool]] = {
        "LessThan": lambda a, b: a < b,
        "LessThanEquals": lambda a, b: a <= b,
        "GreaterThan": lambda a, b: a > b,
        "GreaterThanEquals": lambda a, b: a >= b,
    }
    table: dict[str, _Operator] = {}
    for family, parse in (("Numeric", _number), ("Date", _epoch_s)):
        valid = _readable(parse)
        equal = _ordered(parse, lambda a, b: a == b)
        table |= _family(equal, valid, f"{family}Equals", f"{family}NotEquals")
        for suffix, test in tests.items():
            table[family + suffix] = _Operator(_ordered(parse, test), False, valid)
    return table


OPERATORS: dict[str, _Operator] = {
    **_family(_string(False, False), _any_text, "StringEquals", "StringNotEquals"),
    **_family(
        _string(True, False), _any_text, "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"
    ),
    **_family(_string(False, True), _any_text, "StringLike", "StringNotLike"),
    **_numeric_and_date(),
    "Bool": _Operator(_bool, False, _is_bool),
    **_family(_ip, lambda value: _network(value) is not None, "IpAddress", "NotIpAddress"),
    **_family(_arn, _any_text, "ArnEquals", "ArnNotEquals"),
    **_family(_arn, _any_text, "ArnLike", "ArnNotLike"),
    "BinaryEquals": _Operator(_binary, False, _any_text),
}
NULL = "Null"
QUALIFIERS = ("ForAnyValue", "ForAllValues")
IF_EXISTS = "IfExists"


@dataclass(frozen=True, slots=True)
class Condition:
    """One key of one operator of a Condition block: `operator` as written
    (`ForAnyValue:StringLikeIfExists`), `base` without qualifier and suffix
    (`StringLike`), `key` normalized, `values` as text."""

    operator: str
    base: str
    qualifier: str  # "", "ForAnyValue" or "ForAllValues"
    if_exists: bool
    key: str
    values: tuple[str, ...]

    def holds(self, context: ConditionContext, variables: Variables | None) -> bool:
        """Whether the request (its `context`; `variables` None in 2008-10-17 documents)
        satisfies this condition."""
        actual = context.get(self.key, ())
        if self.base == NULL:
            return any((not actual) == (value.lower() == "true") for value in self.values)
        if not actual:
            return self._holds_when_absent
        tests = (self._value_holds(value, variables) for value in actual)
        if self.qualifier == "ForAnyValue":
            return any(tests)
        if self.qualifier == "ForAllValues" or self._negated:
            return all(tests)
        return any(tests)

    @property
    def _negated(self) -> bool:
        return OPERATORS[self.base].negated

    @property
    def _holds_when_absent(self) -> bool:
        if self.if_exists or self.qualifier == "ForAllValues":
            return True
        if self.qualifier == "ForAnyValue":
            return False
        return self._negated

    def _value_holds(self, actual: str, variables: Variables | None) -> bool:
        """Whether one of the request's values satisfies the operator. A value the
        operator cannot read (a number that is not one) satisfies neither form."""
        operator = OPERATORS[self.base]
        results = [operator.compare(actual, expected, variables) for expected in self.values]
        if None in results:
            return False
        return any(results) != operator.negated


def _split_operator(operator: str) -> tuple[str, str, bool]:
    """(qualifier, base, if_exists) of an operator name; MalformedPolicy if unknown."""
    qualifier, colon, rest = operator.partition(":")
    if not colon:
        qualifier, rest = "", operator
    elif qualifier not in QUALIFIERS:
        raise invalid_condition_type(operator)
    if_exists = rest.endswith(IF_EXISTS) and rest != IF_EXISTS
    base = rest[: -len(IF_EXISTS)] if if_exists else rest
    if base == NULL and not qualifier and not if_exists:
        return qualifier, base, if_exists
    if base not in OPERATORS:
        raise invalid_condition_type(operator)
    return qualifier, base, if_exists


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value
    raise MalformedPolicy(INVALID_SYNTAX)


def _values(raw: object) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise MalformedPolicy(INVALID_SYNTAX)
    return tuple(_value_text(item) for item in items)


def _parse_operator(operator: str, keys: object) -> list[Condition]:
    qualifier, base, if_exists = _split_operator(operator)
    if not isinstance(keys, dict) or not keys:
        raise MalformedPolicy(INVALID_SYNTAX)
    valid = _is_bool if base == NULL else OPERATORS[base].valid
    conditions = []
    for key, raw in keys.items():
        values = _values(raw)
        if not key or not all(valid(value) for value in values):
            raise MalformedPolicy(INVALID_CONDITION_VALUE)
        conditions.append(
            Condition(operator, base, qualifier, if_exists, normalize_key(key), values)
        )
    return conditions


def parse_conditions(block: object) -> tuple[Condition, ...]:
    """A statement's Condition element, parsed; MalformedPolicy if S3 would refuse it."""
    if not isinstance(block, dict):
        raise MalformedPolicy(INVALID_SYNTAX)
    return tuple(
        condition
        for operator, keys in block.items()
        for condition in _parse_operator(operator, keys)
    )


def all_hold(
    conditions: tuple[Condition, ...], context: ConditionContext, variables: Variables | None
) -> bool:
    """Whether a statement's whole Condition block holds for the request."""
    return all(condition.holds(context, variables) for condition in conditions)
