"""Tiers: named places where the maintenance job moves cold objects' bytes.

A tier is a target URI, kept in ZooKeeper at `/tiers/<name>` (`TierStore`):

- `file:///mnt/cold` - a directory of this host's filesystem: an NFS or HDD mount,
  mounted at the same path on every gateway and Spark executor;
- `s3://bucket/prefix` - any S3 endpoint (`--endpoint`, `--region`, an access key and
  its secret): AWS, MinIO, Ceph RGW, another blobstore;
- `hdfs://namenode:port/path` - HDFS, through libhdfs (it must be installed where the
  job and the gateways run).

A lifecycle rule's StorageClass names a tier, either by the tier's name (as MinIO's
rules do) or by one of S3's classes (STANDARD_IA, GLACIER_IR, GLACIER, DEEP_ARCHIVE
...) that `tier add ... --storage-class CLASS` bound to it (`resolve_storage_class`).
One class is bound to at most one tier.

An S3 tier's secret key is stored sealed under the cluster key (blobstore/access/
sealing.py), bound to the tier's name and access key; it is never printed: `tier ls`
and every error show the access key only.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import ClusterKey, open_secret, seal_secret
from blobstore.runtime.zk import ZooKeeperClient

TIERS_PATH = "/tiers"
TIER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SCHEMES = ("file", "s3", "hdfs")
TIERS_MAX = 64
# S3's storage classes other than STANDARD: each may be bound to one tier.
S3_CLASSES = frozenset(
    {
        "STANDARD_IA",
        "ONEZONE_IA",
        "INTELLIGENT_TIERING",
        "GLACIER",
        "GLACIER_IR",
        "DEEP_ARCHIVE",
        "REDUCED_REDUNDANCY",
    }
)
# The classes whose objects S3 clients restore before reading (RestoreObject).
ARCHIVE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class NoSuchTierError(UsageError):
    """No tier of that name."""


def _secret_owner(name: str) -> str:
    return f"tier:{name}"


@dataclass(frozen=True, slots=True)
class TierSpec:
    """A tier as stored (the secret sealed)."""

    name: str
    uri: str
    storage_classes: tuple[str, ...] = ()
    endpoint: str = ""
    region: str = ""
    access_key: str = ""
    sealed_secret: str = field(default="", repr=False)
    created: float = 0.0

    @property
    def scheme(self) -> str:
        return urllib.parse.urlsplit(self.uri).scheme

    @property
    def rule_names(self) -> tuple[str, ...]:
        """What a lifecycle rule's StorageClass may say to mean this tier."""
        return (self.name, *self.storage_classes)

    def secret(self, cluster_key: ClusterKey | None) -> str:
        """The S3 secret key ('' when the tier has none)."""
        if not self.sealed_secret:
            return ""
        if cluster_key is None:
            raise UsageError(f"tier {self.name}: its secret key needs the cluster key")
        return open_secret(
            cluster_key, self.sealed_secret, _secret_owner(self.name), self.access_key
        )

    def to_json(self) -> bytes:
        d = asdict(self)
        d["storage_classes"] = list(self.storage_classes)
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TierSpec:
        d: dict[str, Any] = json.loads(raw)
        d["storage_classes"] = tuple(d.get("storage_classes", ()))
        return cls(**d)

    def public(self) -> dict[str, Any]:
        """What `tier ls` shows: everything but the secret."""
        return {
            "name": self.name,
            "uri": self.uri,
            "storage_classes": list(self.storage_classes),
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key": self.access_key,
            "secret_key": "(sealed)" if self.sealed_secret else "",
            "created": self.created,
        }


