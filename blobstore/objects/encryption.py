"""Server-side encryption of objects: which key seals which bytes, and what each version
keeps to open them again (its record's `sse`). The chunk format: blobstore/objects/sse.py.

Modes, as S3 names them:

- **AES256** (SSE-S3): a fresh data key per object, wrapped by the built-in key service's
  key `alias/blobstore-sse-s3` (made on first use).
- **aws:kms** (SSE-KMS): a fresh data key per object, wrapped by the key service key the
  request (or the bucket's default encryption) names, with the request's encryption
  context plus the object's ARN as associated data.
- **SSE-C**: the customer's key, sent with every request. It is never stored: the record
  keeps a salted HMAC of it, to tell a wrong key (403) from a right one.

**Units.** A single-part object is one unit; a multipart object's units are its parts,
in order. Each unit is sealed under its own key, HKDF of the object's base key (the data
key, or the customer's key) and the unit's random 16-byte salt, so no two units share a
key and no nonce repeats. The label bound into each chunk is the unit's part number (0
for a single-part object): nothing in it says where the bytes live, so compaction and the
cold tier move ciphertext as it is, and a copy can share its source's sealed entries.

A record's `sse` (compact JSON)::

    {"m": "AES256" | "aws:kms" | "SSE-C",
     "k": key service key (as named), "w": wrapped data key, "c": context,  # AES256, KMS
     "cs": salt (hex), "ch": HMAC-SHA256 of the customer key (hex),        # SSE-C
     "s": the unit salt of a single-part object (hex)}

The catalog keeps each version's plaintext size, ETag (the plaintext's MD5) and checksums,
computed as the bytes arrive; the stored size is larger by 16 bytes per 64 KiB chunk.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from blobstore.catalog.records import ObjectRecord, PartInfo
from blobstore.kms.keys import KeyService, KmsError
from blobstore.objects.errors import (
    SseKeyMismatchError,
    SseKeyRequiredError,
    SseKmsError,
    SseNotApplicableError,
)
from blobstore.objects.sse import (
    ChunkDecryptor,
    ChunkEncryptor,
    ChunkSpan,
    chunk_span,
    ciphertext_size,
    customer_key_check,
    decrypt_range,
    new_salt,
    unit_key,
)

SSE_S3 = "AES256"
SSE_KMS = "aws:kms"
SSE_C = "SSE-C"
SSE_S3_KEY = "alias/blobstore-sse-s3"
SSE_S3_ALIAS = "blobstore-sse-s3"
ARN_CONTEXT = "aws:s3:arn"
OPENED_KEYS_MAX = 4096  # data keys of SSE-S3 / SSE-KMS objects a gateway keeps opened


@dataclass(frozen=True, slots=True)
class SseSpec:
    """The encryption a write asks for: mode "" (none), AES256, aws:kms or SSE-C."""

    mode: str = ""
    kms_key_id: str = ""
    context: Mapping[str, str] = field(default_factory=dict)
    customer_key: bytes = field(default=b"", repr=False)


@dataclass(frozen=True, slots=True)
class Unit:
    """One sealed unit of an object: its label, salt, and where its plaintext and its
    stored bytes start."""

    label: bytes
    salt: bytes
    plain_start: int
    plain_size: int
    stored_start: int


def label(part_number: int) -> bytes:
    return b"part:%d" % part_number


def object_arn(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


def units(record: ObjectRecord) -> list[Unit]:
    """The sealed units of an encrypted, resolved record, in order."""
    assert record.sse is not None and not record.unresolved
    if not record.parts:
        return [Unit(label(0), bytes.fromhex(record.sse["s"]), 0, record.size, 0)]
    out = []
    plain = stored = 0
    for part in record.parts:
        out.append(
            Unit(label(part.part_number), bytes.fromhex(part.sse_salt), plain, part.size, stored)
        )
        plain += part.size
        stored += part_stored_size(part)
    return out


def part_stored_size(part: PartInfo) -> int:
    return ciphertext_size(part.size) if part.sse_salt else part.size


def stored_size(record: ObjectRecord) -> int:
    """Bytes the record's data takes on the bookies or the tier (a resolved record)."""
    if record.sse is None:
        return record.size
    if record.parts:
        return sum(part_stored_size(p) for p in record.parts)
    return ciphertext_size(record.size)


