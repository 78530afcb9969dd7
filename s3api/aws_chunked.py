"""Request bodies: the aws-chunked decoder and the verified payload reader.

aws-chunked framing (x-amz-content-sha256 is one of the STREAMING-* modes)::

    <hex size>[;chunk-signature=<64 hex>]\\r\\n<size bytes>\\r\\n      (repeated)
    0[;chunk-signature=<64 hex>]\\r\\n                                (final chunk)
    [<name>:<value>\\r\\n ...][x-amz-trailer-signature:<64 hex>\\r\\n]   (trailer)
    \\r\\n

Signed chunks chain: each chunk's signature covers the previous one, starting from the
request's seed signature, so chunks cannot be dropped, reordered or altered. The trailer
of STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER is signed the same way.

Decoded data is handed out as it arrives, before the enclosing chunk's signature (or the
body's checksum) is known to be good. Every check runs before the iteration ends: a
caller that commits only when the iterator finishes normally never commits bad bytes.
Parsing works on whole received buffers with find(); no per-byte Python loops. The
per-byte work runs off the event loop for a large body: `PayloadReader` hands the MD5,
the checksum, a declared SHA-256 and the signed chunks' SHA-256 and signature checks
(deferred by the decoder, chained on the signatures as provided) to a thread, a batch
at a time (`OffLoopHashing`), and awaits all of it before its iteration ends.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import Executor

from s3api.checksums import (
    BodyDigest,
    BodyHasher,
    OffLoopHashing,
    RequestChecksums,
    shared_hash_executor,
)
from s3api.errors import S3Error
from s3api.limits import PUT_OBJECT_SIZE_MAX
from s3api.sigv4 import (
    EMPTY_SHA256,
    PAYLOAD_SHA256,
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED_PAYLOAD,
    AuthContext,
)

__all__ = [
    "CHUNK_HEADER_BYTES_MAX",
    "CHUNK_SIZE_MAX",
    "SIGNED_CHUNK_SIZE_MIN",
    "ChunkedDecoder",
    "PayloadReader",
    "TRAILER_BYTES_MAX",
    "TRAILER_HEADERS_MAX",
    "parse_decoded_content_length",
    "strip_aws_chunked",
]

CHUNK_HEADER_BYTES_MAX = 4096
CHUNK_SIZE_MAX = 64 << 20
SIGNED_CHUNK_SIZE_MIN = 8192  # every signed chunk but the last data chunk, as S3 requires
TRAILER_BYTES_MAX = 16 << 10
TRAILER_HEADERS_MAX = 16
_SIZE_HEX_DIGITS_MAX = 16
_SIGNATURE_PREFIX = b"chunk-signature="
_TRAILER_SIGNATURE = "x-amz-trailer-signature"
_HEX = frozenset(b"0123456789abcdefABCDEF")

_HEADER = 0  # reading a chunk header line
_DATA = 1  # inside a chunk's data
_DATA_END = 2  # the CRLF after a chunk's data
_TRAILER = 3  # reading trailer lines after the final chunk
_DONE = 4


def _malformed(detail: str) -> S3Error:
    return S3Error("InvalidRequest", f"Malformed aws-chunked body: {detail}")


def parse_decoded_content_length(headers: Mapping[str, str]) -> int | None:
    """x-amz-decoded-content-length as an int (None when absent) -> InvalidArgument if bad."""
    value = headers.get("x-amz-decoded-content-length")
    if value is None:
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise S3Error(
            "InvalidArgument",
            "x-amz-decoded-content-length is not a valid length",
            ArgumentName="x-amz-decoded-content-length",
            ArgumentValue=value,
        )
    return int(text)


def strip_aws_chunked(content_encoding: str | None) -> str | None:
    """Content-Encoding to store: S3 drops 'aws-chunked' from the list (None if nothing
    left) and keeps the rest as sent (`deflate, gzip` stays `deflate, gzip`)."""
    if content_encoding is None:
        return None
    codings = content_encoding.split(",")
    kept = [c for c in codings if c.strip().lower() != "aws-chunked"]
    if len(kept) == len(codings):
        return content_encoding if content_encoding.strip() else None
    return ",".join(kept).strip(" \t,") or None


def _checked_signature(auth: AuthContext | None, string_to_sign: bytes, provided: bytes) -> bytes:
    """The signature of string_to_sign -> SignatureDoesNotMatch unless it is `provided`."""
    assert auth is not None
    expected = hmac.digest(auth.signing_key, string_to_sign, "sha256").hex().encode("ascii")
    if not hmac.compare_digest(expected, provided):
        raise S3Error(
            "SignatureDoesNotMatch",
            AWSAccessKeyId=auth.access_key,
            StringToSign=string_to_sign.decode("ascii"),
            SignatureProvided=provided.decode("ascii", "replace"),
        )
    return expected


def _check_chunk(
    auth: AuthContext | None, chunk_hash: hashlib._Hash, string_to_sign_head: bytes, provided: bytes
) -> None:
    """A deferred chunk check (`ChunkedDecoder.take_deferred`), once its data is hashed."""
    string_to_sign = string_to_sign_head + chunk_hash.hexdigest().encode("ascii")
    _checked_signature(auth, string_to_sign, provided)


class ChunkedDecoder:
    """Incremental aws-chunked decoder: feed() received buffers, finish() at end of body.

    mode is the request's x-amz-content-sha256 streaming value; signed modes need auth
    (the seed signature and signing key). trailer_names are the names declared in
    x-amz-trailer (lowercase): the trailer must carry exactly those. decoded_length is
    x-amz-decoded-content-length when given; size_max bounds the decoded size regardless.
    """

    __slots__ = (
        "_auth",
        "_signed",
        "_expect_trailer_signature",
        "_trailer_names",
        "_decoded_length",
        "_size_max",
        "_state",
        "_line",
        "_remaining",
        "_chunk_hash",
        "_chunk_signature",
        "_previous_signature",
        "_crlf_seen",
        "_trailer_lines",
        "_trailer_bytes",
        "_short_chunk_size",
        "_chunk_count",
        "_deferred",
        "decoded_size",
        "trailers",
    )

    def __init__(
        self,
        mode: str,
        *,
        auth: AuthContext | None,
        decoded_length: int | None,
        trailer_names: Iterable[str] = (),
        size_max: int = PUT_OBJECT_SIZE_MAX,
        defer_chunk_checks: bool = False,
    ) -> None:
        assert mode in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER), (
            mode
        )
        self._signed = mode != STREAMING_UNSIGNED_TRAILER
        if self._signed and auth is None:
            raise S3Error("AccessDenied", "Signed streaming payloads need a signed request")
        self._auth = auth
        self._expect_trailer_signature = mode == STREAMING_SIGNED_TRAILER
        self._trailer_names = tuple(n.strip().lower() for n in trailer_names if n.strip())
        if mode == STREAMING_SIGNED and self._trailer_names:
            raise S3Error("InvalidRequest", f"x-amz-trailer is not allowed with {STREAMING_SIGNED}")
        if decoded_length is not None and decoded_length > size_max:
            raise S3Error("EntityTooLarge", ProposedSize=decoded_length, MaxSizeAllowed=size_max)
        self._decoded_length = decoded_length
        self._size_max = size_max
        self._state = _HEADER
        self._line = bytearray()
        self._remaining = 0
        self._chunk_hash = hashlib.sha256()
        self._chunk_signature = b""
        self._previous_signature = auth.seed_signature.encode("ascii") if auth else b""
        self._crlf_seen = 0
        self._trailer_lines: list[tuple[str, str]] = []
        self._trailer_bytes = 0
        self._short_chunk_size = 0
        self._chunk_count = 0
        self._deferred: list[Callable[[], object]] | None = [] if defer_chunk_checks else None
        self.decoded_size = 0
        self.trailers: dict[str, str] = {}

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def feed(self, data: bytes) -> list[bytes]:
        """Decode one received buffer; returns the data pieces it held (maybe none)."""
        out: list[bytes] = []
        position = 0
        end = len(data)
        while position < end:
            state = self._state
            if state == _DATA:
                take = min(self._remaining, end - position)
                piece = data if take == end else data[position : position + take]
                if self._signed:
                    self._hash_chunk_data(piece)
                out.append(piece)
                position += take
                self._remaining -= take
                if self._remaining == 0:
                    if self._signed:
                        self._end_signed_chunk()
                    self._state = _DATA_END
                    self._crlf_seen = 0
            elif state == _DATA_END:
                position = self._read_data_end(data, position)
            elif state == _DONE:
                raise _malformed("data after the end of the body")
            else:
                position = self._read_line(data, position)
        return out

    def _read_data_end(self, data: bytes, position: int) -> int:
        """Read the CRLF after a chunk's data from `data[position:]`; returns the position
        after what it read."""
        end = len(data)
        while self._crlf_seen < 2 and position < end:
            if data[position] != b"\r\n"[self._crlf_seen]:
                raise _malformed("chunk data is not followed by CRLF")
            self._crlf_seen += 1
            position += 1
        if self._crlf_seen == 2:
            self._state = _HEADER
        return position

    def _read_line(self, data: bytes, position: int) -> int:
        """Read a chunk header or trailer line from `data[position:]` (keeping a partial one
        for the next buffer) and act on it; returns the position after what it read."""
        header = self._state == _HEADER
        limit = CHUNK_HEADER_BYTES_MAX if header else TRAILER_BYTES_MAX
        newline = data.find(b"\n", position)
        if newline < 0:
            self._line += data[position:]
            if len(self._line) > limit:
                raise _malformed("chunk header or trailer line too long")
            return len(data)
        line = bytes(self._line) + data[position : newline + 1]
        self._line.clear()
        if len(line) > limit:
            raise _malformed("chunk header or trailer line too long")
        if len(line) < 2 or line[-2] != 0x0D:
            raise _malformed("line does not end with CRLF")
        if header:
            self._chunk_header(line[:-2])
        else:
            self._trailer_line(line[:-2])
        return newline + 1

    def finish(self) -> None:
        """The body ended: anything short of a complete encoding is IncompleteBody."""
        if self._state != _DONE:
            raise S3Error("IncompleteBody", "The aws-chunked body ended before its final chunk")

    async def decode(self, source: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """Decoded data of source (the raw body); raises before ending if anything is wrong."""
        async for data in source:
            if data:
                for piece in self.feed(data if isinstance(data, bytes) else bytes(data)):
                    yield piece
        self.finish()

    def _chunk_header(self, line: bytes) -> None:
        size_text, _, extensions = line.partition(b";")
        if not size_text or len(size_text) > _SIZE_HEX_DIGITS_MAX or not _HEX.issuperset(size_text):
            raise _malformed("chunk size is not hexadecimal")
        size = int(size_text, 16)
        if size > CHUNK_SIZE_MAX:
            raise _malformed(f"chunk of {size} bytes exceeds {CHUNK_SIZE_MAX}")
        if self._signed:
            if not extensions.startswith(_SIGNATURE_PREFIX):
                raise S3Error("SignatureDoesNotMatch", "A chunk signature is missing")
            signature = extensions[len(_SIGNATURE_PREFIX) :]
            if len(signature) != 64 or not _HEX.issuperset(signature):
                raise S3Error("SignatureDoesNotMatch", "A chunk signature is malformed")
            self._chunk_signature = signature.lower()
            self._chunk_hash = hashlib.sha256()
            # Signed chunks cost an HMAC each: only the last data chunk may be small.
            self._chunk_count += 1
            if size and self._short_chunk_size:
                raise S3Error(
                    "InvalidChunkSizeError",
                    Chunk=self._chunk_count - 1,
                    BadChunkSize=self._short_chunk_size,
                )
            if 0 < size < SIGNED_CHUNK_SIZE_MIN:
                self._short_chunk_size = size
        new_size = self.decoded_size + size
        if new_size > self._size_max:
            raise S3Error("EntityTooLarge", ProposedSize=new_size, MaxSizeAllowed=self._size_max)
        if self._decoded_length is not None and new_size > self._decoded_length:
            raise S3Error(
                "InvalidRequest", "The aws-chunked body is longer than x-amz-decoded-content-length"
            )
        self.decoded_size = new_size
        if size == 0:
            if self._signed:
                self._verify_chunk(EMPTY_SHA256)
            self._state = _TRAILER
        else:
            self._remaining = size
            self._state = _DATA

    def _string_to_sign(self, kind: str, *hashes: str) -> bytes:
        auth = self._auth
        assert auth is not None
        return "\n".join(
            (
                kind,
                auth.timestamp,
                auth.scope,
                self._previous_signature.decode("ascii"),
                *hashes,
            )
        ).encode("ascii")

    def _check_signature(self, string_to_sign: bytes, provided: bytes) -> None:
        self._previous_signature = _checked_signature(self._auth, string_to_sign, provided)

    def _verify_chunk(self, data_hash: str) -> None:
        string_to_sign = self._string_to_sign("AWS4-HMAC-SHA256-PAYLOAD", EMPTY_SHA256, data_hash)
        self._check_signature(string_to_sign, self._chunk_signature)

    def take_deferred(self) -> list[Callable[[], object]]:
        """With defer_chunk_checks: the work fed buffers left to do, in order (hashing
        signed chunks' data, then checking each chunk's signature; a check raises
        SignatureDoesNotMatch). The caller runs all of it, in order, before it trusts
        the body; anywhere (a thread will do), as it touches no decoder state."""
        assert self._deferred is not None, "chunk checks are not deferred"
        work, self._deferred = self._deferred, []
        return work

    def _hash_chunk_data(self, piece: bytes) -> None:
        if self._deferred is None:
            self._chunk_hash.update(piece)
        else:
            self._deferred.append(functools.partial(self._chunk_hash.update, piece))

    def _end_signed_chunk(self) -> None:
        if self._deferred is None:
            self._verify_chunk(self._chunk_hash.hexdigest())
            return
        # The next chunk chains on this signature as provided: if it is not the one
        # expected, this chunk's deferred check fails, and the body with it.
        check = functools.partial(
            _check_chunk,
            self._auth,
            self._chunk_hash,
            # all of the string to sign but the chunk's hash, which ends it
            self._string_to_sign("AWS4-HMAC-SHA256-PAYLOAD", EMPTY_SHA256, ""),
            self._chunk_signature,
        )
        self._deferred.append(check)
        self._previous_signature = self._chunk_signature

    def _trailer_line(self, line: bytes) -> None:
        self._trailer_bytes += len(line) + 2
        if self._trailer_bytes > TRAILER_BYTES_MAX:
            raise _malformed("trailer too large")
        if line:
            name, sep, value = line.partition(b":")
            if not sep:
                raise _malformed("trailer line without ':'")
            self._trailer_lines.append(
                (name.decode("latin-1").strip().lower(), value.decode("latin-1").strip())
            )
            if len(self._trailer_lines) > TRAILER_HEADERS_MAX + 1:
                raise _malformed("too many trailer headers")
            return
        self._end_trailer()

    def _end_trailer(self) -> None:
        lines = self._trailer_lines
        if self._expect_trailer_signature:
            if not lines or lines[-1][0] != _TRAILER_SIGNATURE:
                raise S3Error("SignatureDoesNotMatch", "The trailer signature is missing")
            provided = lines[-1][1].lower().encode("ascii", "replace")
            lines = lines[:-1]
            canonical = "".join(f"{name}:{value}\n" for name, value in lines).encode("latin-1")
            string_to_sign = self._string_to_sign(
                "AWS4-HMAC-SHA256-TRAILER", hashlib.sha256(canonical).hexdigest()
            )
            self._check_signature(string_to_sign, provided)
        elif lines and not self._trailer_names:
            raise _malformed("trailer present but no x-amz-trailer was declared")
        trailers: dict[str, str] = {}
        for name, value in lines:
            if name not in self._trailer_names or name in trailers:
                raise _malformed(f"unexpected trailer {name}")
            trailers[name] = value
        missing = [name for name in self._trailer_names if name not in trailers]
        if missing:
            raise S3Error("IncompleteBody", f"The trailer {missing[0]} was not received")
        if self._decoded_length is not None and self.decoded_size != self._decoded_length:
            raise S3Error(
                "IncompleteBody",
                "The aws-chunked body is shorter than x-amz-decoded-content-length",
            )
        self.trailers = trailers
        self._state = _DONE


class PayloadReader:
    """The body of a PUT-like request, decoded and verified as it streams.

    Picks the framing from the authenticated payload mode (aws-chunked for STREAMING-*,
    plain otherwise), hashes the decoded bytes (MD5 for the ETag, plus the checksum the
    request names) and, before the iteration ends, verifies everything: chunk and
    trailer signatures, the declared SHA-256, the length, Content-MD5 and
    x-amz-checksum-* (header or trailer). After a normal end, `digest` holds the result.

    headers is looked up with lowercase names (starlette Headers or a lowercase dict).
    extra_algorithms: checksums to compute although the request named none;
    default_algorithm: the one to compute when neither names any (`BodyHasher`).
    A large body is hashed in `hash_executor` (the process's shared pool by default), a
    batch at a time, while its pieces are handed on (`OffLoopHashing`); the iteration
    still ends only after every byte was hashed and checked.
    """

    __slots__ = (
        "_source",
        "_auth",
        "_mode",
        "_declared_hash",
        "_length",
        "_decoder",
        "_hasher",
        "_size_max",
        "_hash_executor",
        "digest",
        "expect",
    )

    def __init__(
        self,
        auth: AuthContext | None,
        headers: Mapping[str, str],
        source: AsyncIterable[bytes],
        *,
        size_max: int = PUT_OBJECT_SIZE_MAX,
        extra_algorithms: Iterable[str] = (),
        default_algorithm: str | None = None,
        hash_executor: Executor | None = None,
    ) -> None:
        self._source = source
        self._auth = auth
        self._size_max = size_max
        self._hash_executor = hash_executor or shared_hash_executor()
        self.expect = RequestChecksums.from_headers(headers)
        self._hasher = BodyHasher(
            self.expect, extra_algorithms=extra_algorithms, default_algorithm=default_algorithm
        )
        self.digest: BodyDigest | None = None
        if auth is not None:
            mode, declared = auth.payload_mode, auth.declared_payload_hash
        else:
            # Anonymous requests may still frame an unsigned trailer.
            value = (headers.get("x-amz-content-sha256") or "").strip()
            if value.startswith("STREAMING-") and value != STREAMING_UNSIGNED_TRAILER:
                raise S3Error("AccessDenied", "Signed streaming payloads need a signed request")
            mode = (
                STREAMING_UNSIGNED_TRAILER
                if value == STREAMING_UNSIGNED_TRAILER
                else UNSIGNED_PAYLOAD
            )
            declared = None
        self._mode = mode
        self._declared_hash = declared
        self._decoder: ChunkedDecoder | None = None
        if mode.startswith("STREAMING-"):
            trailer = headers.get("x-amz-trailer")
            self._decoder = ChunkedDecoder(
                mode,
                auth=auth,
                decoded_length=parse_decoded_content_length(headers),
                trailer_names=trailer.split(",") if trailer else (),
                size_max=size_max,
                defer_chunk_checks=True,
            )
            self._length = None
        else:
            self._length = _content_length(headers)
            if self._length is not None and self._length > size_max:
                raise S3Error("EntityTooLarge", ProposedSize=self._length, MaxSizeAllowed=size_max)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        hashing = OffLoopHashing((self._hasher.update,), self._hash_executor)
        decoder = self._decoder
        if decoder is not None:
            async for piece in decoder.decode(self._source):
                await hashing.update(piece, decoder.take_deferred())
                yield piece
            await hashing.flush(decoder.take_deferred())
            self.digest = self._hasher.finish(decoder.trailers)
            return
        sha256 = hashlib.sha256() if self._mode == PAYLOAD_SHA256 else None
        if sha256 is not None:
            hashing = OffLoopHashing((self._hasher.update, sha256.update), self._hash_executor)
        size = 0
        async for piece in self._source:
            if not piece:
                continue
            size += len(piece)
            if size > self._size_max:
                raise S3Error("EntityTooLarge", ProposedSize=size, MaxSizeAllowed=self._size_max)
            if self._length is not None and size > self._length:
                raise S3Error("InvalidRequest", "The body is longer than Content-Length")
            await hashing.update(piece)
            yield piece
        if self._length is not None and size != self._length:
            raise S3Error("IncompleteBody")
        await hashing.flush()
        if sha256 is not None and sha256.hexdigest() != self._declared_hash:
            raise S3Error(
                "XAmzContentSHA256Mismatch",
                ClientComputedContentSHA256=self._declared_hash or "",
                S3ComputedContentSHA256=sha256.hexdigest(),
            )
        self.digest = self._hasher.finish()

    @property
    def trailers(self) -> dict[str, str]:
        return self._decoder.trailers if self._decoder is not None else {}


def _content_length(headers: Mapping[str, str]) -> int | None:
    value = headers.get("content-length")
    if value is None:
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise S3Error("InvalidArgument", "Content-Length is not a valid length")
    return int(text)
