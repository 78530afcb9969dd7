"""AppendObjectOp cuts received pieces into entries without copying a byte."""

from __future__ import annotations

import random

from blobstore.objects.append_object_op import cut_entry


def test_cut_entry_keeps_every_byte_in_order() -> None:
    rng = random.Random(39)
    for _ in range(200):
        entry_size = rng.randint(1, 5000)
        body = rng.randbytes(rng.randint(entry_size, 4 * entry_size))
        pieces: list[bytes | memoryview] = []
        start = 0
        while start < len(body):
            end = min(len(body), start + rng.randint(1, 2 * entry_size))
            pieces.append(body[start:end])
            start = end
        entries = []
        while sum(len(piece) for piece in pieces) >= entry_size:
            entry, pieces = cut_entry(pieces, entry_size)
            assert sum(len(piece) for piece in entry) == entry_size
            entries.append(b"".join(entry))
        rest = b"".join(pieces)
        assert len(rest) < entry_size
        assert b"".join(entries) + rest == body


def test_piece_of_one_entry_is_not_copied() -> None:
    piece = bytes(range(256)) * 16
    entry, rest = cut_entry([piece, b"next"], len(piece))
    assert len(entry) == 1 and entry[0] is piece
    assert rest == [b"next"]


def test_crossing_piece_is_split_without_a_copy() -> None:
    first, second = b"a" * 10, b"b" * 10
    entry, rest = cut_entry([first, second], 15)
    assert entry[0] is first and isinstance(entry[1], memoryview) and entry[1].obj is second
    assert b"".join(entry) == b"a" * 10 + b"b" * 5
    assert len(rest) == 1 and isinstance(rest[0], memoryview) and rest[0].obj is second
    assert bytes(rest[0]) == b"b" * 5
