"""The bookie wire protocol, defined once for the server (`bookie/`) and its clients (`blobstore/`).

Frames
------
Every message, in both directions, is one frame::

    u32 frame_length      bytes after this field (header + body), <= FRAME_BYTES_MAX
    u8  protocol_version  PROTOCOL_VERSION; a bookie answers an unknown version with
                          BAD_VERSION and closes the connection
    u8  op                Op
    u16 flags_or_status   request: AddFlag / ReadFlag bits; response: Status
    u64 request_id        chosen by the client, echoed by the bookie (multiplexing)
    ... body              op-specific, see the *Request / *Response records below

Requests on one connection are pipelined; responses may come back in any order and are
matched by request id. A malformed frame (bad length, truncated, unknown op, undecodable
body) gets a BAD_REQUEST response when a request id could be read, then the connection is
closed; the server itself keeps running.

Entries
-------
The bytes a bookie stores for an entry are produced by the writer and opaque to the bookie
except for their header, which the bookie checks (ledger and entry id must match the
request, the digest must verify)::

    u64 ledger_id | u64 entry_id | i64 last_add_confirmed | u64 ledger_length | u32 crc32c | payload

`crc32c` covers the 32 header bytes before it and the payload (DESIGN.md guarantee 4).
`ledger_length` is the ledger's total payload length up to and including this entry.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import crc32c

PROTOCOL_VERSION = 1
FRAME_BYTES_MAX = 5 * 1024 * 1024
MASTER_KEY_BYTES = 20
# A frame carries a header, a master key and an entry header besides the payload.
ENTRY_PAYLOAD_BYTES_MAX = FRAME_BYTES_MAX - 4096
LONG_POLL_TIMEOUT_MS_MAX = 60_000
# Entry id used in READ_ENTRY to mean "the last entry this bookie holds for the ledger".
LAST_ENTRY = -1
NO_ENTRY = -1  # a LAC value meaning "nothing confirmed yet"

FRAME_LENGTH = struct.Struct(">I")
FRAME_HEADER = struct.Struct(">BBHQ")  # version, op, flags_or_status, request_id
FRAME_HEADER_BYTES = FRAME_HEADER.size

assert FRAME_BYTES_MAX > ENTRY_PAYLOAD_BYTES_MAX > 1 << 20, "a 1 MiB entry fits in one frame"


class Op(enum.IntEnum):
    ADD_ENTRY = 1
    READ_ENTRY = 2
    READ_LAC = 3
    WRITE_LAC = 4
    GET_BOOKIE_INFO = 5


class Status(enum.IntEnum):
    OK = 0
    NO_SUCH_LEDGER = 1
    NO_SUCH_ENTRY = 2
    FENCED = 3
    UNAUTHORIZED = 4
    READ_ONLY = 5
    TOO_LARGE = 6
    BAD_REQUEST = 7
    BAD_VERSION = 8
    BAD_DIGEST = 9
    TIMEOUT = 10  # a long poll ended without the LAC passing the previous value
    INTERNAL_ERROR = 11


# Status value -> name, for metric labels on the request paths (Status(value).name builds
# an enum member per call).
STATUS_NAMES = {int(status): status.name for status in Status}


class AddFlag(enum.IntFlag):
    NONE = 0
    RECOVERY_ADD = 1  # allowed on a fenced ledger: written by the recovery of that ledger


class ReadFlag(enum.IntFlag):
    NONE = 0
    FENCE = 1  # fence the ledger before reading (needs the master key)
    LONG_POLL = 2  # wait until the bookie's LAC passes previous_lac or timeout_ms passes


class ProtocolError(Exception):
    """A frame or body that does not follow this protocol."""


def master_key(password: bytes) -> bytes:
    """The key a writer presents with every add; BookKeeper's SHA1("ledger" + password)."""
    return hashlib.sha1(b"ledger" + password).digest()


# --------------------------------------------------------------------------- entries