def stored_range(unit: Unit, first: int, last: int) -> tuple[int, int, ChunkSpan]:
    """The stored bytes (absolute) holding plaintext first..last of `unit` (offsets
    within the unit), and the span to open them with."""
    span = chunk_span(unit.plain_size, first, last)
    return unit.stored_start + span.cipher_first, unit.stored_start + span.cipher_last, span


def decryptor(
    unit_key: bytes, unit: Unit, first: int, last: int
) -> tuple[int, int, ChunkDecryptor]:
    """(stored first, stored last, a decryptor yielding plaintext first..last of unit);
    `unit_key`: `ObjectKeys.unit_key` of the unit."""
    stored_first, stored_last, span = stored_range(unit, first, last)
    opener = ChunkDecryptor(
        unit_key, unit.salt[:4], unit.label, unit.plain_size, span, last - first + 1
    )
    return stored_first, stored_last, opener


def open_range(
    unit_key: bytes, unit: Unit, span: ChunkSpan, stored: bytes | memoryview, length: int
) -> bytes:
    """Plaintext of `span` (from `stored_range`) in one piece, from its stored bytes."""
    return decrypt_range(unit_key, unit.salt[:4], unit.label, unit.plain_size, span, stored, length)


def plain_pieces(record: ObjectRecord, start: int, end: int) -> list[tuple[Unit, int, int]]:
    """(unit, first, last within the unit) for plaintext start..end of the record."""
    pieces = []
    for unit in units(record):
        lo = max(start, unit.plain_start)
        hi = min(end, unit.plain_start + unit.plain_size - 1)
        if lo <= hi:
            pieces.append((unit, lo - unit.plain_start, hi - unit.plain_start))
    return pieces


@dataclass
class SealedBody:
    """Counts (and hashes, given `md5`) the plaintext of a body while it is sealed."""

    md5: Any = None  # a hashlib MD5, or None
    plain_bytes: int = 0

    def digest(self) -> bytes:
        return self.md5.digest() if self.md5 is not None else b""


async def sealed(
    body: AsyncIterator[bytes | memoryview],
    base_key: bytes,
    salt: bytes,
    part_number: int,
    counter: SealedBody,
) -> AsyncIterator[bytes]:
    """The body as the stored bytes of one unit."""
    encryptor = ChunkEncryptor(unit_key(base_key, salt), salt[:4], label(part_number))
    async for piece in body:
        counter.plain_bytes += len(piece)
        if counter.md5 is not None:
            counter.md5.update(piece)
        for chunk in encryptor.feed(piece):
            yield chunk
    yield encryptor.finish()


def same_sealing(sse: Mapping[str, Any] | None, spec: SseSpec) -> bool:
    """A copy may share its source's sealed entries: the destination asks for what the
    source was sealed with (the same mode and key service key, or the same customer key,
    which the caller checked)."""
    if sse is None or not spec.mode:
        return sse is None and not spec.mode
    if sse["m"] != spec.mode:
        return False
    return spec.mode != SSE_KMS or sse.get("k") == (spec.kms_key_id or "")


