"""uvicorn's httptools protocol with a response's small writes joined into one send.

uvicorn writes a response's status line and headers, then its body, with two
`transport.write` calls; each is a send syscall (and, on loopback, the peer's receive
work) and its own TCP segment, a visible share of the gateway's CPU for small responses.
Here small writes are gathered and written together when the response is complete (the
same step, so the client waits for no other work of the loop), or at the end of the loop
turn for a response still streaming; a large write (a streamed body chunk) goes through
at once, after what is gathered, so flow control still sees the real buffer.

A request body's pieces reach the application as they were received (`_BodyPieces`),
not copied into uvicorn's buffer and out of it again.

The protocol also accepts a request head that repeats Content-Length with one value
(`collapse_content_length`), as S3 does, where llhttp alone would answer 400, and answers
in S3's XML where uvicorn would in plain text: a request the parser refuses (400
BadRequest) and one over the worker's concurrency limit (503 SlowDown, which SDKs retry
with backoff).

A request whose header section (its field lines) exceeds the gateway's bound
(`max_header_bytes`, S3's 8 KiB by default) is refused as S3 refuses it, 400
RequestHeaderSectionTooLarge, as soon as that many bytes of it have arrived: neither
the head nor the request is handled, and no more of it is kept (the rest of what the
client sends is read and dropped for a moment, so the answer is not lost to a reset).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from s3api import metrics
from s3api.config import CONFIG_ENV
from s3api.errors import S3Error, render_error
from s3api.limits import REQUEST_HEADER_SECTION_BYTES_DEFAULT
from s3api.request_ids import HOST_ID, new_request_id

# Writes up to this size wait for the end of the loop turn; larger ones go at once.
GATHER_BYTES_MAX = 64 * 1024
# A request head arriving in pieces is held back until its end, up to this size; a
# longer one goes to the parser as it comes.
HEAD_BYTES_MAX = 64 * 1024

# After refusing a request head, what the client still sends is read and dropped for
# this long before the connection closes (closing with unread bytes would reset it, and
# the client could lose the answer).
REFUSED_LINGER_S = 2.0

# A Content-Length field line of a request head: group 1 is its value without the
# surrounding blanks. (A field line never contains CR or LF, so this cannot match
# inside another field or the request line.)
_CONTENT_LENGTH_FIELD = re.compile(rb"\r\ncontent-length:[ \t]*([^\r\n]*?)[ \t]*(?=\r\n)", re.I)


@functools.cache
def header_section_bytes_max() -> int:
    """The worker's bound on a request's header section, from the configuration the
    supervisor passes it (`GatewayConfig.max_header_bytes`); S3's own without one."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        return REQUEST_HEADER_SECTION_BYTES_DEFAULT
    return int(json.loads(text).get("max_header_bytes", REQUEST_HEADER_SECTION_BYTES_DEFAULT))


def header_section_bytes(buffer: bytes | bytearray, end: int) -> int:
    """The size of the header section received so far of a request head starting at
    `buffer`'s first byte: the field lines after the request line, through the last
    one's CRLF (`end` is where the blank line's CRLFCRLF starts, -1 if not yet
    received). 0 while the request line itself is incomplete."""
    line_end = buffer.find(b"\r\n")
    if line_end < 0:
        return 0
    if end >= 0:
        return max(0, end - line_end)
    return len(buffer) - (line_end + 2)


def _closing_error(
    code: str, operation: str, **fields: str | int
) -> tuple[int, str, bytes, list[tuple[bytes, bytes]]]:
    """(status, request id, body, headers) of an S3 error answered outside the gateway's
    own request handling (the connection then closes), counted in the request metrics.
    The status and message are the code's, from the table in `s3api/errors.py`."""
    request_id = new_request_id()
    error = S3Error(code)
    error.fields.update({name: str(value) for name, value in fields.items()})
    body = render_error(error, request_id, host_id=HOST_ID)
    headers = [
        (b"content-type", b"application/xml"),
        (b"content-length", b"%d" % len(body)),
        (b"x-amz-request-id", request_id.encode("ascii")),
        (b"x-amz-id-2", HOST_ID.encode("ascii")),
        (b"connection", b"close"),
    ]
    metrics.TALLY.add(operation, str(error.status), 0.0, 0, len(body))
    return error.status, request_id, body, headers


