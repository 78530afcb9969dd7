"""Requests exactly as botocore sends them, captured before they reach the network."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import boto3
from botocore.awsrequest import AWSResponse
from botocore.config import Config

ACCESS_KEY = "AKIDEXAMPLE0000000001"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SECRETS = {ACCESS_KEY: SECRET_KEY}

T = TypeVar("T")


@dataclass
class CapturedRequest:
    method: str
    raw_path: bytes
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name.encode():
                return value.decode("latin-1")
        return None

    def header_map(self) -> dict[str, str]:
        return {k.decode(): v.decode("latin-1") for k, v in self.headers}

    def replace_header(self, name: str, value: str) -> CapturedRequest:
        headers = [(k, v) for k, v in self.headers if k != name.encode()]
        headers.append((name.encode(), value.encode("latin-1")))
        return CapturedRequest(self.method, self.raw_path, self.query_string, headers, self.body)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **kwargs: Any) -> Iterable[bytes]:
        yield self._body


def _read_body(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    data = body.read()
    return data if isinstance(data, bytes) else data.encode()


def to_captured(request: Any) -> CapturedRequest:
    parts = urlsplit(request.url)
    headers: list[tuple[bytes, bytes]] = []
    for name, value in request.headers.items():
        raw_value = value if isinstance(value, bytes) else str(value).encode("utf-8")
        headers.append((name.lower().encode(), raw_value))
    if not any(name == b"host" for name, _ in headers):
        headers.append((b"host", parts.netloc.encode()))
    return CapturedRequest(
        request.method,
        parts.path.encode("latin-1"),
        parts.query.encode("latin-1"),
        headers,
        _read_body(request.body),
    )


@functools.lru_cache(maxsize=1)
def _session() -> boto3.session.Session:
    # One session: its loaders cache the S3 model, so each further client is cheap.
    return boto3.session.Session(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )


class CaptureClient:
    """A boto3 S3 client whose requests are recorded and answered with an empty 200."""

    def __init__(self, endpoint: str = "https://gateway.test:8443", **config: Any) -> None:
        self.client = _session().client(
            "s3",
            endpoint_url=endpoint,
            config=Config(
                **{"s3": {"addressing_style": "path"}, "retries": {"max_attempts": 1}, **config}
            ),
        )
        self.captured: list[CapturedRequest] = []
        self.response_body = b""
        self.client.meta.events.register("before-send", self._before_send)

    def _before_send(self, request: Any, **kwargs: Any) -> AWSResponse:
        self.captured.append(to_captured(request))
        return AWSResponse(request.url, 200, {}, _Raw(self.response_body))

    def capture(self, call: Callable[[Any], Any]) -> CapturedRequest:
        self.captured.clear()
        call(self.client)
        assert len(self.captured) == 1, len(self.captured)
        return self.captured[0]


async def _pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    """An async iterator over body in pieces of size bytes, like request.stream()."""
    return _pieces(body, max(1, size))


async def _collect(iterator: Any) -> bytes:
    out = bytearray()
    async for piece in iterator:
        out += piece
    return bytes(out)


def collect(iterator: Any) -> bytes:
    return asyncio.run(_collect(iterator))


def sign_chunks(
    signing_key: bytes,
    timestamp: str,
    scope: str,
    seed: str,
    chunks: list[bytes],
    trailer: list[tuple[str, str]] | None = None,
) -> bytes:
    """An aws-chunked body signed as the AWS documentation describes (chunks end with b"")."""
    empty = hashlib.sha256(b"").hexdigest()
    previous = seed
    out = bytearray()
    for chunk in [*chunks, b""]:
        string_to_sign = "\n".join(
            (
                "AWS4-HMAC-SHA256-PAYLOAD",
                timestamp,
                scope,
                previous,
                empty,
                hashlib.sha256(chunk).hexdigest(),
            )
        )
        previous = hmac.new(signing_key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        out += f"{len(chunk):x};chunk-signature={previous}\r\n".encode() + chunk
        if chunk:
            out += b"\r\n"
    if trailer is not None:
        canonical = "".join(f"{name}:{value}\n" for name, value in trailer)
        string_to_sign = "\n".join(
            (
                "AWS4-HMAC-SHA256-TRAILER",
                timestamp,
                scope,
                previous,
                hashlib.sha256(canonical.encode()).hexdigest(),
            )
        )
        signature = hmac.new(signing_key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        for name, value in trailer:
            out += f"{name}:{value}\r\n".encode()
        out += f"x-amz-trailer-signature:{signature}\r\n".encode()
    out += b"\r\n"
    return bytes(out)
