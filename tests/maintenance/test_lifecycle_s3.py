"""Lifecycle rules set through S3 (boto3 `put_bucket_lifecycle_configuration` on the real
gateway) and applied by the real `blobstore maintain`, judged at a chosen `--now`.

Each case (a rule kind or a filter) keeps its keys under a prefix of its own, and its
rules select only that prefix, so that four buckets (never versioned, sizes, versioned,
suspended) hold every case and a run's scan has few tasks. Two runs judge them all:

1. `--only lifecycle` at T1, a minute before the midnight that ends a one-day age of
   anything created during the setup (S3 counts Days from the creation plus the days,
   rounded up to the next midnight UTC): so T1 is a day and up to 24 hours after the
   creation, and nothing with Days=1 (or NoncurrentDays=1, DaysAfterInitiation=1) is
   due yet. What a past Date selects, and a lone delete marker under
   ExpiredObjectDeleteMarker, go in this run.
2. every phase with `--grace 0` at T2, a minute after that midnight: the one-day rules
   act, and the ledger that held only an expired object is deleted in the same run.

Each run's report counts exactly the actions the rules call for, so a Transition rule,
a Disabled rule or a filter that selects too much would show in the counts as well as
in the listings. The pure decisions are tested in test_lifecycle_rules.py.
"""

from __future__ import annotations

import datetime
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.maintenance.conftest import LEDGER_BYTES_MAX, ROOT, MaintenanceCluster

DAY_S = 86_400
MARGIN_S = 60
MARKER = "marker"  # a delete marker's place in a listing (added ones have unknown ids)
SIZE_BOUND = 1000
BIG_BYTES = LEDGER_BYTES_MAX + LEDGER_BYTES_MAX // 2  # alone in its ledger (see _fill_bytes)
# (key, version id or MARKER, is latest): one version of a listing.
Listed = tuple[str, str, bool]


def next_midnight_after_days(created: float, days: int) -> float:
    """S3's end of an age of `days` days: creation plus the days, up to the next midnight
    UTC (computed here apart from the code under test)."""
    return math.ceil((created + days * DAY_S) / DAY_S) * DAY_S


