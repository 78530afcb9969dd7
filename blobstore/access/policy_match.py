"""Wildcards and policy variables, as IAM matches actions, resources and string conditions.

- `*` stands for any run of characters (`/` and `:` included, possibly none), `?` for
  exactly one. Everything else stands for itself.
- A policy variable `${key}` (`${aws:username}`, `${s3:prefix}`, ...) is replaced by the
  request's value of that key, which then stands for itself: a `*` in a value is no
  wildcard. `${*}`, `${?}` and `${$}` stand for the characters `*`, `?` and `$`.
  `${key, 'default'}` gives the value to use when the request lacks the key.
- A variable whose key the request lacks (with no default), or for which it has several
  values, makes the pattern match nothing, as in IAM.

Only documents of Version 2012-10-17 have variables: callers pass `variables=None` for
older ones, whose `${...}` are plain text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

# A request's value of a condition key, by key ("" -> absent or several values).
Variables = Callable[[str], str | None]

_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_ESCAPES = {"*": "*", "?": "?", "$": "$"}
# A piece of an expanded pattern: its text, and whether it stands for itself (True) or
# may hold wildcards (False).
Piece = tuple[str, bool]


def _wildcard_source(text: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)


@functools.lru_cache(maxsize=8192)
def _compiled(source: str, ignore_case: bool) -> re.Pattern[str]:
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.compile(source, flags)


def _variable_value(body: str, variables: Variables) -> str | None:
    name, comma, default = body.partition(",")
    name = name.strip()
    if name in _ESCAPES:
        return _ESCAPES[name]
    value = variables(name)
    if value is not None:
        return value
    default = default.strip()
    if comma and len(default) >= 2 and default[0] == default[-1] == "'":
        return default[1:-1]
    return None


def expand(pattern: str, variables: Variables | None) -> list[Piece] | None:
    """The pattern cut into pieces with its variables replaced; None when a variable has
    no value (the pattern then matches nothing)."""
    if variables is None or "${" not in pattern:
        return [(pattern, False)]
    pieces: list[Piece] = []
    position = 0
    for found in _VARIABLE.finditer(pattern):
        value = _variable_value(found.group(1), variables)
        if value is None:
            return None
        pieces.append((pattern[position : found.start()], False))
        pieces.append((value, True))
        position = found.end()
    pieces.append((pattern[position:], False))
    return pieces


def matches(
    pattern: str,
    value: str,
    *,
    variables: Variables | None = None,
    ignore_case: bool = False,
    wildcards: bool = True,
) -> bool:
    """Whether `value` is one the pattern stands for (`wildcards=False`: compare the text,
    variables replaced, as StringEquals does)."""
    pieces = expand(pattern, variables)
    if pieces is None:
        return False
    source = "".join(
        re.escape(text) if literal or not wildcards else _wildcard_source(text)
        for text, literal in pieces
    )
    return _compiled(source, ignore_case).fullmatch(value) is not None


def has_wildcard(pattern: str) -> bool:
    """Whether the pattern can stand for more than one value (wildcards or variables)."""
    return "*" in pattern or "?" in pattern or "${" in pattern
