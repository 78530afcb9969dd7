"""S3 lifecycle expiration as a pure decision: rules, one key's versions and the time in,
the deletions lifecycle makes now out. No catalog, no clock, no I/O: the maintenance job
reads the inputs and carries out the actions (each names the version it expects to find,
so the job executes it conditionally and a key changed since the read is left alone).

Rules come as the gateway stores them in `BucketRecord.lifecycle` (the dicts of
`parse_lifecycle_configuration`); `parse_rules` turns them into `Rule`s. Disabled rules
are parsed (so a malformed one is still reported) but never act.

How S3 counts, and the choices made where its documentation is silent:

- Days. An age of N days ends at the creation time plus N days, rounded up to the next
  midnight UTC (`expiry_moment`): created 2016-01-15 10:30 UTC with Days=1 expires at
  2016-01-17 00:00 UTC; created at 2016-01-15 00:00 exactly, at 2016-01-16 00:00. A Date
  (midnight UTC) expires every object the rule selects from that moment on, however new.
- Expiration (Days or Date) acts on the current version only, when it is not a delete
  marker. Never-versioned bucket: the version ("null") is deleted. Versioning Enabled: a
  delete marker is added, the version becomes noncurrent. Suspended: a null delete
  marker is added, which replaces any null version of the key (S3's plain DELETE).
- An expired object delete marker is a delete marker that is the key's only version.
  A rule with ExpiredObjectDeleteMarker=true removes it at once. A rule with Days or Date
  removes it too once the marker itself is old enough (its own creation plus Days, or the
  Date), as S3 does. A marker that this run's noncurrent expirations leave alone is
  removed by a later run, not this one.
- NoncurrentVersionExpiration. A version becomes noncurrent when its successor (the next
  newer version) is created, and expires NoncurrentDays after that moment. The
  NewerNoncurrentVersions newest noncurrent versions the rule selects are kept whatever
  their age; only those beyond that count expire. Counting the selected versions only
  (not every noncurrent version of the key) never keeps fewer. Noncurrent delete markers
  are noncurrent versions like any other.
- Filters. Prefix matches the key's start; Tag an exact key and value among the
  version's tags (a Tag without Value matches the key with an empty value);
  ObjectSizeGreaterThan and ObjectSizeLessThan are strict bounds; And is all of them.
  Each version is judged by its own tags and size. A delete marker has neither, so a
  filter with any tag or size condition never selects one (S3 documents no size for a
  marker; not matching deletes less). A filter with only a prefix selects markers.
- Several rules. Rules are tried in their stored order and the first that acts on a
  version wins: at most one action per version, and per version every rule's action is
  the same kind anyway (current: marker or delete; noncurrent or lone marker: delete).
- Transitions. Transition (Days or Date) moves the current version, and
  NoncurrentVersionTransition (NoncurrentDays, NewerNoncurrentVersions, counted as for
  expiration) a noncurrent one, to the rule's StorageClass: a cold tier's name or an S3
  class bound to one (docs/tiering.md). Only versions whose bytes are on the bookies
  move (a delete marker has none; a tiered version stays where it is). Expiration wins:
  a version expired, or made noncurrent by a marker, in this run is not moved. Of a
  rule's transitions due, the one due last (the coldest reached) names the class; per
  version the first rule in stored order with one due wins.
- Object Lock. A version locked at `now` (its retention's retain-until moment not
  reached, or its legal hold ON) is never removed: where an expiration would remove it
  (a noncurrent version, or the null version of a bucket never versioned) the action
  is SKIP_LOCKED instead, which changes nothing and is counted. Adding a delete marker
  on a locked current version is allowed (it removes nothing), and so is a transition
  (the bytes move, the version stays): a version skipped as locked may still move.
- Multipart uploads. AbortIncompleteMultipartUpload aborts an upload DaysAfterInitiation
  after it was initiated, when the rule's prefix selects its key. An upload has no final
  size yet, so size bounds are not judged; it has no tags either, so a filter with a tag
  condition never selects one (the gateway refuses such a rule already).
"""

from __future__ import annotations

import datetime
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DAY_S = 86_400
NULL_VERSION_ID = "null"
VERSIONING_STATES = ("", "Enabled", "Suspended")  # never enabled | enabled | suspended