async def slow_down(scope: Any, receive: Any, send: Any) -> None:
    """The answer to a request over the worker's concurrency limit (`limit_concurrency`,
    in place of uvicorn's plain text): S3's 503 SlowDown, with its request id; the
    connection closes (its body, if any, is not read)."""
    status, _, body, headers = _closing_error("SlowDown", "Unknown")
    headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def collapse_content_length(head: bytes) -> bytes:
    """`head` (a request head through its blank line) with repeated Content-Length
    fields that all carry the same decimal value reduced to the first one.

    RFC 9110 (section 8.6) lets a recipient do so, and Amazon S3 does: rclone before
    1.59 sent every single-part upload as a presigned PUT carrying the field twice, the
    HTTP library's own and the signed copy. llhttp rejects any repeated Content-Length.
    Repeats with different values are left alone, for the parser to reject (400).
    """
    fields = list(_CONTENT_LENGTH_FIELD.finditer(head))
    if len(fields) < 2:
        return head
    value = fields[0].group(1)
    if not value.isdigit() or any(field.group(1) != value for field in fields[1:]):
        return head
    kept = [head[: fields[1].start()]]
    for index, field in enumerate(fields[1:], start=1):
        end = fields[index + 1].start() if index + 1 < len(fields) else len(head)
        kept.append(head[field.end() : end])
    return b"".join(kept)


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

    def flush(self) -> None:
        """Write what was gathered now (the response it belongs to is complete)."""
        if self._gathered is not None:
            self._flush()

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


class _BodyPieces:
    """A request body's pieces received since the application last read it, in place of
    uvicorn's `cycle.body` bytearray: a piece is kept as received, not copied into the
    bytearray and out again (`bytes(cycle.body)` in uvicorn's `receive`), and the read
    hands out a lone piece as it is. That was two copies of every byte of a large PUT
    (the flow control lets a read gather up to 64 KiB more than one received piece, so
    most reads find one)."""

    __slots__ = ("_pieces", "_size")

    def __init__(self, first: bytes | bytearray) -> None:
        self._pieces: list[bytes] = [bytes(first)] if first else []
        self._size = len(first)

    def __iadd__(self, piece: bytes) -> _BodyPieces:
        self._pieces.append(piece)
        self._size += len(piece)
        return self

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        pieces = self._pieces
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class _HeaderSectionTooLarge(Exception):
    """Raised from the parser's header callback: the head goes no further."""


