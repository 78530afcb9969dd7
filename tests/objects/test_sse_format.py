"""Server-side encryption's chunked format (blobstore.objects.sse), pure: sizes, random
ranges decrypted from only their chunks, bodies fed in any pieces, and every kind of
tampering refused."""

from __future__ import annotations

import random

import pytest

from blobstore.objects.sse import (
    CHUNK_BYTES,
    TAG_BYTES,
    ChunkDecryptor,
    ChunkEncryptor,
    SseCorruptError,
    chunk_count,
    chunk_span,
    ciphertext_size,
    customer_key_check,
    decrypt_range,
    encrypt,
    new_data_key,
    new_nonce_prefix,
)

LABEL = b"bucket/key@version#part1"
SIZES = [0, 1, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES + 17]


@pytest.mark.parametrize("size", SIZES)
def test_sizes_and_whole_round_trip(size: int) -> None:
    key, prefix = new_data_key(), new_nonce_prefix()
    plain = random.Random(size).randbytes(size)
    sealed = encrypt(key, prefix, LABEL, plain)
    assert len(sealed) == ciphertext_size(size) == size + TAG_BYTES * chunk_count(size)
    assert plain not in sealed or size < 16  # a byte or two may turn up by chance
    if size:
        span = chunk_span(size, 0, size - 1)
        stored = sealed[span.cipher_first : span.cipher_last + 1]
        assert decrypt_range(key, prefix, LABEL, size, span, stored, size) == plain


def test_random_ranges_read_only_their_chunks() -> None:
    rng = random.Random(7)
    size = 5 * CHUNK_BYTES + 1234
    key, prefix = new_data_key(), new_nonce_prefix()
    plain = rng.randbytes(size)
    sealed = encrypt(key, prefix, LABEL, plain)
    for _ in range(200):
        first = rng.randrange(size)
        last = rng.randrange(first, min(size, first + 3 * CHUNK_BYTES))
        span = chunk_span(size, first, last)
        assert span.last_chunk - span.first_chunk <= 3
        stored = sealed[span.cipher_first : span.cipher_last + 1]
        got = decrypt_range(key, prefix, LABEL, size, span, stored, last - first + 1)
        assert got == plain[first : last + 1], (first, last)


def test_pieces_of_any_size_make_the_same_ciphertext() -> None:
    rng = random.Random(3)
    plain = rng.randbytes(4 * CHUNK_BYTES + 99)
    key, prefix = new_data_key(), new_nonce_prefix()
    encryptor = ChunkEncryptor(key, prefix, LABEL)
    out, at = [], 0
    while at < len(plain):
        n = rng.choice([1, 100, CHUNK_BYTES - 1, CHUNK_BYTES, 3 * CHUNK_BYTES])
        out += encryptor.feed(memoryview(plain)[at : at + n])
        at += n
    out.append(encryptor.finish())
    assert b"".join(out) == encrypt(key, prefix, LABEL, plain)
    assert encryptor.plain_bytes == len(plain)


def test_tampered_moved_truncated_or_rekeyed_chunks_do_not_open() -> None:
    size = 3 * CHUNK_BYTES
    key, prefix = new_data_key(), new_nonce_prefix()
    sealed = bytearray(encrypt(key, prefix, LABEL, bytes(size)))
    whole = chunk_span(size, 0, size - 1)

    def opens(
        stored: bytes, *, k: bytes = key, label: bytes = LABEL, plain_size: int = size
    ) -> bool:
        """Whether `stored` opens, in one piece and streamed (whole chunks opened into
        one buffer, and one chunk cut across pieces): both must agree."""
        span = chunk_span(plain_size, 0, plain_size - 1)
        try:
            decrypt_range(k, prefix, label, plain_size, span, stored, plain_size)
        except SseCorruptError:
            in_one = False
        else:
            in_one = True
        opener = ChunkDecryptor(k, prefix, label, plain_size, span, plain_size)
        try:
            cut = CHUNK_BYTES + TAG_BYTES + 7
            streamed = b"".join([opener.feed(stored[:cut]), opener.feed(stored[cut:])])
            streamed += opener.finish()
        except SseCorruptError:
            assert not in_one
            return False
        assert in_one and streamed == bytes(plain_size)
        return True

    assert opens(bytes(sealed))
    flipped = bytearray(sealed)
    flipped[CHUNK_BYTES + 5] ^= 1
    assert not opens(bytes(flipped))
    stride = CHUNK_BYTES + TAG_BYTES
    swapped = sealed[stride : 2 * stride] + sealed[:stride] + sealed[2 * stride :]
    assert not opens(bytes(swapped))
    assert not opens(bytes(sealed), k=new_data_key())
    assert not opens(bytes(sealed), label=b"another object")
    # The first two chunks alone, read as a whole object of two chunks: the second is
    # not marked last, so a cut-off object is refused.
    assert not opens(bytes(sealed[: 2 * stride]), plain_size=2 * CHUNK_BYTES)
    assert whole.cipher_last == len(sealed) - 1


def test_a_customer_key_is_kept_as_a_salted_check() -> None:
    key, salt = new_data_key(), b"s" * 16
    check = customer_key_check(key, salt)
    assert check == customer_key_check(key, salt)
    assert check != customer_key_check(new_data_key(), salt)
    assert check != customer_key_check(key, b"t" * 16)
    assert key.hex() not in check
