"""The gathering transport under uvicorn's protocol: one send per loop turn for a
response's small writes, large writes at once and in order, nothing lost on close."""

from __future__ import annotations

import asyncio

from s3api.http_protocol import GATHER_BYTES_MAX, _GatheringTransport


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"extra:{name}"


def test_small_writes_of_one_turn_go_as_one_and_large_ones_in_order() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        raw = RecordingTransport()
        transport = _GatheringTransport(raw, loop)  # type: ignore[arg-type]
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"body")
        transport.write(b"")
        assert raw.writes == []
        await asyncio.sleep(0)
        assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
        big = b"x" * (GATHER_BYTES_MAX + 1)
        transport.write(b"head")
        transport.write(big)  # the gathered bytes first, then the large write at once
        assert raw.writes[1:] == [b"head", big]
        transport.write(b"tail")
        transport.close()  # a response closed in the same turn still gets its bytes
        assert raw.writes[-1] == b"tail" and raw.closed
        await asyncio.sleep(0)
        assert raw.writes[-1] == b"tail"
        assert transport.get_extra_info("peername") == "extra:peername"

    asyncio.run(scenario())


def test_abort_drops_what_was_gathered() -> None:
    async def scenario() -> None:
        raw = RecordingTransport()
        transport = _GatheringTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        transport.write(b"partial")
        transport.abort()
        await asyncio.sleep(0)
        assert raw.writes == [] and raw.aborted

    asyncio.run(scenario())
