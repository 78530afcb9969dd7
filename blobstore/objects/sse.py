"""Server-side encryption's data format: an object's (or a part's) bytes encrypted in
chunks under its own data key, so a range read decrypts only the chunks it touches.

- **Chunks**: the plaintext is cut into chunks of `CHUNK_BYTES` (64 KiB; the last may be
  shorter, and an empty body is one empty chunk). Each is sealed with AES-256-GCM:
  ciphertext of the same length, then a 16-byte tag. Stored size = plaintext size +
  16 x chunks (`ciphertext_size`); the catalog keeps the plaintext size and ETag.
- **Nonces**: 96 bits, a random 4-byte prefix chosen per object or part, then the chunk's
  index (8 bytes). A data key encrypts one object or part, so no nonce repeats under it.
- **Associated data** binds each chunk to its place: the caller's label (the object's
  identity and part number), the chunk's index, and whether it is the last. Chunks
  swapped, dropped, moved to another object or cut at the end do not open
  (`SseCorruptError`), and a truncated object is told from a whole one.
- **Ranges**: `chunk_span` maps plaintext bytes first..last to the chunks holding them
  and their ciphertext bytes; `decrypt_range` opens those chunks and cuts the bytes out.

The data key itself never is stored in the clear: it is wrapped by the key service
(blobstore/kms) or, for SSE-C, not stored at all (only a salted HMAC of the
customer's key, to check the key given on reads).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from dataclasses import dataclass

import numpy
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

CHUNK_BYTES = 64 * 1024
TAG_BYTES = 16
KEY_BYTES = 32
NONCE_PREFIX_BYTES = 4
SALT_BYTES = 16
_UNIT_INFO = b"blobstore-sse-unit-v1"
_NONCE_COUNTER = struct.Struct(">Q")
_AAD = struct.Struct(">QB")


class SseCorruptError(Exception):
    """A chunk that does not open: tampered, misplaced, truncated, or the wrong key."""


def chunk_count(plain_size: int) -> int:
    assert plain_size >= 0, plain_size
    return max(1, -(-plain_size // CHUNK_BYTES))


def ciphertext_size(plain_size: int) -> int:
    return plain_size + TAG_BYTES * chunk_count(plain_size)


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    """The chunks first_chunk..last_chunk, stored at cipher_first..cipher_last, and where
    the bytes asked for start in the first chunk's plaintext."""

    first_chunk: int
    last_chunk: int
    cipher_first: int
    cipher_last: int
    skip: int


def chunk_span(plain_size: int, first: int, last: int) -> ChunkSpan:
    """Which stored bytes hold plaintext bytes first..last (inclusive, within the size)."""
    assert 0 <= first <= last < plain_size, (first, last, plain_size)
    first_chunk, last_chunk = first // CHUNK_BYTES, last // CHUNK_BYTES
    stored = CHUNK_BYTES + TAG_BYTES
    cipher_last = min((last_chunk + 1) * stored, ciphertext_size(plain_size)) - 1
    return ChunkSpan(
        first_chunk,
        last_chunk,
        first_chunk * stored,
        cipher_last,
        first - first_chunk * CHUNK_BYTES,
    )


def new_data_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def new_nonce_prefix() -> bytes:
    return secrets.token_bytes(NONCE_PREFIX_BYTES)


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def unit_key(base_key: bytes, salt: bytes) -> bytes:
    """The key one object or part is sealed with: HKDF-SHA256 of the object's base key
    (its data key, or the customer's key) and the unit's own random salt, so no two
    units share a key, whatever their nonces."""
    assert len(salt) == SALT_BYTES, len(salt)
    return HKDF(hashes.SHA256(), KEY_BYTES, salt, _UNIT_INFO).derive(base_key)


def _nonce(prefix: bytes, index: int) -> bytes:
    return prefix + _NONCE_COUNTER.pack(index)