def iso(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def date(moment: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(moment, datetime.UTC)


@dataclass(frozen=True, slots=True)
class Moments:
    """The setup's wall-clock window and the times the rules are judged at."""

    began: float
    ended: float

    @property
    def past_midnight(self) -> float:
        """A Date every object of the setup is already past (today's midnight UTC)."""
        return math.floor(self.began / DAY_S) * DAY_S

    @property
    def one_day_ends(self) -> float:
        """The earliest midnight a one-day age of the setup's creations ends at."""
        return next_midnight_after_days(self.began, 1)

    @property
    def before(self) -> float:
        return self.one_day_ends - MARGIN_S

    @property
    def after(self) -> float:
        return next_midnight_after_days(self.ended, 1) + MARGIN_S


# ------------------------------------------------------------------ S3 helpers

PLAIN = "plain"  # never versioned
SIZES = "sizes"  # never versioned; its size filters select across the whole bucket
VERSIONED = "versioned"
SUSPENDED = "suspended"
BUCKETS = {PLAIN: "", SIZES: "", VERSIONED: "Enabled", SUSPENDED: "Enabled"}


def enabled(rule_id: str, prefix: str, **parts: Any) -> dict[str, Any]:
    return {"ID": rule_id, "Status": "Enabled", "Filter": {"Prefix": prefix}} | parts


def put(s3: Any, bucket: str, key: str, size: int = 100, tags: str = "") -> str:
    """PUT `size` bytes; the version id ("null" in a never versioned bucket)."""
    extra = {"Tagging": tags} if tags else {}
    answer = s3.put_object(Bucket=bucket, Key=key, Body=b"x" * size, **extra)
    return str(answer.get("VersionId") or "null")


def listing(s3: Any, bucket: str, prefix: str) -> set[Listed]:
    """Every version and delete marker under the prefix."""
    answer = s3.list_object_versions(Bucket=bucket, Prefix=prefix)
    found = {(v["Key"], v["VersionId"], v["IsLatest"]) for v in answer.get("Versions", [])}
    found |= {(m["Key"], MARKER, m["IsLatest"]) for m in answer.get("DeleteMarkers", [])}
    return found


def uploads(s3: Any, bucket: str, prefix: str) -> set[str]:
    listed = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    return {upload["Key"] for upload in listed}


def current(*keys: str) -> set[Listed]:
    """Objects of a never versioned bucket, each its null version."""
    return {(key, "null", True) for key in keys}


# ------------------------------------------------------------------ the cases


@dataclass
class Case:
    """A rule kind or filter: its rules, and what its keys are before any run, after
    run 1 and after run 2 (uploads: the keys of open multipart uploads)."""

    bucket: str
    prefix: str
    rules: list[dict[str, Any]]
    initial: set[Listed] = field(default_factory=set)
    after_first: set[Listed] = field(default_factory=set)
    after_second: set[Listed] = field(default_factory=set)
    uploads: tuple[set[str], set[str], set[str]] = (set(), set(), set())


Filler = Callable[[Any, Moments], Case]


def _days(s3: Any, m: Moments) -> Case:
    """Expiration Days=1, never versioned: the object is deleted once a day has passed
    as S3 counts it, not a minute before."""
    put(s3, PLAIN, "days/a")
    rules = [enabled("days", "days/", Expiration={"Days": 1})]
    return Case(PLAIN, "days/", rules, current("days/a"), current("days/a"), set())


def _days_versioned(s3: Any, m: Moments) -> Case:
    """Expiration Days=1, versioning enabled: a delete marker; the version stays,
    noncurrent."""
    v1 = put(s3, VERSIONED, "expire/a")
    rules = [enabled("expire", "expire/", Expiration={"Days": 1})]
    before = {("expire/a", v1, True)}
    after = {("expire/a", MARKER, True), ("expire/a", v1, False)}
    return Case(VERSIONED, "expire/", rules, before, before, after)


def _days_suspended(s3: Any, m: Moments) -> Case:
    """Expiration Days=1, versioning suspended: a null delete marker replaces the null
    version; the older version stays, noncurrent."""
    v1 = put(s3, SUSPENDED, "a")
    s3.put_bucket_versioning(Bucket=SUSPENDED, VersioningConfiguration={"Status": "Suspended"})
    put(s3, SUSPENDED, "a")
    rules = [enabled("days", "", Expiration={"Days": 1})]
    before = {("a", "null", True), ("a", v1, False)}
    return Case(SUSPENDED, "", rules, before, before, {("a", MARKER, True), ("a", v1, False)})


def _date(s3: Any, m: Moments) -> Case:
    """Expiration Date: a past midnight expires what it selects at once, a later one from
    that midnight on."""
    rules = [
        enabled("past", "date/past/", Expiration={"Date": date(m.past_midnight)}),
        enabled("later", "date/later/", Expiration={"Date": date(m.one_day_ends)}),
    ]
    put(s3, PLAIN, "date/past/a")
    put(s3, PLAIN, "date/later/a")
    before = current("date/past/a", "date/later/a")
    return Case(PLAIN, "date/", rules, before, current("date/later/a"), set())


def _noncurrent(s3: Any, m: Moments) -> Case:
    """NoncurrentVersionExpiration NoncurrentDays=1, NewerNoncurrentVersions=1: the newest
    noncurrent version stays whatever its age, older ones go a day after they became
    noncurrent; the current version is never touched."""
    terms = {"NoncurrentDays": 1, "NewerNoncurrentVersions": 1}
    rules = [enabled("nc", "nc/", NoncurrentVersionExpiration=terms)]
    k1, k2, k3, k4 = (put(s3, VERSIONED, "nc/k") for _ in range(4))
    p1, p2 = (put(s3, VERSIONED, "nc/pair") for _ in range(2))
    kept = {("nc/k", k4, True), ("nc/k", k3, False), ("nc/pair", p2, True)}
    kept.add(("nc/pair", p1, False))
    before = kept | {("nc/k", k2, False), ("nc/k", k1, False)}
    return Case(VERSIONED, "nc/", rules, before, before, kept)


def _locked(s3: Any, m: Moments) -> Case:
    """NoncurrentVersionExpiration of versions Object Lock keeps (a retention, a legal
    hold): both due, both skipped and counted so, both kept."""
    conf = {"ObjectLockEnabled": "Enabled"}
    s3.put_object_lock_configuration(Bucket=VERSIONED, ObjectLockConfiguration=conf)
    rules = [enabled("locked", "lock/", NoncurrentVersionExpiration={"NoncurrentDays": 1})]
    retained = s3.put_object(
        Bucket=VERSIONED,
        Key="lock/k",
        Body=b"r",
        ObjectLockMode="COMPLIANCE",
        ObjectLockRetainUntilDate=datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC),
    )["VersionId"]
    held = s3.put_object(Bucket=VERSIONED, Key="lock/k", Body=b"h", ObjectLockLegalHoldStatus="ON")
    latest = put(s3, VERSIONED, "lock/k")
    kept = {("lock/k", retained, False), ("lock/k", held["VersionId"], False)}
    kept.add(("lock/k", latest, True))
    return Case(VERSIONED, "lock/", rules, kept, kept, kept)


def _markers(s3: Any, m: Moments) -> Case:
    """ExpiredObjectDeleteMarker: a delete marker that is its key's only version goes at
    once; one that still hides a version stays."""
    rules = [enabled("markers", "markers/", Expiration={"ExpiredObjectDeleteMarker": True})]
    lone = put(s3, VERSIONED, "markers/lone")
    s3.delete_object(Bucket=VERSIONED, Key="markers/lone")
    s3.delete_object(Bucket=VERSIONED, Key="markers/lone", VersionId=lone)
    shadow = put(s3, VERSIONED, "markers/shadow")
    s3.delete_object(Bucket=VERSIONED, Key="markers/shadow")
    live = put(s3, VERSIONED, "markers/live")
    kept = {("markers/shadow", MARKER, True), ("markers/shadow", shadow, False)}
    kept.add(("markers/live", live, True))
    return Case(VERSIONED, "markers/", rules, kept | {("markers/lone", MARKER, True)}, kept, kept)


def _uploads(s3: Any, m: Moments) -> Case:
    """AbortIncompleteMultipartUpload DaysAfterInitiation=1, of the uploads under the
    rule's prefix only."""
    terms = {"DaysAfterInitiation": 1}
    rules = [enabled("abort", "uploads/tmp/", AbortIncompleteMultipartUpload=terms)]
    for key in ("uploads/tmp/u", "uploads/keep/u"):
        upload_id = s3.create_multipart_upload(Bucket=PLAIN, Key=key)["UploadId"]
        s3.upload_part(Bucket=PLAIN, Key=key, UploadId=upload_id, PartNumber=1, Body=b"p" * 1000)
    both = {"uploads/tmp/u", "uploads/keep/u"}
    return Case(PLAIN, "uploads/", rules, uploads=(both, both, {"uploads/keep/u"}))


def _expiring_now(rule_id: str, m: Moments, rule_filter: dict[str, Any]) -> dict[str, Any]:
    """A rule expiring, from a past Date, what `rule_filter` selects."""
    return {
        "ID": rule_id,
        "Status": "Enabled",
        "Filter": rule_filter,
        "Expiration": {"Date": date(m.past_midnight)},
    }


def _prefix(s3: Any, m: Moments) -> Case:
    """Prefix: the key's start, nothing else ("pf/logs" lacks the slash)."""
    rules = [_expiring_now("prefix", m, {"Prefix": "pf/logs/"})]
    for key in ("pf/logs/a", "pf/logs", "pf/data/logs/a"):
        put(s3, PLAIN, key)
    kept = current("pf/logs", "pf/data/logs/a")
    return Case(PLAIN, "pf/", rules, kept | current("pf/logs/a"), kept, kept)


def _tag(s3: Any, m: Moments) -> Case:
    """Tag: that key with that value among the object's tags."""
    rules = [_expiring_now("tag", m, {"Tag": {"Key": "class", "Value": "scratch"}})]
    put(s3, PLAIN, "tag/scratch", tags="class=scratch&team=a")
    put(s3, PLAIN, "tag/keep", tags="class=keep")
    put(s3, PLAIN, "tag/swapped", tags="scratch=class")
    put(s3, PLAIN, "tag/untagged")
    kept = current("tag/keep", "tag/swapped", "tag/untagged")
    return Case(PLAIN, "tag/", rules, kept | current("tag/scratch"), kept, kept)


def _sizes(s3: Any, m: Moments) -> Case:
    """ObjectSizeGreaterThan and ObjectSizeLessThan are strict bounds."""
    rules = [
        _expiring_now("greater", m, {"ObjectSizeGreaterThan": SIZE_BOUND}),
        _expiring_now("less", m, {"ObjectSizeLessThan": SIZE_BOUND // 2}),
    ]
    sizes = (SIZE_BOUND + 1, SIZE_BOUND, SIZE_BOUND * 3 // 4, SIZE_BOUND // 2, SIZE_BOUND // 2 - 1)
    for size in sizes:
        put(s3, SIZES, f"{size:05d}", size)
    kept = current(*(f"{size:05d}" for size in sizes[1:-1]))
    gone = current(f"{sizes[0]:05d}", f"{sizes[-1]:05d}")
    return Case(SIZES, "", rules, kept | gone, kept, kept)


def _and(s3: Any, m: Moments) -> Case:
    """And: the prefix, every tag and both size bounds; each missed condition keeps it."""
    conditions = {
        "Prefix": "and/",
        "Tags": [{"Key": "kind", "Value": "tmp"}, {"Key": "team", "Value": "a"}],
        "ObjectSizeGreaterThan": 100,
        "ObjectSizeLessThan": 10_000,
    }
    rules = [_expiring_now("and", m, {"And": conditions})]
    tags = "kind=tmp&team=a"
    put(s3, PLAIN, "and/match", 500, tags)
    put(s3, PLAIN, "and/one-tag", 500, "kind=tmp")
    put(s3, PLAIN, "and/too-big", 20_000, tags)
    put(s3, PLAIN, "and/too-small", 50, tags)
    put(s3, PLAIN, "andx/match", 500, tags)
    kept = current("and/one-tag", "and/too-big", "and/too-small", "andx/match")
    return Case(PLAIN, "and", rules, kept | current("and/match"), kept, kept)


def _transition(s3: Any, m: Moments) -> Case:
    """Transition is not expiration: the object stays, moved to the cold tier bound to
    GLACIER by the second run."""
    rule = enabled(
        "cold",
        "cold/",
        Transitions=[{"Days": 1, "StorageClass": "GLACIER"}],
        NoncurrentVersionTransitions=[{"NoncurrentDays": 1, "StorageClass": "GLACIER"}],
    )
    put(s3, PLAIN, "cold/a")
    return Case(PLAIN, "cold/", [rule], current("cold/a"), current("cold/a"), current("cold/a"))


def _disabled(s3: Any, m: Moments) -> Case:
    """A Disabled rule never acts, however due."""
    rule = _expiring_now("off", m, {"Prefix": "off/"}) | {"Status": "Disabled"}
    put(s3, PLAIN, "off/a")
    return Case(PLAIN, "off/", [rule], current("off/a"), current("off/a"), current("off/a"))


def _bytes(s3: Any, m: Moments) -> Case:
    """Expiration Days=1 of an object alone in its ledger: a 1 MiB object no rule selects
    retires the gateway's writer ledger, so the big one starts a fresh ledger and retires
    it too (the gateway's ledgers close at 1 MiB)."""
    put(s3, PLAIN, "big-seal", LEDGER_BYTES_MAX)
    put(s3, PLAIN, "big/a", BIG_BYTES)
    rules = [enabled("big", "big/", Expiration={"Days": 1})]
    before = current("big-seal", "big/a")
    return Case(PLAIN, "big", rules, before, before, current("big-seal"))


FILLERS: tuple[Filler, ...] = (
    _days,
    _days_versioned,
    _days_suspended,
    _date,
    _noncurrent,
    _locked,
    _markers,
    _uploads,
    _prefix,
    _tag,
    _sizes,
    _and,
    _transition,
    _disabled,
    _bytes,  # last: nothing after it shares its ledger
)
# What each run must report: what the cases call for, nothing more.
FIRST_RUN_COUNTS = {
    "versions_expired": 7,  # date/past/a, markers/lone, and one per filter (two of sizes)
    "delete_markers_added": 0,
    "uploads_aborted": 0,
    "actions_skipped": 0,
    "versions_skipped_locked": 0,
}
SECOND_RUN_COUNTS = {
    "versions_expired": 5,  # days/a, date/later/a, nc/k's two oldest, big/a
    "delete_markers_added": 2,  # expire/a (versioned), a (suspended)
    "uploads_aborted": 1,  # uploads/tmp/u
    "actions_skipped": 2,  # lock/k's two noncurrent versions, kept by Object Lock
    "versions_skipped_locked": 2,
}


def set_up(s3: Any, began: float) -> list[Case]:
    """The buckets, every case's keys, then each bucket's rules (all its cases')."""
    for bucket, versioning in BUCKETS.items():
        s3.create_bucket(Bucket=bucket)
        if versioning:
            configuration = {"Status": versioning}
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration=configuration)
    cases = [fill(s3, Moments(began, began)) for fill in FILLERS]
    for bucket in BUCKETS:
        rules = [rule for case in cases if case.bucket == bucket for rule in case.rules]
        s3.put_bucket_lifecycle_configuration(
            Bucket=bucket, LifecycleConfiguration={"Rules": rules}
        )
    return cases


def state_mismatches(s3: Any, cases: list[Case], stage: int) -> list[str]:
    """Cases whose versions or open uploads differ from what `stage` (0: before any run,
    1, 2: after that run) expects."""
    bad = []
    for case in cases:
        where = f"{case.bucket}/{case.prefix}"
        expected = (case.initial, case.after_first, case.after_second)[stage]
        found = listing(s3, case.bucket, case.prefix)
        if found != expected:
            bad.append(f"{where}: {sorted(found)} != expected {sorted(expected)}")
        open_uploads = uploads(s3, case.bucket, case.prefix)
        if open_uploads != case.uploads[stage]:
            bad.append(f"{where}: uploads {open_uploads} != expected {case.uploads[stage]}")
    return bad


def counts(report: dict[str, Any], names: dict[str, int]) -> dict[str, int]:
    return {name: int(report[name]) for name in names}


def add_tier(cluster: MaintenanceCluster) -> None:
    """A file tier answering to GLACIER (a rule may name only a class a tier answers to)."""
    command = [sys.executable, "-m", "blobstore.cli", "admin", "--zk", cluster.zk, "tier"]
    command += ["add", "COLD", f"file://{cluster.root / 'cold'}", "--storage-class", "GLACIER"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_each_rule_and_filter_acts_as_s3_says_at_its_moment(cluster: MaintenanceCluster) -> None:
    cluster.start()
    add_tier(cluster)
    s3 = cluster.s3()
    began = time.time()
    cases = set_up(s3, began)
    moments = Moments(began, time.time())
    assert state_mismatches(s3, cases, 0) == []

    first = cluster.report("--only", "lifecycle", "--now", iso(moments.before))

    assert first["outcome"] == "ok" and not first["errors"], first
    assert counts(first, FIRST_RUN_COUNTS) == FIRST_RUN_COUNTS, first
    assert state_mismatches(s3, cases, 1) == []

    second = cluster.report("--grace", "0", "--now", iso(moments.after))

    assert second["outcome"] == "ok" and not second["errors"], second
    assert counts(second, SECOND_RUN_COUNTS) == SECOND_RUN_COUNTS, second
    assert second["objects_tiered"] == 1, second  # cold/a
    assert state_mismatches(s3, cases, 2) == []
    # The ledger that held only the expired big object is gone, its bytes with it.
    assert second["ledgers_deleted"] >= 1, second
    assert second["bytes_reclaimed"] >= BIG_BYTES, second
    assert second["bookie_bytes_freed"] >= BIG_BYTES, second