_RULE_KEYS = frozenset(
    {
        "ID",
        "Prefix",
        "Filter",
        "Status",
        "Expiration",
        "Transition",
        "NoncurrentVersionExpiration",
        "NoncurrentVersionTransition",
        "AbortIncompleteMultipartUpload",
    }
)
_FILTER_KEYS = frozenset({"Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan", "And"})
_AND_KEYS = frozenset({"Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan"})
_TAG_KEYS = frozenset({"Key", "Value"})
_EXPIRATION_KEYS = frozenset({"Days", "Date", "ExpiredObjectDeleteMarker"})
_NONCURRENT_KEYS = frozenset({"NoncurrentDays", "NewerNoncurrentVersions"})
_ABORT_KEYS = frozenset({"DaysAfterInitiation"})
_TRANSITION_KEYS = frozenset({"Days", "Date", "StorageClass"})
_NONCURRENT_TRANSITION_KEYS = frozenset(
    {"NoncurrentDays", "NewerNoncurrentVersions", "StorageClass"}
)


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a key as lifecycle sees it (a delete marker has size 0, no tags)."""

    version_id: str
    last_modified: float  # epoch seconds
    size: int
    is_delete_marker: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    tiered: bool = False  # its bytes are on a cold tier already
    retain_until: float = 0.0  # Object Lock retention: locked before this moment
    legal_hold: bool = False  # Object Lock legal hold: locked while ON

    def __post_init__(self) -> None:
        assert self.version_id, "a version has an id (the null version's is 'null')"
        assert self.size >= 0, self.size

    def locked(self, now: float) -> bool:
        """Whether Object Lock keeps the version at `now` (blobstore.objects.lock)."""
        return self.legal_hold or self.retain_until > now


@dataclass(frozen=True, slots=True)
class Upload:
    """A multipart upload not completed yet."""

    upload_id: str
    key: str
    initiated: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class Filter:
    """Which versions a rule selects; the default selects everything."""

    prefix: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    size_greater_than: int | None = None  # strict: size > this
    size_less_than: int | None = None  # strict: size < this

    def matches_upload(self, upload: Upload) -> bool:
        """By prefix; size bounds wait for a size, and an upload has no tags to match."""
        return upload.key.startswith(self.prefix) and not self.tags

    def matches(self, key: str, version: Version) -> bool:
        if not key.startswith(self.prefix):
            return False
        if not self.tags and self.size_greater_than is None and self.size_less_than is None:
            return True
        if version.is_delete_marker:
            return False  # a marker has no tags and no size to judge
        if any(version.tags.get(tag_key) != value for tag_key, value in self.tags):
            return False
        if self.size_greater_than is not None and not version.size > self.size_greater_than:
            return False
        return self.size_less_than is None or version.size < self.size_less_than


@dataclass(frozen=True, slots=True)
class Transition:
    """Transition: Days or Date, to a storage class."""

    storage_class: str
    days: int | None = None
    date: float | None = None  # epoch seconds, a midnight UTC


@dataclass(frozen=True, slots=True)
class NoncurrentTransition:
    storage_class: str
    noncurrent_days: int
    newer_noncurrent_versions: int = 0


@dataclass(frozen=True, slots=True)
class Rule:
    """One stored lifecycle rule."""

    rule_id: str  # "" when the rule was stored without an ID
    enabled: bool
    filter: Filter = Filter()
    expiration_days: int | None = None
    expiration_date: float | None = None  # epoch seconds, a midnight UTC
    expired_object_delete_marker: bool = False
    noncurrent_days: int | None = None
    newer_noncurrent_versions: int = 0  # noncurrent versions kept whatever their age
    abort_days: int | None = None  # AbortIncompleteMultipartUpload DaysAfterInitiation
    transitions: tuple[Transition, ...] = ()
    noncurrent_transitions: tuple[NoncurrentTransition, ...] = ()

    def __post_init__(self) -> None:
        assert self.expiration_days is None or self.expiration_days >= 1, self.expiration_days
        assert self.expiration_days is None or self.expiration_date is None, self.rule_id
        assert self.noncurrent_days is None or self.noncurrent_days >= 1, self.noncurrent_days
        assert self.newer_noncurrent_versions >= 0, self.newer_noncurrent_versions
        assert self.abort_days is None or self.abort_days >= 1, self.abort_days


# --------------------------------------------------------------------------- outputs


class ActionKind(enum.StrEnum):
    DELETE_VERSION = "delete_version"  # remove the version for good
    ADD_DELETE_MARKER = "add_delete_marker"  # the catalog's plain DELETE of the key
    TRANSITION = "transition"  # move the version's bytes to a cold tier
    SKIP_LOCKED = "skip_locked"  # an expiration due on a version Object Lock keeps: none


@dataclass(frozen=True, slots=True)
class Action:
    """What lifecycle does to one version of a key now. `version_id` is the version the
    action expects: the one to remove, or the current one a marker is added on top of."""

    kind: ActionKind
    key: str
    version_id: str
    rule_id: str
    reason: str
    storage_class: str = ""  # a transition's target


@dataclass(frozen=True, slots=True)
class AbortUpload:
    """AbortIncompleteMultipartUpload of one upload."""

    key: str
    upload_id: str
    rule_id: str
    reason: str


# --------------------------------------------------------------------------- parsing


def parse_rules(stored: Sequence[Any] | None) -> list[Rule]:
    """`BucketRecord.lifecycle` -> rules in stored order; ValueError names the rule and
    what in it this module cannot apply (an unknown element, a bad value)."""
    if stored is None:
        return []
    if not isinstance(stored, Sequence) or isinstance(stored, str | bytes):
        raise ValueError(f"lifecycle rules are not a list: {stored!r}")
    rules = []
    for position, rule in enumerate(stored):
        try:
            rules.append(_parse_rule(rule))
        except ValueError as error:
            rule_id = rule.get("ID", "") if isinstance(rule, Mapping) else ""
            raise ValueError(f"lifecycle rule {position} (ID {rule_id!r}): {error}") from error
    return rules


def _parse_rule(stored: Any) -> Rule:
    rule = _mapping(stored, "rule")
    _check_keys(rule, _RULE_KEYS, "rule")
    status = rule.get("Status")
    if status not in ("Enabled", "Disabled"):
        raise ValueError(f"Status must be Enabled or Disabled, not {status!r}")
    days, date, marker = _parse_expiration(rule.get("Expiration"))
    noncurrent_days, newer = _parse_noncurrent(rule.get("NoncurrentVersionExpiration"))
    abort_days = _parse_abort(rule.get("AbortIncompleteMultipartUpload"))
    transitions = tuple(_parse_transition(t) for t in _listed(rule.get("Transition"), "Transition"))
    noncurrent_transitions = tuple(
        _parse_noncurrent_transition(t)
        for t in _listed(rule.get("NoncurrentVersionTransition"), "NoncurrentVersionTransition")
    )
    return Rule(
        rule_id=_text(rule.get("ID", ""), "ID"),
        enabled=status == "Enabled",
        filter=_parse_filter(rule),
        expiration_days=days,
        expiration_date=date,
        expired_object_delete_marker=marker,
        noncurrent_days=noncurrent_days,
        newer_noncurrent_versions=newer,
        abort_days=abort_days,
        transitions=transitions,
        noncurrent_transitions=noncurrent_transitions,
    )


def _listed(stored: Any, where: str) -> list[Any]:
    """A rule's Transition or NoncurrentVersionTransition: a list (one dict is one)."""
    if stored is None:
        return []
    if isinstance(stored, Mapping):
        return [stored]
    if not isinstance(stored, list):
        raise ValueError(f"{where} is not a list: {stored!r}")
    return stored


