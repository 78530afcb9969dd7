"""The bookie's admin HTTP port: `/metrics` (Prometheus), `/health`, `/info` (JSON),
`POST /api/v1/bookie/gc` (one garbage collection pass now, as BookKeeper's
`PUT /api/v1/bookie/gc`), and the scrubber's `POST /api/v1/bookie/scrub[?rate_mb_s=N]`
(start a pass now, or join the one running: 202 with its id) and
`GET /api/v1/bookie/scrub` (the pass running and the last one, with their findings).

A deliberately small HTTP/1.1 server on the bookie's event loop: one request per
connection, bounded request head, body and read timeout, `Connection: close` on every
answer. A request body (only a forced GC may have one) is read up to `BODY_BYTES_MAX` and
ignored; chunked bodies are refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bookie.garbage_collector import (
    ForcedGcRequest,
    GcBusyError,
    GcFailedError,
    GcResult,
    GcStoppedError,
)
from bookie.metrics import METRICS
from bookie.scrubber import Scrubber

logger = logging.getLogger(__name__)

REQUEST_BYTES_MAX = 16 * 1024
REQUEST_TIMEOUT_S = 10.0
BODY_BYTES_MAX = 16 * 1024
# A forced GC answers 503 after this long; the pass itself goes on to its end.
FORCED_GC_TIMEOUT_S = 600.0
QUERY_FIELDS_MAX = 8
GC_PATH = "/api/v1/bookie/gc"
SCRUB_PATH = "/api/v1/bookie/scrub"
TEXT = "text/plain"
JSON = "application/json"

REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

ForceGc = Callable[[ForcedGcRequest], Awaitable[GcResult]]


class BadRequestError(ValueError):
    """A request the admin port refuses, with a one-line reason and its status."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    body_bytes: int


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    allow: str = ""

    def __post_init__(self) -> None:
        assert self.status in REASONS, self.status


def text_answer(status: int, line: str, allow: str = "") -> Answer:
    return Answer(status, TEXT, f"{line}\n".encode(), allow)


def shown(value: str) -> str:
    """A value from a request, quoted and cut short for a one-line reason."""
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


