"""Which key seals which bytes (blobstore/objects/encryption.py), as pure logic: units and
their stored sizes, ranges opened from pieces of any size, keys derived per unit, the
customer key's check, and when a copy may share its source's sealed entries."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from blobstore.catalog.records import ObjectRecord, PartInfo
from blobstore.objects.encryption import (
    ObjectKeys,
    SealedBody,
    SseSpec,
    decryptor,
    open_range,
    plain_pieces,
    same_sealing,
    sealed,
    stored_range,
    stored_size,
    units,
)
from blobstore.objects.errors import (
    SseKeyMismatchError,
    SseKeyRequiredError,
    SseKmsError,
    SseNotApplicableError,
)
from blobstore.objects.sse import (
    CHUNK_BYTES,
    SseCorruptError,
    ciphertext_size,
    new_salt,
    unit_key,
)

BASE = bytes(range(32))


async def _one(items: list[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def _seal(body: bytes, salt: bytes, part_number: int, rng: random.Random) -> bytes:
    cuts = sorted(rng.randrange(len(body) + 1) for _ in range(5))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]

    async def run() -> bytes:
        counter = SealedBody()
        out = b"".join([c async for c in sealed(_one(pieces), BASE, salt, part_number, counter)])
        assert counter.plain_bytes == len(body)
        return out

    return asyncio.run(run())


def _open(record: ObjectRecord, stored: bytes, first: int, last: int, rng: random.Random) -> bytes:
    out: list[bytes | memoryview] = []
    for unit, lo, hi in plain_pieces(record, first, last):
        stored_first, stored_last, opener = decryptor(unit_key(BASE, unit.salt), unit, lo, hi)
        view = stored[stored_first : stored_last + 1]
        at = 0
        while at < len(view):
            step = rng.randrange(1, 100_000)
            out.append(opener.feed(view[at : at + step]))
            at += step
        out.append(opener.finish())
    return b"".join(out)


def test_single_unit_ranges_open_from_pieces_of_any_size() -> None:
    rng = random.Random(7)
    for size in (1, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES + 17):
        body = rng.randbytes(size)
        salt = new_salt()
        stored = _seal(body, salt, 0, rng)
        assert len(stored) == ciphertext_size(size)
        record = ObjectRecord("b", "k", size=size, sse={"m": "AES256", "s": salt.hex()})
        assert stored_size(record) == len(stored)
        for _ in range(20):
            first = rng.randrange(size)
            last = rng.randrange(first, size)
            assert _open(record, stored, first, last, rng) == body[first : last + 1]
            (unit,) = units(record)
            stored_first, stored_last, span = stored_range(unit, first, last)
            in_one = stored[stored_first : stored_last + 1]
            key = unit_key(BASE, salt)
            assert open_range(key, unit, span, in_one, last - first + 1) == body[first : last + 1]


def test_parts_are_units_with_their_own_salts() -> None:
    rng = random.Random(8)
    bodies = [rng.randbytes(CHUNK_BYTES + 5), b"", rng.randbytes(100)]
    salts = [new_salt() for _ in bodies]
    stored = b"".join(
        _seal(body, salt, n, rng)  # an empty part is one empty sealed chunk
        for n, (body, salt) in enumerate(zip(bodies, salts, strict=True), start=1)
    )
    parts = tuple(
        PartInfo(n, len(body), "", {}, salt.hex())
        for n, (body, salt) in enumerate(zip(bodies, salts, strict=True), start=1)
    )
    record = ObjectRecord("b", "k", size=sum(map(len, bodies)), parts=parts, sse={"m": "AES256"})
    assert [u.plain_size for u in units(record)] == [len(b) for b in bodies]
    assert stored_size(record) == ciphertext_size(len(bodies[0])) + 16 + ciphertext_size(100)
    whole = b"".join(bodies)
    for first, last in (
        (0, len(whole) - 1),
        (CHUNK_BYTES, CHUNK_BYTES + 10),
        (len(whole) - 3, len(whole) - 1),
    ):
        assert _open(record, stored, first, last, rng) == whole[first : last + 1]


def test_a_unit_does_not_open_under_another_salt_or_label() -> None:
    rng = random.Random(9)
    body = rng.randbytes(1000)
    salt = new_salt()
    stored = _seal(body, salt, 0, rng)
    moved = ObjectRecord("b", "k", size=1000, sse={"m": "AES256", "s": new_salt().hex()})
    with pytest.raises(SseCorruptError):
        _open(moved, stored, 0, 999, rng)
    with pytest.raises(SseCorruptError):  # cut short
        _open(
            ObjectRecord("b", "k", size=1000, sse={"m": "AES256", "s": salt.hex()}),
            stored[:-1],
            0,
            999,
            rng,
        )


class _FakeKeys:
    """A key service that wraps by prefixing (pure logic only)."""

    def __init__(self) -> None:
        self.generated: list[tuple[str, dict[str, str]]] = []
        self.unwrapped = 0

    async def generate_data_key(self, key_ref: str, context: Any) -> tuple[bytes, str]:
        self.generated.append((key_ref, dict(context)))
        return BASE, f"v1:{key_ref}:1:wrapped"

    async def decrypt_data_key(self, wrapped: str, context: Any) -> bytes:
        self.unwrapped += 1
        return BASE


def test_modes_keys_and_customer_checks() -> None:
    service = _FakeKeys()
    keys = ObjectKeys(service)

    async def run() -> None:
        sse, key = await keys.new(SseSpec("aws:kms", "alias/k", {"a": "b"}), "bkt", "obj")
        assert key == BASE and sse["k"] == "alias/k"
        assert service.generated[-1] == (
            "alias/k",
            {"a": "b", "aws:s3:arn": "arn:aws:s3:::bkt/obj"},
        )
        assert await keys.open(sse, b"") == BASE
        with pytest.raises(SseNotApplicableError):
            await keys.open(sse, b"k" * 32)
        customer = b"c" * 32
        sse_c, key_c = await keys.new(SseSpec("SSE-C", customer_key=customer), "bkt", "obj")
        assert key_c == customer and customer.hex() not in str(sse_c)
        assert await keys.open(sse_c, customer) == customer
        with pytest.raises(SseKeyRequiredError):
            await keys.open(sse_c, b"")
        with pytest.raises(SseKeyMismatchError):
            await keys.open(sse_c, b"d" * 32)
        assert await keys.open(None, b"") == b""
        with pytest.raises(SseKmsError):
            await ObjectKeys(None).new(SseSpec("AES256"), "bkt", "obj")

    asyncio.run(run())


def test_opened_keys_are_kept_but_never_a_customers() -> None:
    service = _FakeKeys()
    keys = ObjectKeys(service)
    salt = new_salt()

    async def run() -> None:
        sse, _ = await keys.new(SseSpec("AES256"), "bkt", "obj")
        for _ in range(3):
            assert await keys.open(sse, b"") == BASE
        assert service.unwrapped == 1  # the wrapped key opened once, then kept
        other_context = {**sse, "c": {**sse["c"], "x": "y"}}
        await keys.open(other_context, b"")
        assert service.unwrapped == 2  # a key is kept for its context only
        assert keys.unit_key(sse, BASE, salt) == unit_key(BASE, salt)
        customer = b"c" * 32
        sse_c, _ = await keys.new(SseSpec("SSE-C", customer_key=customer), "bkt", "obj")
        assert keys.unit_key(sse_c, customer, salt) == unit_key(customer, salt)
        kept = keys._unit_keys
        assert (BASE, salt) in kept and all(base != customer for base, _ in kept)

    asyncio.run(run())


def test_copies_share_sealed_entries_only_under_the_same_sealing() -> None:
    s3 = {"m": "AES256"}
    kms = {"m": "aws:kms", "k": "alias/a"}
    assert same_sealing(None, SseSpec())
    assert same_sealing(s3, SseSpec("AES256"))
    assert same_sealing(kms, SseSpec("aws:kms", "alias/a"))
    assert not same_sealing(kms, SseSpec("aws:kms", "alias/b"))
    assert not same_sealing(s3, SseSpec())
    assert not same_sealing(None, SseSpec("AES256"))
    assert not same_sealing(s3, SseSpec("aws:kms"))