class GatheringHttpToolsProtocol(HttpToolsProtocol):
    # True while no request is being parsed: the next byte received starts a head.
    _between_requests = True
    # The first bytes of a request head whose end has not arrived yet, if any.
    _head_start: bytearray | None = None
    # Header bytes the parser delivered for the request being parsed (a lower bound of
    # its header section: separators may be longer than counted).
    _header_bytes = 0
    # Set once a head was refused: what arrives after it is dropped.
    _refused = False
    # A parse error of bytes after a request still being answered: answered after it.
    _unparsable: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        super().connection_made(_GatheringTransport(transport, self.loop))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._between_requests:
            # A request starts here: its head is looked at whole before the parser sees
            # it. (Clients send a request once the previous response arrived, so heads
            # start reads; a head pipelined behind another request in the same read goes
            # to the parser unchanged.)
            held = self._head_start
            # Only the new bytes are searched (with the 3 before them), and a held head
            # grows in place: one trickling in a byte at a time costs linear work.
            start = 0
            if held is not None:
                start = max(0, len(held) - 3)
                held += data
            buffer = held if held is not None else data
            end = buffer.find(b"\r\n\r\n", start)
            if header_section_bytes(buffer, end) > header_section_bytes_max():
                self._head_start = None
                self._refuse_header_section()
                return
            # A head ending in bare LFs is not one S3 clients send: the parser answers it
            # at once rather than it waiting here for more.
            if end < 0 and len(buffer) < HEAD_BYTES_MAX and buffer.find(b"\n\n", start) < 0:
                if held is None:
                    self._head_start = bytearray(data)
                self._unset_keepalive_if_required()
                return
            self._head_start = None
            if held is not None:
                data = bytes(held)
            if end >= 0 and len(_CONTENT_LENGTH_FIELD.findall(data, 0, end + 2)) > 1:
                data = collapse_content_length(data[: end + 4]) + data[end + 4 :]
        super().data_received(data)

    def on_message_begin(self) -> None:
        self._between_requests = False
        self._header_bytes = 0
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        # A head the check in `data_received` did not see whole (pipelined behind
        # another request, or longer than HEAD_BYTES_MAX) is bounded here.
        self._header_bytes += len(name) + len(value) + 3  # ':' and CRLF at least
        if self._header_bytes > header_section_bytes_max():
            raise _HeaderSectionTooLarge
        super().on_header(name, value)

    def on_body(self, body: bytes) -> None:
        cycle: Any = self.cycle  # its body: uvicorn's bytearray, replaced by _BodyPieces
        if not isinstance(cycle.body, _BodyPieces):
            cycle.body = _BodyPieces(cycle.body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._between_requests = True

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        # uvicorn picks its plain-text 503 app for a request over the concurrency limit.
        super()._start_asgi_task(cycle, slow_down if app is service_unavailable else app)

    def on_response_complete(self) -> None:
        transport = self.transport
        if isinstance(transport, _GatheringTransport):
            transport.flush()
        super().on_response_complete()
        if self._unparsable is not None and not self.pipeline:
            if self.transport.is_closing():
                self._unparsable = None
            else:
                self._answer_unparsable(self._unparsable)

    def send_400_response(self, msg: str) -> None:
        """A request the parser refused (bad framing, a bad method or target): S3's XML
        error with its request id headers, as every other answer, instead of uvicorn's
        plain text; the connection then closes (what follows cannot be framed). Bytes
        that follow a request still being answered (a body longer than its
        Content-Length) are answered after it, in order, as HTTP/1.1 requires: the
        client reads the answer to its request first."""
        if self._header_bytes > header_section_bytes_max():
            self._refuse_header_section()
            return
        cycle = self.cycle
        if (cycle is not None and not cycle.response_complete) or self.pipeline:
            self._unparsable = msg
            self._refused = True  # nothing more is read into the broken parser
            return
        self._answer_unparsable(msg)

    def _answer_unparsable(self, msg: str) -> None:
        self._unparsable = None
        status, request_id, body, headers = _closing_error("BadRequest", "Unparsable")
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode("ascii")),
            *(
                name + b": " + value + b"\r\n"
                for name, value in (*self.server_state.default_headers, *headers)
            ),
            b"\r\n",
        ]
        self.logger.info("event=unparsable_request request_id=%s reason=%s", request_id, msg)
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def _refuse_header_section(self) -> None:
        """Answer a head whose header section is over the bound (400
        RequestHeaderSectionTooLarge, S3's XML) without handling it. The rest of what
        the client sends is dropped for REFUSED_LINGER_S, after the answer and the end
        of this side's stream, and then the connection closes."""
        bound = header_section_bytes_max()
        status, request_id, body, headers = _closing_error(
            "RequestHeaderSectionTooLarge", "Unparsable", MaxSizeAllowed=bound
        )
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode("ascii")),
            *(
                name + b": " + value + b"\r\n"
                for name, value in (*self.server_state.default_headers, *headers)
            ),
            b"\r\n",
        ]
        self.logger.info(
            "event=request_header_section_too_large request_id=%s max_header_bytes=%d",
            request_id,
            bound,
        )
        self._refused = True
        transport = self.transport
        transport.write(b"".join(head) + body)
        if isinstance(transport, _GatheringTransport):
            transport.flush()
        if transport.can_write_eof():
            transport.write_eof()
        self.loop.call_later(REFUSED_LINGER_S, transport.close)