def _storage_class(value: Any, where: str) -> str:
    text = _text(value, f"{where}.StorageClass")
    if not text:
        raise ValueError(f"{where} has no StorageClass")
    return text


def _parse_transition(stored: Any) -> Transition:
    transition = _mapping(stored, "Transition")
    _check_keys(transition, _TRANSITION_KEYS, "Transition")
    days, date = transition.get("Days"), transition.get("Date")
    if (days is None) == (date is None):
        raise ValueError("Transition needs one of Days and Date")
    return Transition(
        _storage_class(transition.get("StorageClass"), "Transition"),
        None if days is None else _whole(days, 0, "Transition.Days"),
        None if date is None else _midnight_utc(date, "Transition.Date"),
    )


def _parse_noncurrent_transition(stored: Any) -> NoncurrentTransition:
    where = "NoncurrentVersionTransition"
    transition = _mapping(stored, where)
    _check_keys(transition, _NONCURRENT_TRANSITION_KEYS, where)
    if "NoncurrentDays" not in transition:
        raise ValueError(f"{where} has no NoncurrentDays")
    return NoncurrentTransition(
        _storage_class(transition.get("StorageClass"), where),
        _whole(transition["NoncurrentDays"], 0, f"{where}.NoncurrentDays"),
        _whole(transition.get("NewerNoncurrentVersions", 0), 0, f"{where}.NewerNoncurrentVersions"),
    )