ENTRY_HEADER = struct.Struct(">QQqQ")
ENTRY_DIGEST = struct.Struct(">I")
ENTRY_HEADER_BYTES = ENTRY_HEADER.size + ENTRY_DIGEST.size


# The stored bytes of an entry as separate buffers: its header and digest, then its
# payload's pieces, never copied into one (a transport writes them together).
EntryParts = tuple[bytes | memoryview, ...]


def encode_entry(
    ledger_id: int,
    entry_id: int,
    last_add_confirmed: int,
    ledger_length: int,
    pieces: Sequence[bytes | memoryview],
) -> EntryParts:
    """An entry's stored bytes as parts: header and digest, then the payload `pieces`
    as they are. Their concatenation is what `Entry.encode` gives."""
    header = ENTRY_HEADER.pack(ledger_id, entry_id, last_add_confirmed, ledger_length)
    digest = crc32c.crc32c(header)
    for piece in pieces:
        digest = crc32c.crc32c(piece, digest)
    return (header + ENTRY_DIGEST.pack(digest), *pieces)


@dataclass(frozen=True, slots=True)
class Entry:
    """An entry as the writer built it; `encode` gives the bytes bookies store."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    ledger_length: int
    payload: bytes | memoryview  # a view of the stored bytes when decoded

    def __post_init__(self) -> None:
        assert self.ledger_id >= 0, self.ledger_id
        assert self.entry_id >= 0, self.entry_id
        assert self.last_add_confirmed >= NO_ENTRY, self.last_add_confirmed
        assert self.last_add_confirmed < self.entry_id, (self.last_add_confirmed, self.entry_id)
        assert self.ledger_length >= len(self.payload), (self.ledger_length, len(self.payload))

    def encode(self) -> bytes:
        return b"".join(
            encode_entry(
                self.ledger_id,
                self.entry_id,
                self.last_add_confirmed,
                self.ledger_length,
                (self.payload,),
            )
        )

    @classmethod
    def decode(cls, buf: bytes | memoryview) -> Self:
        """Parse and verify stored entry bytes; raises CorruptEntryError on a bad digest.
        The payload is a view of `buf`, not a copy: `buf` must not change after (bytes,
        or a buffer no one writes again, as a READ_ENTRY answer's)."""
        if len(buf) < ENTRY_HEADER_BYTES:
            raise CorruptEntryError(f"entry of {len(buf)} bytes is shorter than its header")
        ledger_id, entry_id, lac, length = ENTRY_HEADER.unpack_from(buf, 0)
        digest, expected = _digests(buf)
        payload = memoryview(buf)[ENTRY_HEADER_BYTES:]
        if digest != expected:
            raise CorruptEntryError(
                f"digest mismatch ledger_id={ledger_id} entry_id={entry_id} "
                f"stored={digest:#010x} computed={expected:#010x}"
            )
        if lac >= entry_id or length < len(payload):
            raise CorruptEntryError(
                f"inconsistent entry header ledger_id={ledger_id} entry_id={entry_id}"
            )
        return cls(ledger_id, entry_id, lac, length, payload)


def entry_ids(buf: bytes | memoryview) -> tuple[int, int, int]:
    """(ledger_id, entry_id, last_add_confirmed) of stored entry bytes, without verifying."""
    if len(buf) < ENTRY_HEADER_BYTES:
        raise ProtocolError(f"entry of {len(buf)} bytes is shorter than its header")
    ledger_id, entry_id, lac, _ = ENTRY_HEADER.unpack_from(buf, 0)
    return ledger_id, entry_id, lac


def entry_digest(buf: bytes | memoryview) -> int:
    """The digest stored in entry bytes (CRC32C of the header before it and the payload),
    without verifying it."""
    if len(buf) < ENTRY_HEADER_BYTES:
        raise ProtocolError(f"entry of {len(buf)} bytes is shorter than its header")
    return _stored_digest(buf)


def verify_entry(buf: bytes | memoryview) -> bool:
    """True when the stored digest of entry bytes matches their content."""
    if len(buf) < ENTRY_HEADER_BYTES:
        return False
    stored, computed = _digests(buf)
    return stored == computed


def _stored_digest(buf: bytes | memoryview) -> int:
    (digest,) = ENTRY_DIGEST.unpack_from(buf, ENTRY_HEADER.size)
    return int(digest)


def _digests(buf: bytes | memoryview) -> tuple[int, int]:
    """(the digest stored in entry bytes at least a header long, the digest of their
    content: CRC32C of the header before it and the payload)."""
    view = memoryview(buf)
    computed = crc32c.crc32c(view[ENTRY_HEADER_BYTES:], crc32c.crc32c(view[: ENTRY_HEADER.size]))
    return _stored_digest(buf), int(computed)


class CorruptEntryError(Exception):
    """Stored entry bytes whose digest does not verify: read another replica."""


# --------------------------------------------------------------------------- bodies

_ADD = struct.Struct(f">QQ{MASTER_KEY_BYTES}s")
_READ = struct.Struct(f">Qq{MASTER_KEY_BYTES}sqI")
_LEDGER = struct.Struct(">Q")
_LEDGER_ENTRY = struct.Struct(">Qq")
_READ_RESPONSE = struct.Struct(">Qqq")
_LAC = struct.Struct(">Qq")
_WRITE_LAC = struct.Struct(f">Q{MASTER_KEY_BYTES}sq")


def _unpack(fmt: struct.Struct, body: bytes | memoryview) -> tuple[object, ...]:
    if len(body) < fmt.size:
        raise ProtocolError(f"body of {len(body)} bytes, expected at least {fmt.size}")
    return fmt.unpack_from(body, 0)


@dataclass(frozen=True, slots=True)
class AddRequest:
    ledger_id: int
    entry_id: int
    master_key: bytes
    entry: bytes  # Entry.encode() output

    def encode(self) -> bytes:
        return _ADD.pack(self.ledger_id, self.entry_id, self.master_key) + self.entry

    @classmethod
    def decode(cls, body: bytes | memoryview) -> Self:
        ledger_id, entry_id, key = _unpack(_ADD, body)
        return cls(int(ledger_id), int(entry_id), bytes(key), bytes(body[_ADD.size :]))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class AddResponse:
    ledger_id: int
    entry_id: int

    def encode(self) -> bytes:
        return _LEDGER_ENTRY.pack(self.ledger_id, self.entry_id)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> Self:
        ledger_id, entry_id = _unpack(_LEDGER_ENTRY, body)
        return cls(int(ledger_id), int(entry_id))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """READ_ENTRY. entry_id LAST_ENTRY (-1) asks for the last entry the bookie holds.

    With ReadFlag.FENCE the master key must be given; with ReadFlag.LONG_POLL the bookie
    waits up to timeout_ms for its LAC of the ledger to pass previous_lac, then reads.
    """

    ledger_id: int
    entry_id: int
    master_key: bytes = bytes(MASTER_KEY_BYTES)
    previous_lac: int = NO_ENTRY
    timeout_ms: int = 0

    def encode(self) -> bytes:
        return _READ.pack(
            self.ledger_id, self.entry_id, self.master_key, self.previous_lac, self.timeout_ms
        )

    @classmethod
    def decode(cls, body: bytes | memoryview) -> Self:
        ledger_id, entry_id, key, previous_lac, timeout_ms = _unpack(_READ, body)
        return cls(int(ledger_id), int(entry_id), bytes(key), int(previous_lac), int(timeout_ms))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """The entry bytes (empty when status is not OK) and the bookie's known LAC."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    entry: bytes | memoryview = b""

    def encode(self) -> bytes:
        return b"".join(
            (
                _READ_RESPONSE.pack(self.ledger_id, self.entry_id, self.last_add_confirmed),
                self.entry,
            )
        )

    @classmethod
    def decode(cls, body: bytes | memoryview, *, copy: bool = True) -> Self:
        """The entry is the one copy made of `body`: given a memoryview of a receive
        buffer, it is copied from there once (`Frame.read_response`). Without `copy` it
        is a view of `body`, which nothing may write again."""
        ledger_id, entry_id, lac = _unpack(_READ_RESPONSE, body)
        entry: bytes | memoryview
        if copy:
            with memoryview(body) as view:
                entry = bytes(view[_READ_RESPONSE.size :])
        else:
            entry = memoryview(body)[_READ_RESPONSE.size :]
        return cls(int(ledger_id), int(entry_id), int(lac), entry)  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    ledger_id: int

    def encode(self) -> bytes:
        return _LEDGER.pack(self.ledger_id)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> Self:
        (ledger_id,) = _unpack(_LEDGER, body)
        return cls(int(ledger_id))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    """The highest LAC the bookie knows: explicit (WRITE_LAC) or piggybacked on adds."""

    ledger_id: int
    last_add_confirmed: int

    def encode(self) -> bytes:
        return _LAC.pack(self.ledger_id, self.last_add_confirmed)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> Self:
        ledger_id, lac = _unpack(_LAC, body)
        return cls(int(ledger_id), int(lac))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    ledger_id: int
    master_key: bytes
    last_add_confirmed: int

    def encode(self) -> bytes:
        return _WRITE_LAC.pack(self.ledger_id, self.master_key, self.last_add_confirmed)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> Self:
        ledger_id, key, lac = _unpack(_WRITE_LAC, body)
        return cls(int(ledger_id), bytes(key), int(lac))  # type: ignore[call-overload]


# GET_BOOKIE_INFO has an empty request body; its response body is UTF-8 JSON:
# {"bookie_id", "free_bytes", "total_bytes", "read_only", "ledger_count"}


# --------------------------------------------------------------------------- frames


def encode_frame(op: Op, flags_or_status: int, request_id: int, body: bytes = b"") -> bytes:
    length = FRAME_HEADER_BYTES + len(body)
    assert length <= FRAME_BYTES_MAX, length
    return b"".join(
        (
            FRAME_LENGTH.pack(length),
            FRAME_HEADER.pack(PROTOCOL_VERSION, op, flags_or_status, request_id),
            body,
        )
    )


READ_RESPONSE_HEADER_BYTES = _READ_RESPONSE.size


@dataclass(frozen=True, slots=True)
class Frame:
    """A frame as read. read_response: an OK READ_ENTRY answer its reader decoded
    straight from its receive buffer (the entry copied once, not the whole body first
    and the entry out of it again); body is then empty."""

    version: int
    op: int
    flags_or_status: int
    request_id: int
    body: bytes
    read_response: ReadResponse | None = None


def frame_length_error(length: int, frame_bytes_max: int = FRAME_BYTES_MAX) -> ProtocolError | None:
    """Why a frame's length prefix is absurd, or None when it is in bounds (every reader
    of frames, on either side, checks with this)."""
    if FRAME_HEADER_BYTES <= length <= frame_bytes_max:
        return None
    return ProtocolError(f"frame length {length} outside [{FRAME_HEADER_BYTES}, {frame_bytes_max}]")


async def read_frame(
    reader: asyncio.StreamReader, frame_bytes_max: int = FRAME_BYTES_MAX
) -> Frame | None:
    """The next frame, or None on a clean end of stream between frames.

    Raises ProtocolError on an absurd length prefix and asyncio.IncompleteReadError on a
    stream that ends inside a frame. The version is returned as read: the caller decides.
    """
    try:
        prefix = await reader.readexactly(FRAME_LENGTH.size)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise
    (length,) = FRAME_LENGTH.unpack(prefix)
    error = frame_length_error(length, frame_bytes_max)
    if error is not None:
        raise error
    data = await reader.readexactly(length)
    version, op, flags_or_status, request_id = FRAME_HEADER.unpack_from(data, 0)
    return Frame(version, op, flags_or_status, request_id, data[FRAME_HEADER_BYTES:])
