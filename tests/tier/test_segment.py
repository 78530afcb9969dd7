"""The segment format: written, read back, verified; every kind of damage is found."""

from __future__ import annotations

import io
import random

import pytest

from blobstore.tier.segment import (
    FOOTER,
    HEADER,
    SegmentCorruptError,
    SegmentWriter,
    read_chunks,
    read_index,
    verify,
)


class BytesSource:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def size(self) -> int:
        return len(self.data)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return self.data[offset : offset + nbytes]


def segment(bodies: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    writer = SegmentWriter(out)
    for key, body in bodies.items():
        chunks = [body[i : i + 1000] for i in range(0, len(body), 1000)] or [b""]
        writer.add("bucket", key, f"v-{key}", chunks)
    size = writer.finish()
    assert size == len(out.getvalue())
    return out.getvalue()


def bodies(seed: int = 7) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {f"k{n}": rng.randbytes(rng.choice([0, 1, 999, 5000, 70_000])) for n in range(12)}


def test_objects_read_back_whole_and_by_range() -> None:
    wanted = bodies()
    source = BytesSource(segment(wanted))
    objects = verify(source)
    assert [o.key for o in objects] == list(wanted)
    for item in objects:
        body = wanted[item.key]
        assert b"".join(read_chunks(source, item.offset, item.length, 777)) == body
        if len(body) > 10:
            start, end = 3, len(body) - 5
            got = b"".join(read_chunks(source, item.offset + start, end - start + 1))
            assert got == body[start : end + 1]


def test_an_empty_segment_is_valid() -> None:
    assert verify(BytesSource(segment({}))) == []


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (0, "bad magic"),
        (HEADER.size + 10, "checksum mismatch"),  # inside the first object
        (-1, "no footer"),  # the footer's magic
        (-FOOTER.size - 3, "index checksum mismatch"),  # inside the index
    ],
)
def test_a_flipped_byte_is_found(where: int, message: str) -> None:
    data = bytearray(segment(bodies()))
    data[where] ^= 0x40
    with pytest.raises(SegmentCorruptError, match=message):
        verify(BytesSource(bytes(data)))


def test_an_unfinished_segment_is_refused() -> None:
    out = io.BytesIO()
    writer = SegmentWriter(out)
    writer.add("bucket", "k", "v", [b"x" * 5000])
    with pytest.raises(SegmentCorruptError):
        read_index(BytesSource(out.getvalue()))


def test_a_truncated_segment_is_refused() -> None:
    data = segment(bodies())
    with pytest.raises(SegmentCorruptError):
        verify(BytesSource(data[: len(data) // 2] + data[-FOOTER.size :]))
