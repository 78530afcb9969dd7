"""The bookie's admin HTTP port: `/metrics` (Prometheus), `/health`, `/info` (JSON).

A deliberately small HTTP/1.1 server on the bookie's event loop: one GET per connection,
bounded request size and read timeout, `Connection: close` on every answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bookie.metrics import METRICS

logger = logging.getLogger(__name__)

REQUEST_BYTES_MAX = 16 * 1024
REQUEST_TIMEOUT_S = 10.0


class HttpAdmin:
    def __init__(self, info: Callable[[], dict[str, Any]], healthy: Callable[[], bool]) -> None:
        self.info = info
        self.healthy = healthy
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port, limit=REQUEST_BYTES_MAX)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def route(self, path: str) -> tuple[int, str, bytes]:
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(METRICS.registry)
        if path == "/health":
            ok = self.healthy()
            return (200 if ok else 503), "text/plain", b"OK\n" if ok else b"UNHEALTHY\n"
        if path == "/info":
            return 200, "application/json", json.dumps(self.info(), sort_keys=True).encode()
        return 404, "text/plain", b"not found\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method not in ("GET", "HEAD"):
                status, kind, body = 405, "text/plain", b"method not allowed\n"
            else:
                status, kind, body = self.route(path)
            reason = {
                200: "OK",
                404: "Not Found",
                405: "Method Not Allowed",
                503: "Service Unavailable",
            }[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(body)
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
