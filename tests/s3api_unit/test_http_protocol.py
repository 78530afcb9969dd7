"""The gathering transport under uvicorn's protocol: one send per loop turn for a
response's small writes, large writes at once and in order, nothing lost on close; and
a request body's pieces reaching the application whole, a lone one uncopied."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from s3api.http_protocol import (
    GATHER_BYTES_MAX,
    GatheringHttpToolsProtocol,
    _BodyPieces,
    _GatheringTransport,
)


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


def test_a_lone_body_piece_reaches_the_application_as_received() -> None:
    first, second = b"a" * 10, b"b" * 5
    pieces = _BodyPieces(bytearray())
    pieces += first
    assert len(pieces) == 10 and bytes(pieces) is first
    pieces += second
    assert len(pieces) == 15 and bytes(pieces) == first + second
    assert bytes(_BodyPieces(bytearray(b"xy"))) == b"xy"  # uvicorn's buffer, not empty


class ReadingTransport(RecordingTransport):
    """What uvicorn's protocol asks of a connection's transport besides writes."""

    def get_extra_info(self, name: str) -> None:  # type: ignore[override]
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_a_body_received_in_pieces_reaches_the_application_whole() -> None:
    body = bytes(range(256)) * 1000
    received: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            received.append(message["body"])
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def scenario() -> None:
        config = Config(app=app, lifespan="off", log_level="warning")
        config.load()
        protocol = GatheringHttpToolsProtocol(
            config=config, server_state=ServerState(), app_state={}
        )
        raw = ReadingTransport()
        protocol.connection_made(raw)  # type: ignore[arg-type]
        head = b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        protocol.data_received(head + body[:1000])
        # Three pieces a loop turn: the application's reads find one, or several.
        for n, start in enumerate(range(1000, len(body), 30_000)):
            if n % 3 == 0:
                await asyncio.sleep(0)
            protocol.data_received(body[start : start + 30_000])
        for _ in range(100):
            if raw.writes:
                break
            await asyncio.sleep(0.01)
        assert raw.writes and raw.writes[0].startswith(b"HTTP/1.1 200")

    asyncio.run(scenario())
    assert b"".join(received) == body
    assert len(received) < len(range(1000, len(body), 30_000))  # some read found several