def parse_head(head: bytes) -> Request:
    """The request line and the headers that matter (the body's length), or
    BadRequestError."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1].startswith("/"):
        raise BadRequestError(f"bad request line {shown(lines[0])}")
    method, target, _ = parts
    path, _, query = target.partition("?")
    body_bytes: int | None = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "transfer-encoding":
            raise BadRequestError("chunked bodies are not accepted: send Content-Length", 411)
        if name == "content-length":
            value = value.strip()
            if not value.isdigit() or body_bytes not in (None, int(value)):
                raise BadRequestError(f"bad Content-Length {shown(value)}")
            body_bytes = int(value)
    body_bytes = body_bytes or 0
    if body_bytes > BODY_BYTES_MAX:
        raise BadRequestError(f"body of {body_bytes} bytes: at most {BODY_BYTES_MAX}", 413)
    return Request(method, path, query, body_bytes)


def parse_threshold(value: str) -> float:
    try:
        threshold = float(value)
    except ValueError:
        raise BadRequestError(f"threshold={shown(value)}: not a number") from None
    if not math.isfinite(threshold) or not 0.0 <= threshold <= 1.0:
        raise BadRequestError(f"threshold={shown(value)}: must be in [0, 1]")
    return threshold


def parse_forced_gc_query(query: str, threshold_default: float) -> ForcedGcRequest:
    """`threshold=<0..1>&roll=true|false`, both optional, as a forced GC request."""
    try:
        fields = urllib.parse.parse_qsl(
            query,
            keep_blank_values=True,
            strict_parsing=bool(query),
            max_num_fields=QUERY_FIELDS_MAX,
        )
    except ValueError as e:
        raise BadRequestError(f"bad query string: {e}") from None
    values: dict[str, str] = {}
    for name, value in fields:
        if name not in ("threshold", "roll"):
            raise BadRequestError(f"unknown parameter {shown(name)}: threshold and roll are known")
        if name in values:
            raise BadRequestError(f"parameter {name} given twice")
        values[name] = value
    threshold = threshold_default
    if "threshold" in values:
        threshold = parse_threshold(values["threshold"])
    roll = values.get("roll", "true")
    if roll not in ("true", "false"):
        raise BadRequestError(f"roll={shown(roll)}: must be true or false")
    return ForcedGcRequest(threshold, roll == "true")


def parse_scrub_query(query: str) -> float | None:
    """`rate_mb_s=<MB/s>` (optional; 0: not limited) as bytes per second, or None."""
    try:
        fields = urllib.parse.parse_qsl(
            query, strict_parsing=bool(query), max_num_fields=QUERY_FIELDS_MAX
        )
    except ValueError as e:
        raise BadRequestError(f"bad query string: {e}") from None
    rate: float | None = None
    for name, value in fields:
        if name != "rate_mb_s" or rate is not None:
            raise BadRequestError(f"unexpected parameter {shown(name)}: rate_mb_s is known")
        try:
            rate = float(value)
        except ValueError:
            raise BadRequestError(f"rate_mb_s={shown(value)}: not a number") from None
        if not math.isfinite(rate) or rate < 0:
            raise BadRequestError(f"rate_mb_s={shown(value)}: must be >= 0")
    return None if rate is None else rate * 1e6


class HttpAdmin:
    def __init__(
        self,
        info: Callable[[], dict[str, Any]],
        healthy: Callable[[], bool],
        *,
        force_gc: ForceGc,
        gc_threshold_default: float,
        scrubber: Scrubber | None = None,
    ) -> None:
        self.info = info
        self.healthy = healthy
        self.force_gc = force_gc
        self.scrubber = scrubber
        self.gc_threshold_default = gc_threshold_default
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port, limit=REQUEST_BYTES_MAX)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def route(self, path: str) -> Answer:
        """The answer to a GET (or HEAD) of `path`."""
        if path == "/metrics":
            return Answer(200, CONTENT_TYPE_LATEST, generate_latest(METRICS.registry))
        if path == "/health":
            ok = self.healthy()
            return text_answer(200 if ok else 503, "OK" if ok else "UNHEALTHY")
        if path == "/info":
            return Answer(200, JSON, json.dumps(self.info(), sort_keys=True).encode())
        return text_answer(404, "not found")

    async def respond(self, request: Request) -> Answer:
        if request.path == GC_PATH:
            if request.method not in ("POST", "PUT"):
                return text_answer(405, "method not allowed: POST or PUT", "POST, PUT")
            return await self.forced_gc(request.query)
        if request.path == SCRUB_PATH and self.scrubber is not None:
            return self.scrub(request.method, request.query)
        if request.method not in ("GET", "HEAD"):
            return text_answer(405, "method not allowed: GET or HEAD", "GET, HEAD")
        return self.route(request.path)

    async def forced_gc(self, query: str) -> Answer:
        """One garbage collection pass, waited for (at most FORCED_GC_TIMEOUT_S)."""
        try:
            request = parse_forced_gc_query(query, self.gc_threshold_default)
        except BadRequestError as e:
            return text_answer(e.status, str(e))
        try:
            result = await asyncio.wait_for(self.force_gc(request), FORCED_GC_TIMEOUT_S)
        except TimeoutError:
            return text_answer(
                503, f"garbage collection not finished after {FORCED_GC_TIMEOUT_S:g} s"
            )
        except (GcBusyError, GcStoppedError) as e:
            return text_answer(503, str(e))
        except GcFailedError as e:  # logged by the collector
            return text_answer(500, str(e))
        figures = {
            "ledgers_deleted": result.ledgers_deleted,
            "bytes_freed": result.bytes_freed,
            "entry_logs_deleted": result.entry_logs_deleted,
            "duration_s": round(result.duration_s, 3),
        }
        return Answer(200, JSON, json.dumps(figures).encode())

    def scrub(self, method: str, query: str) -> Answer:
        """POST: a scrub pass now (202, its id); GET: the scrubber's state."""
        assert self.scrubber is not None
        if method in ("GET", "HEAD"):
            return Answer(200, JSON, json.dumps(self.scrubber.status()).encode())
        if method not in ("POST", "PUT"):
            return text_answer(405, "method not allowed: GET, POST or PUT", "GET, HEAD, POST, PUT")
        try:
            rate = parse_scrub_query(query)
        except BadRequestError as e:
            return text_answer(e.status, str(e))
        pass_id = self.scrubber.request(rate)
        return Answer(202, JSON, json.dumps({"pass_id": pass_id}).encode())

    async def _read_request(self, reader: asyncio.StreamReader) -> Request:
        """The request's head, its body read and dropped; BadRequestError when refused."""
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
        request = parse_head(head)
        if request.body_bytes:
            await asyncio.wait_for(reader.readexactly(request.body_bytes), REQUEST_TIMEOUT_S)
        return request

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method = ""
            try:
                request = await self._read_request(reader)
                method = request.method
                answer = await self.respond(request)
            except BadRequestError as e:
                answer = text_answer(e.status, str(e))
            allow = f"Allow: {answer.allow}\r\n" if answer.allow else ""
            writer.write(
                f"HTTP/1.1 {answer.status} {REASONS[answer.status]}\r\n"
                f"Content-Type: {answer.content_type}\r\nContent-Length: {len(answer.body)}\r\n"
                f"{allow}Connection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(answer.body)
            await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)
        except (
            TimeoutError,
            ValueError,
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            pass
        except Exception:
            logger.exception("admin request failed")
        finally:
            writer.close()
