"""ReceiveBuffer: frames of any size, arriving in reads of any size, parse intact from
the buffer the transport fills in place; the buffer grows only for a frame larger
than it, never for an absurd length prefix, and keeps its size."""

from __future__ import annotations

import random

from blobstore.wire import protocol
from blobstore.wire.receive_buffer import CAPACITY_INITIAL, READ_BYTES_MIN, ReceiveBuffer
from tests.catalog.helpers import seed


def _frame(rng: random.Random, size: int) -> bytes:
    body = rng.randbytes(size)
    return protocol.FRAME_LENGTH.pack(len(body)) + body


def _parse(buffer: ReceiveBuffer) -> list[bytes]:
    """Whole frames at the front, consumed as the bookie's parser does."""
    return [bytes(frame) for _, frame in _parse_keeping(buffer)]


def _parse_keeping(buffer: ReceiveBuffer) -> list[tuple[bool, bytes | memoryview]]:
    """Whole frames at the front, as the ledger client parses them: a frame in a buffer
    of its own is kept as a view of it, any other is copied out."""
    frames: list[tuple[bool, bytes | memoryview]] = []
    pos, end = buffer.start, buffer.end
    while end - pos >= protocol.FRAME_LENGTH.size:
        (length,) = protocol.FRAME_LENGTH.unpack_from(buffer.data, pos)
        frame_end = pos + protocol.FRAME_LENGTH.size + length
        if end < frame_end:
            break
        if buffer.owned:
            assert (pos, frame_end) == (0, len(buffer.data))  # the frame alone
            frames.append((True, memoryview(buffer.data)[pos:frame_end]))
        else:
            frames.append((False, bytes(buffer.data[pos:frame_end])))
        pos = frame_end
    buffer.consume_to(pos)
    return frames


def test_frames_arrive_intact_whatever_the_reads() -> None:
    rng = random.Random(seed())
    sizes = [rng.choice([16, 300, 4096, 70_000, 1 << 20, 3 << 20]) for _ in range(120)]
    frames = [_frame(rng, max(size, protocol.FRAME_HEADER_BYTES)) for size in sizes]
    stream = b"".join(frames)
    buffer = ReceiveBuffer()
    received: list[bytes] = []
    offset = 0
    while offset < len(stream):
        view = buffer.writable()
        assert len(view) >= READ_BYTES_MIN
        nbytes = min(len(view), rng.choice([1, 7, 4096, 65536, 262144]), len(stream) - offset)
        view[:nbytes] = stream[offset : offset + nbytes]
        view.release()
        offset += nbytes
        buffer.written(nbytes)
        received += _parse(buffer)
    assert received == frames
    assert len(buffer) == 0
    bound = protocol.FRAME_LENGTH.size + protocol.FRAME_BYTES_MAX + READ_BYTES_MIN
    assert len(buffer.data) <= bound


def test_an_absurd_length_prefix_does_not_grow_the_buffer() -> None:
    buffer = ReceiveBuffer()
    view = buffer.writable()
    prefix = protocol.FRAME_LENGTH.pack(protocol.FRAME_BYTES_MAX + 1)
    view[: len(prefix)] = prefix
    view.release()
    buffer.written(len(prefix))
    buffer.writable().release()
    assert len(buffer.data) == CAPACITY_INITIAL


def test_a_large_frame_grows_the_buffer_once() -> None:
    rng = random.Random(seed())
    buffer = ReceiveBuffer()
    for _ in range(5):
        frame = _frame(rng, 2 << 20)
        offset = 0
        while offset < len(frame):
            view = buffer.writable()
            nbytes = min(len(view), 262144, len(frame) - offset)
            view[:nbytes] = frame[offset : offset + nbytes]
            view.release()
            offset += nbytes
            buffer.written(nbytes)
        assert _parse(buffer) == [frame]
    capacity = len(buffer.data)
    assert capacity >= 2 << 20
    frame = _frame(rng, 2 << 20)
    view = buffer.writable()
    view[: len(frame)] = frame  # room for the whole frame in one read now
    view.release()
    buffer.written(len(frame))
    assert _parse(buffer) == [frame] and len(buffer.data) == capacity


def test_large_frames_are_read_into_buffers_of_their_own_and_kept_as_views() -> None:
    """Views of a frame read into its own buffer stay intact while every later frame
    arrives: that buffer is never written again. Small frames share the one buffer."""
    rng = random.Random(seed())
    hand_off = 256 * 1024
    sizes = [rng.choice([16, 300, 70_000, 200_000, hand_off, 1 << 20]) for _ in range(150)]
    frames = [_frame(rng, max(size, protocol.FRAME_HEADER_BYTES)) for size in sizes]
    stream = b"".join(frames)
    buffer = ReceiveBuffer(hand_off_bytes_min=hand_off)
    shared = buffer.data
    received: list[tuple[bool, bytes | memoryview]] = []
    offset = 0
    while offset < len(stream):
        view = buffer.writable()
        assert len(view) > 0
        nbytes = min(len(view), rng.choice([1, 7, 4096, 65536, 262144]), len(stream) - offset)
        view[:nbytes] = stream[offset : offset + nbytes]
        view.release()
        offset += nbytes
        buffer.written(nbytes)
        received += _parse_keeping(buffer)
    assert [bytes(frame) for _, frame in received] == frames
    owned = [len(frame) for kept, frame in received if kept]
    assert owned and min(owned) >= hand_off
    assert all(not kept for kept, frame in received if len(frame) < hand_off)
    assert not buffer.owned and buffer.data is shared and len(buffer) == 0


def test_a_dropped_connection_gives_back_the_shared_buffer() -> None:
    rng = random.Random(seed())
    buffer = ReceiveBuffer(hand_off_bytes_min=1024)
    shared = buffer.data
    frame = _frame(rng, 4096)
    view = buffer.writable()
    view[:100] = frame[:100]
    view.release()
    buffer.written(100)
    rest = buffer.writable()
    assert buffer.owned and len(rest) == len(frame) - 100  # no read past the frame
    rest.release()
    buffer.clear()
    assert not buffer.owned and buffer.data is shared and len(buffer) == 0
