"""Answer frames cut from a bookie connection's receive buffer: an OK READ_ENTRY answer's
entry is copied out once (not at all from a buffer of its own) and decoded in place;
every other frame keeps its body."""

from __future__ import annotations

from blobstore.ledger.bookie_client import _cut_frame
from blobstore.wire import protocol
from blobstore.wire.protocol import Op, Status


def framed(op: Op, status: int, request_id: int, body: bytes) -> bytearray:
    """A receive buffer holding one frame between unrelated bytes."""
    return bytearray(b"junk" + protocol.encode_frame(op, status, request_id, body) + b"tail")


def cut(buffer: bytearray) -> protocol.Frame:
    start = 4 + protocol.FRAME_LENGTH.size
    return _cut_frame(buffer, start, len(buffer) - 4)


def test_ok_read_answer_is_decoded_from_the_buffer_and_owns_its_bytes() -> None:
    entry = protocol.Entry(7, 3, 2, 5000, bytes(range(256)) * 4).encode()
    buffer = framed(Op.READ_ENTRY, Status.OK, 99, protocol.ReadResponse(7, 3, 2, entry).encode())
    frame = cut(buffer)
    assert (frame.op, frame.flags_or_status, frame.request_id, frame.body) == (
        Op.READ_ENTRY,
        Status.OK,
        99,
        b"",
    )
    assert frame.read_response == protocol.ReadResponse(7, 3, 2, entry)
    buffer[:] = bytes(len(buffer))  # the connection reuses its buffer
    assert frame.read_response.entry == entry and type(frame.read_response.entry) is bytes
    decoded = protocol.Entry.decode(frame.read_response.entry)
    # The payload is a view of the answer's own copy: no second copy.
    assert decoded.payload == bytes(range(256)) * 4
    assert isinstance(decoded.payload, memoryview)
    assert decoded.payload.obj is frame.read_response.entry


def test_an_answer_in_a_buffer_of_its_own_is_not_copied_at_all() -> None:
    """A large entry's answer, read into a buffer it owns (ReceiveBuffer's hand-off):
    the entry and its payload are views of that buffer, which nothing writes again."""
    payload = bytes(range(256)) * 1024
    entry = protocol.Entry(7, 3, 2, len(payload), payload).encode()
    buffer = framed(Op.READ_ENTRY, Status.OK, 99, protocol.ReadResponse(7, 3, 2, entry).encode())
    frame = _cut_frame(buffer, 4 + protocol.FRAME_LENGTH.size, len(buffer) - 4, owned=True)
    assert frame.read_response is not None and frame.read_response.entry == entry
    decoded = protocol.Entry.decode(frame.read_response.entry)
    assert decoded.payload == payload
    assert isinstance(decoded.payload, memoryview) and decoded.payload.obj is buffer


def test_other_frames_keep_their_body() -> None:
    error_body = protocol.ReadResponse(7, 3, 2).encode()
    frame = cut(framed(Op.READ_ENTRY, Status.NO_SUCH_ENTRY, 5, error_body))
    assert frame.read_response is None and frame.body == error_body
    frame = cut(framed(Op.READ_ENTRY, Status.OK, 6, b"short"))
    assert frame.read_response is None and frame.body == b"short"
    lac = protocol.ReadLacResponse(7, 4).encode()
    frame = cut(framed(Op.READ_LAC, Status.OK, 8, lac))
    assert frame.read_response is None and frame.body == lac


def test_entry_decode_reads_a_memoryview_in_place() -> None:
    """The payload is a view of the bytes decoded, not a copy (their owner must not
    write them again); a flipped byte fails the digest."""
    raw = bytearray(protocol.Entry(1, 1, 0, 5, b"hello").encode())
    with memoryview(raw) as view:
        entry = protocol.Entry.decode(view)
    assert entry.payload == b"hello" and entry.payload.obj is raw  # type: ignore[union-attr]
    raw[-1] ^= 1
    try:
        protocol.Entry.decode(bytes(raw))
    except protocol.CorruptEntryError:
        pass
    else:
        raise AssertionError("a flipped payload byte must fail the digest")


def test_an_entry_in_pieces_encodes_as_the_same_bytes() -> None:
    payload = bytes(range(256)) * 40
    pieces: list[bytes | memoryview] = [payload[:1000], memoryview(payload)[1000:7000]]
    pieces.append(payload[7000:])
    parts = protocol.encode_entry(7, 3, 2, 20_000, pieces)
    assert all(part is piece for part, piece in zip(parts[1:], pieces, strict=True))
    assert b"".join(parts) == protocol.Entry(7, 3, 2, 20_000, payload).encode()
    assert protocol.Entry.decode(b"".join(parts)).payload == payload