def _aad(label: bytes, index: int, last: bool) -> bytes:
    return label + _AAD.pack(index, 1 if last else 0)


class ChunkEncryptor:
    """Encrypts a body fed in pieces of any size; yields whole sealed chunks as they fill,
    and the last (possibly short or empty) at `finish`."""

    def __init__(self, data_key: bytes, nonce_prefix: bytes, label: bytes) -> None:
        assert len(data_key) == KEY_BYTES and len(nonce_prefix) == NONCE_PREFIX_BYTES
        self._aead = AESGCM(data_key)
        self._prefix = nonce_prefix
        self._label = label
        self._pending = bytearray()
        self._index = 0
        self.plain_bytes = 0

    def feed(self, piece: bytes | memoryview) -> list[bytes]:
        """Sealed chunks completed by `piece`. A full chunk is held back until more bytes
        come, since only `finish` knows which chunk is the last. Whole chunks are sealed
        straight from `piece`: only a chunk cut across pieces is copied."""
        view = memoryview(piece)
        self.plain_bytes += len(view)
        pending = self._pending
        sealed: list[bytes] = []
        if pending:
            take = min(len(view), CHUNK_BYTES - len(pending))
            pending += view[:take]
            view = view[take:]
            if not view:
                return sealed  # full or not, more may come
            sealed.append(self._seal(bytes(pending), last=False))
            pending.clear()
        while len(view) > CHUNK_BYTES:
            sealed.append(self._seal(view[:CHUNK_BYTES], last=False))
            view = view[CHUNK_BYTES:]
        pending += view
        return sealed

    def finish(self) -> bytes:
        """The last chunk (an empty body's only one)."""
        chunk = self._seal(bytes(self._pending), last=True)
        self._pending.clear()
        return chunk

    def _seal(self, plain: bytes | memoryview, last: bool) -> bytes:
        sealed = self._aead.encrypt(
            _nonce(self._prefix, self._index), plain, _aad(self._label, self._index, last)
        )
        self._index += 1
        return sealed


def encrypt(data_key: bytes, nonce_prefix: bytes, label: bytes, plain: bytes) -> bytes:
    """A whole body, sealed (`ChunkEncryptor` in one call)."""
    encryptor = ChunkEncryptor(data_key, nonce_prefix, label)
    return b"".join([*encryptor.feed(plain), encryptor.finish()])


def decrypt_range(
    data_key: bytes,
    nonce_prefix: bytes,
    label: bytes,
    plain_size: int,
    span: ChunkSpan,
    stored: bytes | memoryview,
    length: int,
) -> bytes:
    """Plaintext bytes of `span` (its stored bytes in `stored`), `length` of them from
    `span.skip` on; SseCorruptError when a chunk does not open."""
    aead = AESGCM(data_key)
    view = memoryview(stored)
    stride = CHUNK_BYTES + TAG_BYTES
    last_index = chunk_count(plain_size) - 1
    out = []
    for offset, index in zip(
        range(0, len(view), stride), range(span.first_chunk, span.last_chunk + 1), strict=True
    ):
        try:
            out.append(
                aead.decrypt(
                    _nonce(nonce_prefix, index),
                    view[offset : offset + stride],
                    _aad(label, index, index == last_index),
                )
            )
        except InvalidTag:
            raise SseCorruptError(
                f"chunk {index} does not open (tampered, moved or wrong key)"
            ) from None
    return b"".join(out)[span.skip : span.skip + length]