def _parse_filter(rule: Mapping[str, Any]) -> Filter:
    """The rule's Filter, or the legacy top-level Prefix; neither selects everything."""
    if "Prefix" in rule:
        if "Filter" in rule:
            raise ValueError("both Prefix and Filter given")
        return Filter(prefix=_text(rule["Prefix"], "Prefix"))
    stored = _mapping(rule.get("Filter", {}), "Filter")
    _check_keys(stored, _FILTER_KEYS, "Filter")
    if len(stored) > 1:
        raise ValueError(f"Filter holds {sorted(stored)}: one element at most (And for more)")
    if "And" in stored:
        conditions = _mapping(stored["And"], "Filter.And")
        _check_keys(conditions, _AND_KEYS, "Filter.And")
        tags = conditions.get("Tag", [])
        if not isinstance(tags, list):
            raise ValueError(f"Filter.And.Tag is not a list: {tags!r}")
        return _conditions(conditions, tags, "Filter.And")
    return _conditions(stored, [stored["Tag"]] if "Tag" in stored else [], "Filter")


def _conditions(conditions: Mapping[str, Any], tags: list[Any], where: str) -> Filter:
    greater = conditions.get("ObjectSizeGreaterThan")
    less = conditions.get("ObjectSizeLessThan")
    return Filter(
        prefix=_text(conditions.get("Prefix", ""), f"{where}.Prefix"),
        tags=tuple(_tag(tag, f"{where}.Tag") for tag in tags),
        size_greater_than=None
        if greater is None
        else _whole(greater, 0, f"{where}.ObjectSizeGreaterThan"),
        size_less_than=None if less is None else _whole(less, 0, f"{where}.ObjectSizeLessThan"),
    )


def _tag(stored: Any, where: str) -> tuple[str, str]:
    tag = _mapping(stored, where)
    _check_keys(tag, _TAG_KEYS, where)
    if "Key" not in tag:
        raise ValueError(f"{where} has no Key")
    return _text(tag["Key"], f"{where}.Key"), _text(tag.get("Value", ""), f"{where}.Value")


def _parse_expiration(stored: Any) -> tuple[int | None, float | None, bool]:
    """Expiration -> (Days, Date as epoch seconds, ExpiredObjectDeleteMarker)."""
    if stored is None:
        return None, None, False
    expiration = _mapping(stored, "Expiration")
    _check_keys(expiration, _EXPIRATION_KEYS, "Expiration")
    if not expiration:
        raise ValueError("Expiration names none of Days, Date, ExpiredObjectDeleteMarker")
    days = expiration.get("Days")
    if days is not None:
        days = _whole(days, 1, "Expiration.Days")
    date = expiration.get("Date")
    if date is not None:
        date = _midnight_utc(date, "Expiration.Date")
    marker = expiration.get("ExpiredObjectDeleteMarker", False)
    if not isinstance(marker, bool):
        raise ValueError(f"Expiration.ExpiredObjectDeleteMarker is not a boolean: {marker!r}")
    if days is not None and date is not None:
        raise ValueError("Expiration has both Days and Date")
    if "ExpiredObjectDeleteMarker" in expiration and (days is not None or date is not None):
        raise ValueError("ExpiredObjectDeleteMarker cannot be specified with Days or Date")
    return days, date, marker


def _parse_noncurrent(stored: Any) -> tuple[int | None, int]:
    """NoncurrentVersionExpiration -> (NoncurrentDays, NewerNoncurrentVersions or 0)."""
    if stored is None:
        return None, 0
    noncurrent = _mapping(stored, "NoncurrentVersionExpiration")
    _check_keys(noncurrent, _NONCURRENT_KEYS, "NoncurrentVersionExpiration")
    if "NoncurrentDays" not in noncurrent:
        raise ValueError("NoncurrentVersionExpiration has no NoncurrentDays")
    days = _whole(noncurrent["NoncurrentDays"], 1, "NoncurrentDays")
    newer = _whole(noncurrent.get("NewerNoncurrentVersions", 0), 0, "NewerNoncurrentVersions")
    return days, newer