def check_uri(uri: str) -> str:
    """The URI's problem, or '' when it names a usable target."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in SCHEMES:
        return f"the scheme must be one of {', '.join(s + '://' for s in SCHEMES)}"
    if parts.query or parts.fragment:
        return "a query or fragment has no meaning here"
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            return "a file tier is file:///absolute/path"
        return ""
    if parts.scheme == "s3":
        if not BUCKET_NAME.match(parts.netloc):
            return f"{parts.netloc!r} is not a bucket name (s3://bucket/prefix)"
        return ""
    if not parts.hostname:
        return "an HDFS tier is hdfs://namenode:port/path"
    return ""


def normalized_uri(uri: str) -> str:
    """The URI without a trailing '/' after its path (`file:///mnt/cold/` is
    `file:///mnt/cold`; `file:///` stays)."""
    parts = urllib.parse.urlsplit(uri)
    path = parts.path.rstrip("/") or ("/" if parts.scheme == "file" else "")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def check_spec(spec: TierSpec) -> None:
    """A UsageError naming the first problem of a new tier's definition."""
    if not TIER_NAME.match(spec.name):
        raise UsageError(
            f"tier name {spec.name!r}: 1-64 letters, digits, '-' or '_', starting with a "
            "letter or digit"
        )
    problem = check_uri(spec.uri)
    if problem:
        raise UsageError(f"tier {spec.name}: bad URI {spec.uri!r}: {problem}")
    for storage_class in spec.storage_classes:
        if storage_class not in S3_CLASSES:
            raise UsageError(
                f"tier {spec.name}: --storage-class {storage_class!r} is not one of S3's "
                f"classes ({', '.join(sorted(S3_CLASSES))})"
            )
    if spec.scheme == "s3" and bool(spec.access_key) != bool(spec.sealed_secret):
        raise UsageError(f"tier {spec.name}: an access key needs its secret key, and back")
    if spec.scheme != "s3" and (spec.endpoint or spec.access_key or spec.region):
        raise UsageError(f"tier {spec.name}: --endpoint, --region and keys are for s3:// tiers")
    if spec.endpoint and urllib.parse.urlsplit(spec.endpoint).scheme not in ("http", "https"):
        raise UsageError(f"tier {spec.name}: --endpoint must be http(s)://host[:port]")


def new_spec(
    name: str,
    uri: str,
    cluster_key: ClusterKey | None,
    *,
    storage_classes: tuple[str, ...] = (),
    endpoint: str = "",
    region: str = "",
    access_key: str = "",
    secret_key: str = "",
) -> TierSpec:
    """A checked new tier, its secret sealed under `cluster_key`."""
    sealed = ""
    if secret_key:
        if cluster_key is None:
            raise UsageError(f"tier {name}: sealing the secret key needs the cluster key")
        sealed = seal_secret(cluster_key, secret_key, _secret_owner(name), access_key)
    spec = TierSpec(
        name,
        normalized_uri(uri),
        tuple(dict.fromkeys(c.upper() for c in storage_classes)),
        endpoint,
        region,
        access_key,
        sealed,
        time.time(),
    )
    check_spec(spec)
    return spec


def resolve_storage_class(tiers: list[TierSpec], storage_class: str) -> TierSpec | None:
    """The tier a rule's StorageClass names (a tier's name or a class bound to it)."""
    for tier in tiers:
        if storage_class in tier.rule_names:
            return tier
    return None


def class_conflicts(tiers: list[TierSpec], spec: TierSpec) -> list[str]:
    """The names and classes of `spec` another tier already answers to."""
    taken = {name: tier.name for tier in tiers for name in tier.rule_names}
    return [f"{name} (tier {taken[name]})" for name in spec.rule_names if name in taken]


class TierStore:
    """The tiers in ZooKeeper."""

    def __init__(self, zk: ZooKeeperClient) -> None:
        self.zk = zk

    async def list(self) -> list[TierSpec]:
        try:
            names = sorted(await self.zk.get_children(TIERS_PATH))
        except NoNodeError:
            return []
        found = []
        for name in names:
            try:
                found.append(TierSpec.from_json((await self.zk.get(f"{TIERS_PATH}/{name}")).value))
            except NoNodeError:
                continue
        return found

    async def get(self, name: str) -> TierSpec:
        try:
            return TierSpec.from_json((await self.zk.get(f"{TIERS_PATH}/{name}")).value)
        except NoNodeError:
            raise NoSuchTierError(f"no tier named {name!r}") from None

    async def add(self, spec: TierSpec) -> None:
        """Store a new tier; refuses a taken name or class."""
        check_spec(spec)
        tiers = await self.list()
        if len(tiers) >= TIERS_MAX:
            raise UsageError(f"a cluster holds at most {TIERS_MAX} tiers")
        conflicts = class_conflicts(tiers, spec)
        if conflicts:
            raise UsageError(f"tier {spec.name}: already taken: {', '.join(conflicts)}")
        await self.zk.ensure_path(TIERS_PATH)
        try:
            await self.zk.create(f"{TIERS_PATH}/{spec.name}", spec.to_json())
        except NodeExistsError:
            raise UsageError(f"tier {spec.name} exists already") from None

    async def remove(self, name: str) -> None:
        try:
            await self.zk.delete(f"{TIERS_PATH}/{name}")
        except NoNodeError:
            raise NoSuchTierError(f"no tier named {name!r}") from None
        except NotEmptyError:
            raise UsageError(f"tier {name}: not empty") from None