class ChunkDecryptor:
    """Opens the stored bytes of `span` fed in pieces of any size, yielding plaintext as
    each chunk completes: `length` bytes from `span.skip` on, no more."""

    def __init__(
        self,
        data_key: bytes,
        nonce_prefix: bytes,
        label: bytes,
        plain_size: int,
        span: ChunkSpan,
        length: int,
    ) -> None:
        self._aead = AESGCM(data_key)
        self._prefix = nonce_prefix
        self._label = label
        self._last_index = chunk_count(plain_size) - 1
        self._index = span.first_chunk
        self._end_index = span.last_chunk
        self._skip = span.skip
        self._remaining = length
        self._pending = bytearray()

    def feed(self, piece: bytes | memoryview) -> memoryview:
        """Plaintext of the chunks `piece` completes, in one buffer (empty when it
        completes none). Whole chunks are opened straight from `piece` into that buffer:
        only a chunk cut across pieces is copied, and no chunk's plaintext is copied."""
        stride = CHUNK_BYTES + TAG_BYTES
        view = memoryview(piece)
        pending = self._pending
        chunks: list[bytes | memoryview] = []
        room = self._end_index - self._index + 1  # chunks of the span still to open
        if pending:
            take = min(len(view), stride - len(pending))
            pending += view[:take]
            view = view[take:]
            if len(pending) < stride or room <= 0:
                return memoryview(b"")
            chunks.append(bytes(pending))
            pending.clear()
        while len(view) >= stride and len(chunks) < room:
            chunks.append(view[:stride])
            view = view[stride:]
        pending += view
        return self._open_whole(chunks)

    def finish(self) -> bytes:
        """The span's last chunk (stored shorter than a full one when it ends the unit);
        SseCorruptError when bytes are missing."""
        tail = self._open(bytes(self._pending)) if self._index <= self._end_index else b""
        self._pending.clear()
        if self._remaining or self._index <= self._end_index:
            raise SseCorruptError(f"encrypted bytes end short of chunk {self._index}")
        return tail

    def _open_whole(self, chunks: list[bytes | memoryview]) -> memoryview:
        """Whole stored chunks opened into one fresh buffer, cut to what is asked."""
        if not chunks:
            return memoryview(b"")
        plain = numpy.empty(CHUNK_BYTES * len(chunks), numpy.uint8).data  # not zeroed
        # The per-chunk loop, inlined: at 256 chunks per 16 MiB its calls cost what the
        # cipher does.
        decrypt_into, prefix, label = self._aead.decrypt_into, self._prefix, self._label
        last_index = self._last_index
        for offset, sealed in zip(range(0, len(plain), CHUNK_BYTES), chunks, strict=True):
            index = self._index
            try:
                decrypt_into(
                    prefix + _NONCE_COUNTER.pack(index),
                    sealed,
                    label + _AAD.pack(index, index == last_index),
                    plain[offset : offset + CHUNK_BYTES],
                )
            except InvalidTag:
                raise self._corrupt() from None
            self._index = index + 1
        return self._cut(plain)

    def _open(self, sealed: bytes | memoryview) -> bytes:
        """The span's last chunk (short, or empty for an empty unit), opened as it is."""
        nonce, aad = self._next()
        try:
            plain = self._aead.decrypt(nonce, sealed, aad)
        except InvalidTag:
            raise self._corrupt() from None
        self._index += 1
        cut = plain[self._skip : self._skip + self._remaining]
        self._skip = 0
        self._remaining -= len(cut)
        return cut

    def _next(self) -> tuple[bytes, bytes]:
        """The nonce and associated data of the next chunk to open."""
        index = self._index
        return _nonce(self._prefix, index), _aad(self._label, index, index == self._last_index)

    def _corrupt(self) -> SseCorruptError:
        return SseCorruptError(f"chunk {self._index} does not open (tampered, moved or wrong key)")

    def _cut(self, plain: memoryview) -> memoryview:
        """`plain` less the bytes before the span's start and after its length."""
        plain = plain[self._skip : self._skip + self._remaining]
        self._skip = 0
        self._remaining -= len(plain)
        return plain


def customer_key_check(customer_key: bytes, salt: bytes) -> str:
    """What an SSE-C object keeps to check the key given on reads: a salted HMAC, not the
    key, nor its MD5 (which a client sends, but which is no secret)."""
    return hmac.new(salt, customer_key, hashlib.sha256).hexdigest()
