"""poll_select keeps select()'s contract for kazoo's connection thread."""

from __future__ import annotations

import socket

import pytest

from blobstore.objects.kazoo_poll import poll_select


def test_reports_readable_and_writable_file_objects() -> None:
    left, right = socket.socketpair()
    with left, right:
        assert poll_select([left], [], [], 0) == ([], [], [])
        assert poll_select([], [left], [], 0) == ([], [left], [])
        right.sendall(b"x")
        assert poll_select([left, right.fileno()], [], [], 1.0) == ([left], [], [])
        # a descriptor both readable and writable is reported as readable only
        assert poll_select([left], [left], [], 1.0) == ([left], [], [])


def test_closed_peer_is_readable() -> None:
    left, right = socket.socketpair()
    with left:
        right.close()
        assert poll_select([left], [], [], 1.0)[0] == [left]


def test_rejects_negative_timeout() -> None:
    with pytest.raises(ValueError):
        poll_select([], [], [], -1)
