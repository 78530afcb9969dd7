"""uvicorn's httptools protocol with a response's small writes joined into one send.

uvicorn writes a response's status line and headers, then its body, with two
`transport.write` calls; each is a send syscall (and, on loopback, the peer's receive
work) and its own TCP segment. For a 4 KiB GET those sends were a visible share of the
gateway's CPU. Here small writes made during one loop turn are gathered and written
together at the end of the turn; a large write (a streamed body chunk) goes through at
once, after what is gathered, so flow control still sees the real buffer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Writes up to this size wait for the end of the loop turn; larger ones go at once.
GATHER_BYTES_MAX = 64 * 1024


class _GatheringTransport:
    """A transport whose small writes of one loop turn go out as one."""

    __slots__ = ("_transport", "_loop", "_gathered")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._gathered: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) > GATHER_BYTES_MAX:
            self._flush()
            self._transport.write(data)
            return
        if not data:
            return
        if self._gathered is None:
            self._gathered = [bytes(data)]
            self._loop.call_soon(self._flush)
        else:
            self._gathered.append(bytes(data))

    def _flush(self) -> None:
        gathered, self._gathered = self._gathered, None
        if gathered and not self._transport.is_closing():
            self._transport.write(gathered[0] if len(gathered) == 1 else b"".join(gathered))

    def close(self) -> None:
        self._flush()  # what was gathered is part of the response being closed
        self._transport.close()

    def abort(self) -> None:
        self._gathered = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GatheringHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        super().connection_made(_GatheringTransport(transport, self.loop))  # type: ignore[arg-type]