def _parse_abort(stored: Any) -> int | None:
    if stored is None:
        return None
    abort = _mapping(stored, "AbortIncompleteMultipartUpload")
    _check_keys(abort, _ABORT_KEYS, "AbortIncompleteMultipartUpload")
    if "DaysAfterInitiation" not in abort:
        raise ValueError("AbortIncompleteMultipartUpload has no DaysAfterInitiation")
    return _whole(abort["DaysAfterInitiation"], 1, "DaysAfterInitiation")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is not an object: {value!r}")
    return value


def _check_keys(value: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"{where} has unknown elements {unknown}")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} is not a string: {value!r}")
    return value


def _whole(value: Any, least: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{where} must be an integer >= {least}, not {value!r}")
    return value


def _midnight_utc(value: Any, where: str) -> float:
    """An ISO 8601 date at midnight UTC ("2026-01-01T00:00:00.000Z") -> epoch seconds.
    A date without an offset is UTC, as the gateway accepts it."""
    text = _text(value, where)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{where} is not an ISO 8601 date: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    if moment.utcoffset() != datetime.timedelta(0) or moment.time() != datetime.time(0):
        raise ValueError(f"{where} must be at midnight UTC: {text!r}")
    return moment.timestamp()


# --------------------------------------------------------------------------- time


def expiry_moment(created: float, days: int) -> float:
    """When an age of `days` days, counted from `created`, ends: `created` plus the days,
    rounded up to the next midnight UTC (S3's count; a midnight stays itself)."""
    assert days >= 1, days
    return math.ceil((created + days * DAY_S) / DAY_S) * DAY_S


def _iso(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- decisions


def key_actions(
    key: str, versions: Sequence[Version], rules: Sequence[Rule], versioning: str, now: float
) -> list[Action]:
    """What lifecycle does to `key` at `now`; `versions` are all of the key's versions,
    newest (the current one) first. Never removes the current version of a versioned
    bucket, unless it is a delete marker alone."""
    assert versioning in VERSIONING_STATES, versioning
    ids = [version.version_id for version in versions]
    assert len(set(ids)) == len(ids), f"version ids repeat: {ids}"
    if not versions:
        return []
    enabled = [rule for rule in rules if rule.enabled]
    current = _current_action(key, versions, enabled, versioning, now)
    expirations = ([current] if current else []) + _noncurrent_actions(key, versions, enabled, now)
    actions = [_unless_locked(action, versions, now) for action in expirations]
    acted = {action.version_id for action in actions if action.kind != ActionKind.SKIP_LOCKED}
    actions += _transition_actions(key, versions, enabled, now, acted)
    for action in actions:
        if action.kind is ActionKind.DELETE_VERSION and action.version_id == ids[0]:
            assert versioning == "" or (versions[0].is_delete_marker and len(versions) == 1), (
                f"would delete the current version of {key!r}: {action}"
            )
    changing = [action.version_id for action in actions if action.kind != ActionKind.SKIP_LOCKED]
    assert len(set(changing)) == len(changing), actions
    return actions


def _unless_locked(action: Action, versions: Sequence[Version], now: float) -> Action:
    """The action, or SKIP_LOCKED where it would remove a version Object Lock keeps."""
    if action.kind is not ActionKind.DELETE_VERSION:
        return action
    version = next(v for v in versions if v.version_id == action.version_id)
    if not version.locked(now):
        return action
    what = "legal hold ON" if version.legal_hold else f"retained until {_iso(version.retain_until)}"
    reason = f"{action.reason}; kept by Object Lock ({what})"
    return Action(ActionKind.SKIP_LOCKED, action.key, action.version_id, action.rule_id, reason)


def _expiration_moment(rule: Rule, version: Version) -> float | None:
    """When the rule's Expiration (Days or Date) expires this version, if it has one."""
    if rule.expiration_days is not None:
        return expiry_moment(version.last_modified, rule.expiration_days)
    return rule.expiration_date


def _expiration_terms(rule: Rule) -> str:
    if rule.expiration_days is not None:
        return f"Expiration Days={rule.expiration_days}"
    assert rule.expiration_date is not None, rule
    return f"Expiration Date={_iso(rule.expiration_date)}"


def _current_action(
    key: str, versions: Sequence[Version], rules: Sequence[Rule], versioning: str, now: float
) -> Action | None:
    """Expiration of the current version: a marker or a deletion, or the removal of a
    delete marker left alone."""
    current = versions[0]
    if current.is_delete_marker:
        return _lone_marker_action(key, current, rules, now) if len(versions) == 1 else None
    for rule in rules:
        moment = _expiration_moment(rule, current)
        if moment is None or now < moment or not rule.filter.matches(key, current):
            continue
        terms = f"{_expiration_terms(rule)}: current version expired at {_iso(moment)}"
        if versioning == "":
            return Action(ActionKind.DELETE_VERSION, key, current.version_id, rule.rule_id, terms)
        if versioning == "Enabled":
            reason = f"{terms}; a delete marker makes it noncurrent"
        else:
            reason = (
                f"{terms}; versioning suspended: a null delete marker replaces any null version"
            )
        return Action(ActionKind.ADD_DELETE_MARKER, key, current.version_id, rule.rule_id, reason)
    return None


def _lone_marker_action(
    key: str, marker: Version, rules: Sequence[Rule], now: float
) -> Action | None:
    """An expired object delete marker (the key's only version) is removed by
    ExpiredObjectDeleteMarker at once, or by Expiration Days/Date once old enough."""
    for rule in rules:
        if not rule.filter.matches(key, marker):
            continue
        if rule.expired_object_delete_marker:
            reason = "ExpiredObjectDeleteMarker: the delete marker is the key's only version"
            return Action(ActionKind.DELETE_VERSION, key, marker.version_id, rule.rule_id, reason)
        moment = _expiration_moment(rule, marker)
        if moment is not None and now >= moment:
            reason = (
                f"{_expiration_terms(rule)}: the delete marker is the key's only version,"
                f" expired at {_iso(moment)}"
            )
            return Action(ActionKind.DELETE_VERSION, key, marker.version_id, rule.rule_id, reason)
    return None


def _noncurrent_actions(
    key: str, versions: Sequence[Version], rules: Sequence[Rule], now: float
) -> list[Action]:
    """NoncurrentVersionExpiration, newest noncurrent version first; per version the
    first rule (in stored order) that expires it names the action."""
    due_by_rule = [
        (rule, _noncurrent_due(key, versions, rule, now))
        for rule in rules
        if rule.noncurrent_days is not None
    ]
    actions = []
    for index in range(1, len(versions)):
        for rule, due in due_by_rule:
            if index in due:
                version_id = versions[index].version_id
                actions.append(
                    Action(ActionKind.DELETE_VERSION, key, version_id, rule.rule_id, due[index])
                )
                break
    return actions


def _noncurrent_past(
    key: str,
    versions: Sequence[Version],
    rule_filter: Filter,
    newer_kept: int,
    days: int,
    now: float,
) -> dict[int, tuple[float, float]]:
    """Index -> (noncurrent since, moment) of each noncurrent version the filter selects
    that is past `days` of being noncurrent at `now`, the `newer_kept` newest selected
    ones aside (NoncurrentVersionExpiration and -Transition count alike)."""
    past = {}
    newer_selected = 0  # noncurrent versions newer than this one that the filter selects
    for index in range(1, len(versions)):
        if not rule_filter.matches(key, versions[index]):
            continue
        kept = newer_selected < newer_kept
        newer_selected += 1
        if kept:
            continue
        noncurrent_since = versions[index - 1].last_modified  # its successor's creation
        moment = transition_moment(noncurrent_since, days)
        if now >= moment:
            past[index] = (noncurrent_since, moment)
    return past


def _noncurrent_due(
    key: str, versions: Sequence[Version], rule: Rule, now: float
) -> dict[int, str]:
    """Index -> reason of each noncurrent version this rule expires at `now`."""
    assert rule.noncurrent_days is not None, rule
    past = _noncurrent_past(
        key, versions, rule.filter, rule.newer_noncurrent_versions, rule.noncurrent_days, now
    )
    due = {}
    for index, (noncurrent_since, moment) in past.items():
        what = "delete marker" if versions[index].is_delete_marker else "version"
        due[index] = (
            f"NoncurrentVersionExpiration NoncurrentDays={rule.noncurrent_days}: {what}"
            f" noncurrent since {_iso(noncurrent_since)}, expired at {_iso(moment)}"
            f" ({rule.newer_noncurrent_versions} newer noncurrent versions kept)"
        )
    return due


def _movable(version: Version) -> bool:
    """A version whose bytes are on the bookies (a transition may move them)."""
    return not version.is_delete_marker and not version.tiered


def _transition_actions(
    key: str, versions: Sequence[Version], rules: Sequence[Rule], now: float, acted: set[str]
) -> list[Action]:
    """Transitions due now, at most one per version, none for a version `acted` on."""
    actions = []
    current = versions[0]
    if current.version_id not in acted and _movable(current):
        for rule in rules:
            moved = _current_transition(key, current, rule, now)
            if moved is not None:
                actions.append(moved)
                break
    due_by_rule = [
        (rule, transition, _noncurrent_transition_due(key, versions, rule, transition, now))
        for rule in rules
        for transition in rule.noncurrent_transitions
    ]
    for index in range(1, len(versions)):
        version = versions[index]
        if version.version_id in acted or not _movable(version):
            continue
        for rule, transition, noncurrent_due in due_by_rule:
            if index in noncurrent_due:
                actions.append(
                    Action(
                        ActionKind.TRANSITION,
                        key,
                        version.version_id,
                        rule.rule_id,
                        noncurrent_due[index],
                        transition.storage_class,
                    )
                )
                break
    return actions


def transition_moment(created: float, days: int) -> float:
    """As `expiry_moment`, where 0 days is allowed (the next midnight UTC)."""
    assert days >= 0, days
    return math.ceil((created + days * DAY_S) / DAY_S) * DAY_S


def _current_transition(key: str, version: Version, rule: Rule, now: float) -> Action | None:
    """The rule's transition of the current version due last by `now`, if any."""
    if not rule.transitions or not rule.filter.matches(key, version):
        return None
    reached = []
    for transition in rule.transitions:
        if transition.days is not None:
            moment = transition_moment(version.last_modified, transition.days)
            terms = f"Transition Days={transition.days}"
        else:
            assert transition.date is not None, transition
            moment, terms = transition.date, f"Transition Date={_iso(transition.date)}"
        if now >= moment:
            reached.append((moment, terms, transition.storage_class))
    if not reached:
        return None
    moment, terms, storage_class = max(reached)
    reason = f"{terms} StorageClass={storage_class}: due at {_iso(moment)}"
    return Action(
        ActionKind.TRANSITION, key, version.version_id, rule.rule_id, reason, storage_class
    )


def _noncurrent_transition_due(
    key: str, versions: Sequence[Version], rule: Rule, transition: NoncurrentTransition, now: float
) -> dict[int, str]:
    """Index -> reason of each noncurrent version this transition moves at `now`."""
    past = _noncurrent_past(
        key,
        versions,
        rule.filter,
        transition.newer_noncurrent_versions,
        transition.noncurrent_days,
        now,
    )
    return {
        index: (
            f"NoncurrentVersionTransition NoncurrentDays={transition.noncurrent_days} "
            f"StorageClass={transition.storage_class}: noncurrent since "
            f"{_iso(noncurrent_since)}, due at {_iso(moment)}"
        )
        for index, (noncurrent_since, moment) in past.items()
    }


def upload_action(upload: Upload, rules: Sequence[Rule], now: float) -> AbortUpload | None:
    """AbortIncompleteMultipartUpload of `upload` at `now`, by the first rule (in stored
    order) whose filter selects it and whose DaysAfterInitiation have passed."""
    for rule in rules:
        if not rule.enabled or rule.abort_days is None or not rule.filter.matches_upload(upload):
            continue
        moment = expiry_moment(upload.initiated, rule.abort_days)
        if now >= moment:
            reason = (
                f"AbortIncompleteMultipartUpload DaysAfterInitiation={rule.abort_days}:"
                f" initiated {_iso(upload.initiated)}, expired at {_iso(moment)}"
            )
            return AbortUpload(upload.key, upload.upload_id, rule.rule_id, reason)
    return None