class ObjectKeys:
    """Makes and opens objects' base keys through the key service (None: this process
    has no cluster key, and every encrypted write or read is refused with why)."""

    def __init__(
        self,
        service: KeyService | None,
        ensure_sse_s3_key: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._service = service
        self._ensure_sse_s3_key = ensure_sse_s3_key
        # Opened data keys by (wrapped key, context): a GET of a small object costs an
        # unwrap more than its read otherwise. A wrapped key opens to one data key for
        # good (rotation adds versions; old ones stay), so an entry never goes stale.
        # Customer keys are never kept.
        self._opened: LRUCache[tuple[str, tuple[tuple[str, str], ...]], bytes] = LRUCache(
            OPENED_KEYS_MAX
        )
        self._unit_keys: LRUCache[tuple[bytes, bytes], bytes] = LRUCache(OPENED_KEYS_MAX)

    def _keys(self) -> KeyService:
        if self._service is None:
            raise SseKmsError(
                "server-side encryption needs the cluster key (BLOBSTORE_CLUSTER_KEY_FILE): "
                "this gateway has none"
            )
        return self._service

    async def new(self, spec: SseSpec, bucket: str, key: str) -> tuple[dict[str, Any], bytes]:
        """(the record's `sse` without its unit salt, the base key) for a new object."""
        if spec.mode == SSE_C:
            salt = new_salt()
            check = customer_key_check(spec.customer_key, salt)
            return {"m": SSE_C, "cs": salt.hex(), "ch": check}, spec.customer_key
        context = {**spec.context, ARN_CONTEXT: object_arn(bucket, key)}
        # SSE-KMS without a key: the built-in key, as S3 uses its managed aws/s3 key.
        key_ref = spec.kms_key_id if spec.mode == SSE_KMS and spec.kms_key_id else SSE_S3_KEY
        if key_ref == SSE_S3_KEY and self._ensure_sse_s3_key is not None:
            await self._ensure_sse_s3_key()
        try:
            data_key, wrapped = await self._keys().generate_data_key(key_ref, context)
        except KmsError as e:
            raise SseKmsError(str(e), not_found="no kms key" in str(e)) from None
        sse: dict[str, Any] = {"m": spec.mode, "w": wrapped, "c": context}
        if spec.mode == SSE_KMS:
            sse["k"] = spec.kms_key_id
        return sse, data_key

    async def open(self, sse: Mapping[str, Any] | None, customer_key: bytes) -> bytes:
        """The base key of an object sealed as `sse` (b"" for one in clear); the customer
        key is checked for SSE-C objects, and refused for others."""
        if sse is None or sse["m"] != SSE_C:
            if customer_key:
                raise SseNotApplicableError(
                    "The encryption parameters are not applicable to this object."
                )
            if sse is None:
                return b""
            return await self._data_key(sse["w"], sse["c"])
        if not customer_key:
            raise SseKeyRequiredError(
                "The object was stored using a form of Server Side Encryption. The correct "
                "parameters must be provided to retrieve the object."
            )
        expected = sse["ch"]
        if not hmac.compare_digest(
            customer_key_check(customer_key, bytes.fromhex(sse["cs"])), expected
        ):
            raise SseKeyMismatchError("The provided customer key does not open this object.")
        return customer_key

    async def _data_key(self, wrapped: str, context: Mapping[str, str]) -> bytes:
        """The data key `wrapped` holds, unwrapped by the key service or kept from before."""
        cache_key = (wrapped, tuple(sorted(context.items())))
        data_key = self._opened.get(cache_key)
        if data_key is None:
            try:
                data_key = await self._keys().decrypt_data_key(wrapped, context)
            except KmsError as e:
                raise SseKmsError(str(e), not_found="no kms key" in str(e)) from None
            self._opened[cache_key] = data_key
        return data_key

    def unit_key(self, sse: Mapping[str, Any], base_key: bytes, salt: bytes) -> bytes:
        """The key of the unit salted `salt` of an object sealed as `sse`, whose base
        key `open` gave; kept for the next read, unless derived from a customer's key."""
        if sse["m"] == SSE_C:
            return unit_key(base_key, salt)
        kept = self._unit_keys.get((base_key, salt))
        if kept is None:
            kept = self._unit_keys[(base_key, salt)] = unit_key(base_key, salt)
        return kept
