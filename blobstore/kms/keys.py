"""The built-in key service: master keys for server-side encryption, kept in ZooKeeper
sealed under the cluster key (`blobstore admin kms key create|ls|rotate`).

A key is `/kms/keys/<key id>`, JSON::

    {"format_version": 1, "key_id": "<uuid>", "alias": "", "description": "",
     "created": <epoch s>, "primary": 2,
     "versions": [{"version": 1, "created": ..., "material": "<sealed>"}, ...]}

- **Material**: 32 random bytes (AES-256) per version, sealed with
  `runtime.sealing.seal_secret` for the owner `kms:<key id>` and the version: whoever
  reads ZooKeeper (its snapshots, its backups) without the cluster key learns nothing,
  and a version's material copied into another key or version does not open.
- **Rotation** adds a version and makes it the primary. New data keys are wrapped under
  the primary; data keys wrapped under older versions still open, since versions are
  never dropped. Rotating the cluster key re-seals every version (not implemented yet).
- **Data keys** (envelope encryption): `generate_data_key` gives 32 fresh random bytes and
  their wrapped form `v1:<key id>:<version>:<base64 nonce + AES-256-GCM ciphertext>`,
  with the caller's encryption context (bucket and object, say) as associated data, so
  a wrapped key opens only for the context it was made for. `decrypt_data_key` undoes
  it. The plain data key never leaves the process that asked for it.
- **A key is named** by its id, `alias/<alias>`, or an ARN ending in `key/<id>` or
  `alias/<alias>` (what S3 clients send as `x-amz-server-side-encryption-aws-kms-key-id`).

`KeyService` is the interface the rest of the product uses: an external KMS (Vault
Transit, a cloud KMS) plugs in by implementing its two methods.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import ClusterKey, SealError, open_secret, seal_secret
from blobstore.runtime.zk import ZooKeeperClient

KEYS_PATH = "/kms/keys"
FORMAT_VERSION = 1
WRAPPED_FORMAT = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
KEYS_MAX = 1000
VERSIONS_MAX = 1000
CAS_ATTEMPTS_MAX = 16
ALIAS = re.compile(r"^[A-Za-z0-9/_-]{1,256}$")
DESCRIPTION_CHARS_MAX = 256


class KmsError(UsageError):
    """A key that does not exist, a wrapped data key that does not open, a bad name."""


class KeyService(Protocol):
    """Envelope keys: what server-side encryption asks of a key service."""

    async def generate_data_key(
        self, key_ref: str, context: Mapping[str, str]
    ) -> tuple[bytes, str]:
        """(plain 32-byte data key, its wrapped form naming the key and its version)."""
        ...

    async def decrypt_data_key(self, wrapped: str, context: Mapping[str, str]) -> bytes:
        """The plain data key of `wrapped`, for the context it was made with."""
        ...


@dataclass(frozen=True, slots=True)
class KeyVersion:
    version: int
    created: float
    material: str = field(repr=False)  # sealed


@dataclass(frozen=True, slots=True)
class MasterKey:
    """A key as stored: every version's material sealed."""

    key_id: str
    primary: int
    versions: tuple[KeyVersion, ...]
    created: float
    alias: str = ""
    description: str = ""

    def to_json(self) -> bytes:
        record: dict[str, Any] = {"format_version": FORMAT_VERSION, **asdict(self)}
        return json.dumps(record, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> MasterKey:
        record = json.loads(raw)
        if record.get("format_version") != FORMAT_VERSION:
            raise KmsError(f"kms key of format {record.get('format_version')!r}: unknown")
        versions = tuple(KeyVersion(**v) for v in record["versions"])
        return cls(
            record["key_id"],
            int(record["primary"]),
            versions,
            float(record["created"]),
            record.get("alias", ""),
            record.get("description", ""),
        )

    def version(self, number: int) -> KeyVersion:
        for version in self.versions:
            if version.version == number:
                return version
        raise KmsError(f"kms key {self.key_id} has no version {number}")

    def public(self) -> dict[str, Any]:
        """What `kms key ls` shows: never the material."""
        return {
            "key_id": self.key_id,
            "alias": self.alias,
            "description": self.description,
            "created": self.created,
            "primary_version": self.primary,
            "versions": len(self.versions),
        }


def _owner(key_id: str) -> str:
    return f"kms:{key_id}"


def new_version(cluster_key: ClusterKey, key_id: str, number: int) -> KeyVersion:
    """A version with fresh material, sealed for this key and version."""
    material = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
    sealed = seal_secret(cluster_key, material, _owner(key_id), f"v{number}")
    return KeyVersion(number, time.time(), sealed)


def open_material(cluster_key: ClusterKey, key: MasterKey, number: int) -> bytes:
    sealed = key.version(number).material
    try:
        text = open_secret(cluster_key, sealed, _owner(key.key_id), f"v{number}")
    except SealError as e:
        raise KmsError(f"kms key {key.key_id} version {number}: {e}") from None
    return base64.b64decode(text)


def check_alias(alias: str) -> str:
    if alias and (not ALIAS.match(alias) or alias.startswith("aws/")):
        raise KmsError(f"kms alias {alias!r}: letters, digits, / _ - (not aws/...), 1-256")
    return alias


def key_reference(key_ref: str) -> tuple[str, str]:
    """("id" | "alias", name) of a key named by id, alias/NAME or an ARN ending so."""
    name = key_ref.strip()
    if name.startswith("arn:"):
        resource = name.split(":", 5)[-1]
        name = resource.removeprefix("key/")
    if name.startswith("alias/"):
        return "alias", name.removeprefix("alias/")
    return "id", name


def _is_key_id(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def _context_bytes(key_id: str, version: int, context: Mapping[str, str]) -> bytes:
    # JSON with sorted keys: one encoding per context, nothing to smuggle in.
    return json.dumps([key_id, version, dict(sorted(context.items()))]).encode()


def wrap(
    material: bytes, key_id: str, version: int, data_key: bytes, context: Mapping[str, str]
) -> str:
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = AESGCM(material).encrypt(nonce, data_key, _context_bytes(key_id, version, context))
    body = base64.b64encode(nonce + sealed).decode()
    return f"{WRAPPED_FORMAT}:{key_id}:{version}:{body}"


def parse_wrapped(wrapped: str) -> tuple[str, int, bytes]:
    """(key id, version, nonce + ciphertext) of a wrapped data key; KmsError if malformed."""
    parts = wrapped.split(":")
    if len(parts) != 4 or parts[0] != WRAPPED_FORMAT or not parts[2].isdigit():
        raise KmsError("not a wrapped data key")
    try:
        raw = base64.b64decode(parts[3].encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise KmsError("not a wrapped data key (base64)") from None
    if len(raw) <= NONCE_BYTES:
        raise KmsError("a truncated wrapped data key")
    return parts[1], int(parts[2]), raw


def unwrap(
    material: bytes, key_id: str, version: int, raw: bytes, context: Mapping[str, str]
) -> bytes:
    try:
        return AESGCM(material).decrypt(
            raw[:NONCE_BYTES], raw[NONCE_BYTES:], _context_bytes(key_id, version, context)
        )
    except InvalidTag:
        raise KmsError(
            f"the data key wrapped under kms key {key_id} version {version} does not open "
            "for this context"
        ) from None


class KeyStore:
    """The built-in `KeyService`, over ZooKeeper; material opens with `cluster_key`."""

    def __init__(
        self,
        zk: ZooKeeperClient,
        cluster_key: ClusterKey | None,
        *,
        cache_s: float = 0.0,
    ) -> None:
        """`cache_s`: how long a master key read is reused for data keys (a gateway's
        every encrypted PUT and GET would read ZooKeeper otherwise); a rotation shows in
        new data keys after at most that long. Opened material is kept as long."""
        self._zk = zk
        self._cluster_key = cluster_key
        self._cache_s = cache_s
        self._cached: dict[str, tuple[float, MasterKey]] = {}
        self._materials: dict[tuple[str, int], bytes] = {}

    def _key(self) -> ClusterKey:
        if self._cluster_key is None:
            raise KmsError(
                "the key service needs the cluster key (BLOBSTORE_CLUSTER_KEY_FILE or "
                "BLOBSTORE_CLUSTER_KEY): master keys are sealed under it"
            )
        return self._cluster_key

    async def create(self, alias: str = "", description: str = "") -> MasterKey:
        check_alias(alias)
        if len(description) > DESCRIPTION_CHARS_MAX:
            raise KmsError(f"a description of more than {DESCRIPTION_CHARS_MAX} characters")
        keys = await self.list()
        if len(keys) >= KEYS_MAX:
            raise KmsError(f"{KEYS_MAX} kms keys exist: the most there may be")
        if alias and any(k.alias == alias for k in keys):
            raise KmsError(f"kms alias {alias!r} names another key")
        key_id = str(uuid.uuid4())
        first = new_version(self._key(), key_id, 1)
        key = MasterKey(key_id, 1, (first,), first.created, alias, description)
        try:
            await self._zk.create(f"{KEYS_PATH}/{key_id}", key.to_json(), makepath=True)
        except NodeExistsError:  # a UUID seen twice: a broken random source
            raise KmsError(f"kms key {key_id} exists already") from None
        return key

    async def list(self) -> list[MasterKey]:
        try:
            names = await self._zk.get_children(KEYS_PATH)
        except NoNodeError:
            return []
        keys = []
        for name in sorted(names):
            try:
                keys.append(MasterKey.from_json((await self._zk.get(f"{KEYS_PATH}/{name}")).value))
            except NoNodeError:
                continue
        return keys

    async def get(self, key_ref: str) -> MasterKey:
        return (await self._versioned(key_ref))[0]

    async def _versioned(self, key_ref: str) -> tuple[MasterKey, int]:
        """The key `key_ref` names and its znode's version."""
        kind, name = key_reference(key_ref)
        if kind == "alias":
            named = [key for key in await self.list() if key.alias == name]
            if not named:
                raise KmsError(f"no kms key with alias {name!r}")
            name = named[0].key_id
        if not _is_key_id(name):
            raise KmsError(f"no kms key {name!r}")
        try:
            read = await self._zk.get(f"{KEYS_PATH}/{name}")
        except NoNodeError:
            raise KmsError(f"no kms key {name!r}") from None
        return MasterKey.from_json(read.value), read.version

    async def rotate(self, key_ref: str) -> MasterKey:
        """A new primary version; older ones stay to open what they wrapped."""
        for _ in range(CAS_ATTEMPTS_MAX):
            key, znode_version = await self._versioned(key_ref)
            if len(key.versions) >= VERSIONS_MAX:
                raise KmsError(f"kms key {key.key_id} has {VERSIONS_MAX} versions already")
            number = max(v.version for v in key.versions) + 1
            rotated = replace(
                key,
                primary=number,
                versions=(*key.versions, new_version(self._key(), key.key_id, number)),
            )
            try:
                await self._zk.set(f"{KEYS_PATH}/{key.key_id}", rotated.to_json(), znode_version)
            except BadVersionError:
                continue
            return rotated
        raise KmsError(f"kms key {key_ref}: rotation kept racing with another change")

    async def generate_data_key(
        self, key_ref: str, context: Mapping[str, str]
    ) -> tuple[bytes, str]:
        key = await self._recent(key_ref, version=None)
        material = self._material(key, key.primary)
        data_key = secrets.token_bytes(KEY_BYTES)
        return data_key, wrap(material, key.key_id, key.primary, data_key, context)

    async def decrypt_data_key(self, wrapped: str, context: Mapping[str, str]) -> bytes:
        key_id, version, raw = parse_wrapped(wrapped)
        key = await self._recent(key_id, version=version)
        return unwrap(self._material(key, version), key_id, version, raw, context)

    async def _recent(self, key_ref: str, *, version: int | None) -> MasterKey:
        """The key `key_ref` names, read at most `cache_s` ago (and holding `version`)."""
        now = time.monotonic()
        cached = self._cached.get(key_ref)
        if cached is not None and now - cached[0] < self._cache_s:
            key = cached[1]
            if version is None or any(v.version == version for v in key.versions):
                return key
        key = await self.get(key_ref)
        if self._cache_s > 0:
            if len(self._cached) >= KEYS_MAX:
                self._cached.clear()
            self._cached[key_ref] = (now, key)
        return key

    def _material(self, key: MasterKey, version: int) -> bytes:
        if self._cache_s <= 0:
            return open_material(self._key(), key, version)
        material = self._materials.get((key.key_id, version))
        if material is None:
            if len(self._materials) >= KEYS_MAX:
                self._materials.clear()
            material = open_material(self._key(), key, version)
            self._materials[(key.key_id, version)] = material
        return material
