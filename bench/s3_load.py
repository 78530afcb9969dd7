"""S3 load generator: an asyncio (uvloop) HTTP/1.1 client with its own SigV4 signing, in
the style of MinIO's warp, light enough to drive a gateway at thousands of small requests
per second from one core.

    .venv/bin/python -m bench.s3_load --endpoint http://127.0.0.1:9000 \\
        --access-key KEY --secret-key SECRET --bucket load --create-bucket \\
        --op put --size 4KiB --concurrency 32 --duration 10 --ceiling

Each worker owns one persistent keep-alive connection (an `asyncio.Protocol` with the
httptools response parser, which handles Content-Length and chunked bodies) and sends one
request at a time on it. Requests are signed with SigV4 and `UNSIGNED-PAYLOAD` (the
signing key is derived once per day), use path-style URLs, and every response status is
checked against the operation's expected status.

Operations: PUT, GET (whole or Range), DELETE, ListObjectsV2 (one page per operation),
DeleteObjects (batches of up to 1000, with Content-MD5) and multipart upload (create,
parts in parallel over extra connections, complete).

API for benchmarks:

    result = run_phase("put 4KiB", endpoint, access_key, secret_key,
                       put_op("bucket", 4096), concurrency=32, duration_s=10)
    ceiling = measure_ceiling("put", size=4096, concurrency=32, duration_s=5)

`run_phase` returns a PhaseResult (ops, bytes, seconds, ops_per_s, mb_per_s [MiB/s],
p50_ms, p99_ms, errors, plus client_cpu_s: this process's CPU time, so that
client_cpu_us_per_op shows what one request costs the generator). `run_phase_async` is the
same inside a running loop. Operation factories: put_op, get_op (whole or byte_range),
delete_op, list_op, delete_objects_op, multipart_op; object number n is always
object_key(prefix, n), so a put phase run with count=N prepares a get or delete phase.
An OpFactory is any `factory(client) -> op`, `op(connection, sequence) -> bytes moved`,
built on S3Client's methods. `measure_ceiling` runs the same generator, same concurrency,
against a trivial HTTP server in a child process: the generator's own ceiling in this run.

Plain HTTP only (no TLS) and no HEAD requests. Failed requests are counted and sampled,
never retried.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import random
import re
import subprocess
import sys
import time
from array import array
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import quote, urlsplit
from xml.etree.ElementTree import Element
from xml.sax.saxutils import unescape as xml_unescape

import httptools
import uvloop
from defusedxml.ElementTree import fromstring as xml_fromstring

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
S3_NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"
DELETE_OBJECTS_MAX = 1000
PART_COUNT_MAX = 10_000
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 60.0
WATCHDOG_INTERVAL_S = 0.5
CONCATENATED_BODY_BYTES_MAX = 64 * 1024  # smaller bodies are copied behind the head
WRITE_SLICE_BYTES = 1 << 20  # bodies above this are written slice by slice, with flow control
ERROR_BODY_BYTES_MAX = 64 * 1024  # kept of an unexpected response's body, for the message
KEPT_BODY_BYTES_MAX = 64 << 20  # a response body kept in memory (XML documents, GET --verify)
ERROR_SAMPLES_MAX = 5
ERRORS_MAX_DEFAULT = 1000
CONCURRENCY_MAX = 4096
SERVER_READY_TIMEOUT_S = 15.0
MIB = 1 << 20
T = TypeVar("T")
# The trivial server runs as `python -m bench.s3_load` from here.
REPOSITORY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

assert CONCATENATED_BODY_BYTES_MAX <= WRITE_SLICE_BYTES <= KEPT_BODY_BYTES_MAX


class S3LoadError(Exception):
    """A request that failed: unexpected status, S3 error document, or transport error."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------- SigV4


def _encode_query_part(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_query(query: Iterable[tuple[str, str]]) -> str:
    """The SigV4 canonical query string; also used verbatim as the request's query."""
    return "&".join(
        f"{name}={value}"
        for name, value in sorted(
            (_encode_query_part(name), _encode_query_part(value)) for name, value in query
        )
    )


_URI_SAFE = re.compile(r"[A-Za-z0-9_.~/-]*").fullmatch


def object_path(bucket: str, key: str | None = None) -> str:
    """The URI-encoded path-style path (S3 canonical URI: no double encoding)."""
    if not _URI_SAFE(bucket):
        bucket = quote(bucket, safe="~")
    if key is None:
        return f"/{bucket}"
    return f"/{bucket}/{key if _URI_SAFE(key) else quote(key, safe='/~')}"


class SigV4Signer:
    """AWS Signature Version 4 for S3, header-based, with `UNSIGNED-PAYLOAD` by default.

    The signing key is derived once per UTC day; the timestamp is formatted once per second.
    HMAC-SHA256 is computed from SHA-256 states pre-keyed with the signing key (RFC 2104)
    and copied per request: with OpenSSL 3, `hmac.digest` and `hashlib.sha256()` spend
    most of their time looking the algorithm up, which copies skip.
    """

    __slots__ = (
        "access_key",
        "secret_key",
        "region",
        "service",
        "_date_stamp",
        "_signing_key",
        "_scope",
        "_second",
        "_amz_date",
        "_inner",
        "_outer",
        "_sha256",
    )

    BASE_SIGNED_HEADERS = "host;x-amz-content-sha256;x-amz-date"

    def __init__(
        self, access_key: str, secret_key: str, region: str = "us-east-1", service: str = "s3"
    ) -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.service = service
        self._date_stamp = ""
        self._signing_key = b""
        self._scope = ""
        self._second = -1
        self._amz_date = ""
        self._inner = hashlib.sha256()
        self._outer = hashlib.sha256()
        self._sha256 = hashlib.sha256()

    def signing_key(self, date_stamp: str) -> bytes:
        if date_stamp != self._date_stamp:
            key = hmac.digest(f"AWS4{self.secret_key}".encode(), date_stamp.encode(), "sha256")
            for part in (self.region, self.service, "aws4_request"):
                key = hmac.digest(key, part.encode(), "sha256")
            self._date_stamp = date_stamp
            self._signing_key = key
            self._scope = f"{date_stamp}/{self.region}/{self.service}/aws4_request"
            block = key.ljust(64, b"\0")  # SHA-256 block size; the key is 32 bytes
            self._inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in block))
            self._outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in block))
        return self._signing_key

    def amz_date(self, now: float | None = None) -> str:
        second = int(time.time() if now is None else now)
        if second != self._second:
            self._second = second
            self._amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
        return self._amz_date

    def sign(
        self,
        method: str,
        path: str,
        query: str,
        host: str,
        headers: Sequence[tuple[str, str]] = (),
        payload_hash: str = UNSIGNED_PAYLOAD,
        now: float | None = None,
    ) -> tuple[str, str]:
        """-> (x-amz-date, Authorization). `path` and `query` are already canonical;
        `headers` are extra headers to sign (names in any case, values trimmed)."""
        amz_date = self.amz_date(now)
        if amz_date[:8] != self._date_stamp:
            self.signing_key(amz_date[:8])
        if headers:
            signed = sorted(
                [
                    ("host", host),
                    ("x-amz-content-sha256", payload_hash),
                    ("x-amz-date", amz_date),
                    *((name.lower(), " ".join(value.split())) for name, value in headers),
                ]
            )
            canonical_headers = "".join(f"{name}:{value}\n" for name, value in signed)
            signed_headers = ";".join(name for name, _ in signed)
        else:
            canonical_headers = (
                f"host:{host}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n"
            )
            signed_headers = self.BASE_SIGNED_HEADERS
        canonical_request = (
            f"{method}\n{path}\n{query}\n{canonical_headers}\n{signed_headers}\n{payload_hash}"
        )
        digest = self._sha256.copy()
        digest.update(canonical_request.encode())
        string_to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{self._scope}\n{digest.hexdigest()}"
        inner = self._inner.copy()
        inner.update(string_to_sign.encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        signature = outer.hexdigest()
        return amz_date, (
            f"AWS4-HMAC-SHA256 Credential={self.access_key}/{self._scope}, "
            f"SignedHeaders={signed_headers}, Signature={signature}"
        )


# --------------------------------------------------------------------------- HTTP/1.1


class Response:
    __slots__ = ("status", "headers", "body", "body_bytes")

    def __init__(
        self, status: int, headers: list[tuple[bytes, bytes]] | None, body: bytes | None, size: int
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.body_bytes = size

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers or ():
            if key.lower() == name:
                return value
        return None


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time; reconnects when closed.

    `deadline` is the monotonic time by which the request in flight must complete (0 when
    idle); the owning client's watchdog aborts connections that pass it.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.deadline = 0.0
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Response] | None = None
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] | None = None
        self._want_headers = False
        self._body_parts: list[bytes] | None = None
        self._body_bytes = 0
        self._body_cap = 0
        self._keep_alive = True
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._lost: BaseException | None = None
        self._stale_losses = 0  # transports dropped on purpose whose connection_lost is due

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stale_losses:
            self._stale_losses -= 1  # a transport _detach() already let go of
            return
        self.transport = None
        reason = self._lost or exc or ConnectionResetError("connection closed by the server")
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(S3LoadError(f"{type(reason).__name__}: {reason}"))
        self._wake_writer()

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self.abort(S3LoadError(f"malformed HTTP response: {error}"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writer()

    def _wake_writer(self) -> None:
        drain, self._drain_waiter = self._drain_waiter, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # ---- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._want_headers:
            self._headers.append((name, value))  # type: ignore[union-attr]

    def on_headers_complete(self) -> None:
        self._status = status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        if status >= 300 and self._body_parts is None:
            self._body_parts = []  # keep the start of an error document for the message
            self._body_cap = ERROR_BODY_BYTES_MAX

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_parts is not None and self._body_bytes <= self._body_cap:
            self._body_parts.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        parts = self._body_parts
        body = b"".join(parts) if parts is not None else None
        self.deadline = 0.0
        if not self._keep_alive:
            self._detach()
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(self._status, self._headers, body, self._body_bytes))

    # ---- client side

    def _detach(self) -> None:
        """Drop the transport now (the next request reconnects)."""
        transport, self.transport = self.transport, None
        if transport is not None:
            self._stale_losses += 1
            transport.abort()

    def abort(self, reason: BaseException) -> None:
        self._lost = reason
        if self.transport is not None:
            self.transport.abort()

    async def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._lost = None
        self._write_paused = False
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: self, self.host, self.port), timeout_s
            )
        except (OSError, TimeoutError) as error:
            raise S3LoadError(
                f"cannot connect to {self.host}:{self.port}: {type(error).__name__}: {error}"
            ) from error

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def request(
        self,
        head: bytes,
        body: bytes | memoryview | None,
        timeout_s: float,
        keep_body: bool = False,
        want_headers: bool = False,
    ) -> Response:
        """Send one request (head already serialized) and wait for the whole response."""
        if self.transport is not None and self.transport.is_closing():
            self._detach()  # closed by the server, its connection_lost still to come
        if self.transport is None:
            await self.connect()
        transport = self.transport
        assert transport is not None
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self._status = 0
        self._headers = [] if want_headers else None
        self._want_headers = want_headers
        self._body_parts = [] if keep_body else None
        self._body_cap = KEPT_BODY_BYTES_MAX if keep_body else 0
        self._body_bytes = 0
        self.deadline = time.monotonic() + timeout_s
        if body is None:
            transport.write(head)
        elif len(body) <= CONCATENATED_BODY_BYTES_MAX:
            transport.write(head + body)  # one buffer, one send: cheaper for small bodies
        elif len(body) <= WRITE_SLICE_BYTES:
            transport.writelines((head, body))
        else:
            transport.write(head)
            view = memoryview(body)
            for offset in range(0, len(view), WRITE_SLICE_BYTES):
                if waiter.done() or self.transport is not transport:
                    # Answered early (an error) or lost: stop sending. An early answer
                    # leaves the stream out of step with the request: drop it.
                    if self.transport is transport:
                        self._detach()
                    break
                transport.write(view[offset : offset + WRITE_SLICE_BYTES])
                if self._write_paused:
                    self._drain_waiter = asyncio.get_running_loop().create_future()
                    await self._drain_waiter
        try:
            response = await waiter
        finally:
            self.deadline = 0.0
        return response


# --------------------------------------------------------------------------- S3 client


def _text(element: Element, name: str) -> str | None:
    found = element.find(f"{S3_NAMESPACE}{name}")
    if found is None:
        found = element.find(name)
    return None if found is None else (found.text or "")


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def complete_multipart_upload_body(etags: list[str]) -> bytes:
    """The CompleteMultipartUpload document naming parts 1..n by their ETags."""
    parts = "".join(
        f"<Part><PartNumber>{number}</PartNumber><ETag>{_xml_escape(etag)}</ETag></Part>"
        for number, etag in enumerate(etags, start=1)
    )
    return f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()


_ERROR_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_XML_ENTITIES = {"&quot;": '"', "&apos;": "'"}  # beside &amp; &lt; &gt;
_NEXT_TOKEN = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")


@dataclass(frozen=True, slots=True)
class ListPage:
    keys: list[str]  # empty when the listing was not parsed (parse_keys=False)
    key_count: int
    next_token: str | None
    response_bytes: int


class S3Client:
    """Signs and sends S3 requests over HttpConnections; keeps a bounded pool of idle
    connections for work that fans out (multipart parts). A watchdog task, started with the
    first connection, aborts requests older than request_timeout_s. Use `async with`."""

    def __init__(
        self,
        endpoint: str,
        access_key: str,
        secret_key: str,
        region: str = "us-east-1",
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        pool_idle_max: int = 256,
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"endpoint {endpoint!r}: expected http://host:port (no TLS)")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.host_header = parts.netloc
        self.signer = SigV4Signer(access_key, secret_key, region)
        self.request_timeout_s = request_timeout_s
        self._pool_idle_max = pool_idle_max
        self._idle: list[HttpConnection] = []
        self._connections: set[HttpConnection] = set()
        self._watchdog: asyncio.Task[None] | None = None

    async def __aenter__(self) -> S3Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None
        for connection in self._connections:
            connection.close()
        self._connections.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run connection_lost

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            now = time.monotonic()
            for connection in self._connections:
                if connection.deadline and now > connection.deadline:
                    connection.abort(TimeoutError("no complete response within the timeout"))

    async def connect(self) -> HttpConnection:
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        connection = HttpConnection(self.host, self.port)
        await connection.connect()
        self._connections.add(connection)
        return connection

    async def acquire(self) -> HttpConnection:
        return self._idle.pop() if self._idle else await self.connect()

    def release(self, connection: HttpConnection) -> None:
        if len(self._idle) < self._pool_idle_max:
            self._idle.append(connection)
        else:
            connection.close()
            self._connections.discard(connection)

    def build_head(
        self,
        method: str,
        path: str,
        query: str = "",
        headers: Sequence[tuple[str, str]] = (),
        content_length: int | None = None,
    ) -> bytes:
        amz_date, authorization = self.signer.sign(method, path, query, self.host_header, headers)
        if not headers:
            target = f"{path}?{query}" if query else path
            length = "" if content_length is None else f"Content-Length: {content_length}\r\n"
            return (
                f"{method} {target} HTTP/1.1\r\nHost: {self.host_header}\r\n"
                f"X-Amz-Date: {amz_date}\r\nX-Amz-Content-SHA256: {UNSIGNED_PAYLOAD}\r\n"
                f"Authorization: {authorization}\r\n{length}\r\n"
            ).encode("latin-1")
        lines = [
            f"{method} {path}?{query} HTTP/1.1" if query else f"{method} {path} HTTP/1.1",
            f"Host: {self.host_header}",
            f"X-Amz-Date: {amz_date}",
            f"X-Amz-Content-SHA256: {UNSIGNED_PAYLOAD}",
            f"Authorization: {authorization}",
        ]
        lines.extend(f"{name}: {value}" for name, value in headers)
        if content_length is not None:
            lines.append(f"Content-Length: {content_length}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1")

    async def request(
        self,
        connection: HttpConnection,
        method: str,
        path: str,
        query: str = "",
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | memoryview | None = None,
        expected: int | tuple[int, ...] = 200,
        keep_body: bool = False,
        want_headers: bool = False,
    ) -> Response:
        content_length = (
            len(body) if body is not None else (0 if method in ("PUT", "POST") else None)
        )
        head = self.build_head(method, path, query, headers, content_length)
        response = await connection.request(
            head, body, self.request_timeout_s, keep_body, want_headers
        )
        status = response.status
        if status != expected and not (isinstance(expected, tuple) and status in expected):
            raise _status_error(method, path, response)
        return response

    # ---- operations; each returns what a benchmark counts

    async def create_bucket(self, connection: HttpConnection, bucket: str) -> None:
        response = await self._request_raw(connection, "PUT", object_path(bucket), body=b"")
        if response.status == 409 and response.body and b"BucketAlreadyOwnedByYou" in response.body:
            return
        if response.status != 200:
            raise _status_error("PUT", object_path(bucket), response)

    async def put_object(
        self,
        connection: HttpConnection,
        bucket: str,
        key: str,
        body: bytes | memoryview,
        headers: Sequence[tuple[str, str]] = (),
    ) -> int:
        await self.request(connection, "PUT", object_path(bucket, key), "", headers, body)
        return len(body)

    async def get_object(
        self,
        connection: HttpConnection,
        bucket: str,
        key: str,
        byte_range: tuple[int, int] | None = None,
        keep_body: bool = False,
    ) -> Response:
        """Whole object (200) or an inclusive byte range (206). The body is counted and
        dropped unless keep_body."""
        if byte_range is None:
            return await self.request(
                connection, "GET", object_path(bucket, key), keep_body=keep_body
            )
        first, last = byte_range
        return await self.request(
            connection,
            "GET",
            object_path(bucket, key),
            headers=(("Range", f"bytes={first}-{last}"),),
            expected=206,
            keep_body=keep_body,
        )

    async def delete_object(self, connection: HttpConnection, bucket: str, key: str) -> None:
        await self.request(connection, "DELETE", object_path(bucket, key), expected=204)

    async def list_objects_v2(
        self,
        connection: HttpConnection,
        bucket: str,
        prefix: str = "",
        continuation_token: str | None = None,
        max_keys: int = 1000,
        parse_keys: bool = True,
    ) -> ListPage:
        """One page. Without parse_keys only the continuation token is extracted (a scan
        instead of an XML parse: cheap enough for the generator to keep up)."""
        query = [("list-type", "2"), ("max-keys", str(max_keys))]
        if prefix:
            query.append(("prefix", prefix))
        if continuation_token:
            query.append(("continuation-token", continuation_token))
        response = await self.request(
            connection, "GET", object_path(bucket), canonical_query(query), keep_body=True
        )
        body = response.body or b""
        if not parse_keys:
            found = _NEXT_TOKEN.search(body)
            token = xml_unescape(found.group(1).decode(), _XML_ENTITIES) if found else None
            return ListPage([], body.count(b"<Key>"), token, response.body_bytes)
        root = xml_fromstring(body)
        keys = [
            _text(item, "Key") or ""
            for item in list(root.iter(f"{S3_NAMESPACE}Contents")) + list(root.iter("Contents"))
        ]
        truncated = _text(root, "IsTruncated") == "true"
        token = _text(root, "NextContinuationToken") if truncated else None
        return ListPage(keys, len(keys), token, response.body_bytes)

    async def list_all(
        self, connection: HttpConnection, bucket: str, prefix: str = ""
    ) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        while True:
            page = await self.list_objects_v2(connection, bucket, prefix, token)
            keys.extend(page.keys)
            if page.next_token is None:
                return keys
            token = page.next_token

    async def delete_objects(
        self, connection: HttpConnection, bucket: str, keys: Sequence[str], quiet: bool = True
    ) -> int:
        """DeleteObjects of up to 1000 keys; -> the request body size. Raises if any key
        is reported as an error."""
        if not 1 <= len(keys) <= DELETE_OBJECTS_MAX:
            raise ValueError(f"DeleteObjects takes 1..{DELETE_OBJECTS_MAX} keys, not {len(keys)}")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Delete>'
            + ("<Quiet>true</Quiet>" if quiet else "")
            + "".join(f"<Object><Key>{_xml_escape(key)}</Key></Object>" for key in keys)
            + "</Delete>"
        ).encode()
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        response = await self.request(
            connection,
            "POST",
            object_path(bucket),
            "delete=",
            (("Content-MD5", md5), ("Content-Type", "application/xml")),
            body,
            keep_body=True,
        )
        if response.body and b"<Error>" in response.body:
            raise S3LoadError(f"DeleteObjects reported errors: {response.body[:300]!r}")
        return len(body)

    async def multipart_upload(
        self,
        connection: HttpConnection,
        bucket: str,
        key: str,
        body: bytes | memoryview,
        part_size: int,
        part_concurrency: int = 4,
    ) -> int:
        """Create, upload the parts over up to part_concurrency connections (this one plus
        pooled ones), complete. Aborts the upload on failure. -> bytes uploaded."""
        part_count = max(1, -(-len(body) // part_size))
        if part_count > PART_COUNT_MAX:
            raise ValueError(f"{part_count} parts: S3 allows at most {PART_COUNT_MAX}")
        path = object_path(bucket, key)
        upload_id = await self._create_multipart_upload(connection, path)
        view = memoryview(body)
        etags: list[str] = [""] * part_count
        next_part = 0

        async def upload_parts(part_connection: HttpConnection) -> None:
            nonlocal next_part
            while next_part < part_count:
                index = next_part
                next_part += 1
                query = canonical_query((("partNumber", str(index + 1)), ("uploadId", upload_id)))
                part = view[index * part_size : (index + 1) * part_size]
                part_response = await self.request(
                    part_connection, "PUT", path, query, body=part, want_headers=True
                )
                etag = part_response.header(b"etag")
                if etag is None:
                    raise S3LoadError(f"UploadPart {index + 1} returned no ETag")
                etags[index] = etag.decode()

        borrowed = [await self.acquire() for _ in range(min(part_concurrency, part_count) - 1)]
        try:
            await asyncio.gather(upload_parts(connection), *map(upload_parts, borrowed))
            await self._complete_multipart_upload(connection, path, upload_id, etags)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._abort_multipart_upload(path, upload_id)
            raise
        finally:
            for borrowed_connection in borrowed:
                self.release(borrowed_connection)
        return len(body)

    async def _create_multipart_upload(self, connection: HttpConnection, path: str) -> str:
        response = await self.request(connection, "POST", path, "uploads=", keep_body=True)
        upload_id = _text(xml_fromstring(response.body or b""), "UploadId")
        if not upload_id:
            raise S3LoadError(f"CreateMultipartUpload returned no UploadId: {response.body!r}")
        return upload_id

    async def _complete_multipart_upload(
        self, connection: HttpConnection, path: str, upload_id: str, etags: list[str]
    ) -> None:
        done = await self.request(
            connection,
            "POST",
            path,
            canonical_query((("uploadId", upload_id),)),
            body=complete_multipart_upload_body(etags),
            keep_body=True,
        )
        if done.body and b"<Error>" in done.body:
            raise S3LoadError(f"CompleteMultipartUpload failed: {done.body[:300]!r}")

    async def _abort_multipart_upload(self, path: str, upload_id: str) -> None:
        """On a connection of its own: the upload's may be the one that failed."""
        abort_connection = await self.acquire()
        await self.request(
            abort_connection,
            "DELETE",
            path,
            canonical_query((("uploadId", upload_id),)),
            expected=204,
        )
        self.release(abort_connection)

    async def _request_raw(
        self, connection: HttpConnection, method: str, path: str, body: bytes | None = None
    ) -> Response:
        content_length = len(body) if body is not None else None
        head = self.build_head(method, path, "", (), content_length)
        return await connection.request(head, body, self.request_timeout_s, keep_body=True)


def _status_error(method: str, path: str, response: Response) -> S3LoadError:
    code = b""
    if response.body:
        found = _ERROR_CODE.search(response.body)
        code = found.group(1) if found else response.body[:120]
    return S3LoadError(
        f"{method} {path}: HTTP {response.status} {code.decode(errors='replace')}".rstrip(),
        response.status,
    )


# --------------------------------------------------------------------------- operations

Op = Callable[[HttpConnection, int], Awaitable[int]]
"""One operation: (the worker's connection, sequence number) -> bytes moved."""
OpFactory = Callable[[S3Client], Op]
"""Called once per worker with the phase's client; returns that worker's Op."""


def object_key(prefix: str, sequence: int, scattered: bool = False) -> str:
    """The key of object number `sequence`: the same in put, get and delete phases.
    Sequential keys sort in the order they are written (log-like names); `scattered`
    ones start with 8 hex digits hashed from the number, so consecutive writes land all
    over the key space (uuid-like names, as warp writes by default)."""
    if scattered:
        digest = hashlib.blake2b(sequence.to_bytes(8, "big"), digest_size=4).hexdigest()
        return f"{prefix}{digest}-{sequence:010d}"
    return f"{prefix}{sequence:010d}"


def put_op(
    bucket: str,
    size: int,
    prefix: str = "obj-",
    scattered: bool = False,
    headers: Sequence[tuple[str, str]] = (),
) -> OpFactory:
    """PUT object number `sequence` (one random body of `size` bytes shared by all), with
    `headers` (signed) on every request, e.g. `x-amz-server-side-encryption`."""
    body = os.urandom(size)
    extra = tuple(headers)

    def factory(client: S3Client) -> Op:
        async def op(connection: HttpConnection, sequence: int) -> int:
            key = object_key(prefix, sequence, scattered)
            return await client.put_object(connection, bucket, key, body, extra)

        return op

    return factory


def get_op(
    bucket: str,
    object_count: int,
    prefix: str = "obj-",
    byte_range: tuple[int, int] | None = None,
    scattered: bool = False,
    random_seed: int | None = None,
) -> OpFactory:
    """GET object number `sequence % object_count` (whole, or the inclusive byte range),
    or, given `random_seed`, an object picked uniformly at random each time (as warp
    does; a cycle in key order over more objects than a cache holds never hits an LRU)."""
    rng = random.Random(random_seed) if random_seed is not None else None

    def factory(client: S3Client) -> Op:
        async def op(connection: HttpConnection, sequence: int) -> int:
            number = rng.randrange(object_count) if rng is not None else sequence % object_count
            key = object_key(prefix, number, scattered)
            response = await client.get_object(connection, bucket, key, byte_range)
            return response.body_bytes

        return op

    return factory


def delete_op(bucket: str, prefix: str = "obj-", scattered: bool = False) -> OpFactory:
    """DELETE object number `sequence` (run with count = the number of objects put)."""

    def factory(client: S3Client) -> Op:
        async def op(connection: HttpConnection, sequence: int) -> int:
            key = object_key(prefix, sequence, scattered)
            await client.delete_object(connection, bucket, key)
            return 0

        return op

    return factory


def list_op(bucket: str, prefix: str = "", max_keys: int = 1000) -> OpFactory:
    """One ListObjectsV2 page per operation; each worker walks the listing page by page
    and starts over at its end."""

    def factory(client: S3Client) -> Op:
        token: str | None = None

        async def op(connection: HttpConnection, sequence: int) -> int:
            nonlocal token
            page = await client.list_objects_v2(
                connection, bucket, prefix, token, max_keys, parse_keys=False
            )
            token = page.next_token
            return page.response_bytes

        return op

    return factory


def delete_objects_op(
    bucket: str, prefix: str = "obj-", batch: int = DELETE_OBJECTS_MAX, first: int = 0
) -> OpFactory:
    """DeleteObjects of objects [first + sequence*batch, first + (sequence+1)*batch)."""

    def factory(client: S3Client) -> Op:
        async def op(connection: HttpConnection, sequence: int) -> int:
            start = first + sequence * batch
            keys = [object_key(prefix, number) for number in range(start, start + batch)]
            return await client.delete_objects(connection, bucket, keys)

        return op

    return factory


def multipart_op(
    bucket: str, size: int, part_size: int, part_concurrency: int = 4, prefix: str = "mpu-"
) -> OpFactory:
    """One multipart upload of `size` bytes per operation, parts in parallel."""
    body = os.urandom(size)

    def factory(client: S3Client) -> Op:
        async def op(connection: HttpConnection, sequence: int) -> int:
            return await client.multipart_upload(
                connection, bucket, object_key(prefix, sequence), body, part_size, part_concurrency
            )

        return op

    return factory


# --------------------------------------------------------------------------- runner


@dataclass(frozen=True, slots=True)
class PhaseResult:
    name: str
    ops: int
    bytes: int
    seconds: float
    ops_per_s: float
    mb_per_s: float  # MiB/s
    p50_ms: float
    p99_ms: float
    errors: int
    concurrency: int = 0
    client_cpu_s: float = 0.0  # CPU time of this process during the phase
    error_samples: tuple[str, ...] = field(default=())

    @property
    def client_cpu_percent(self) -> float:
        return 100.0 * self.client_cpu_s / self.seconds if self.seconds else 0.0

    @property
    def client_cpu_us_per_op(self) -> float:
        """CPU time this process spent per operation: 1e6 / this is the rate one core of
        generator could sustain, whatever else the machine was doing."""
        return 1e6 * self.client_cpu_s / self.ops if self.ops else 0.0


def _percentile_ms(sorted_seconds: Sequence[float], fraction: float) -> float:
    if not sorted_seconds:
        return 0.0
    index = min(len(sorted_seconds) - 1, int(fraction * len(sorted_seconds)))
    return sorted_seconds[index] * 1000.0


async def run_phase_async(
    name: str,
    endpoint: str,
    access_key: str,
    secret_key: str,
    op_factory: OpFactory,
    concurrency: int,
    duration_s: float | None = None,
    count: int | None = None,
    *,
    region: str = "us-east-1",
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    errors_max: int = ERRORS_MAX_DEFAULT,
    rate: float | None = None,
) -> PhaseResult:
    """Run `concurrency` workers, each on its own connection, until `duration_s` passed or
    `count` operations were started (exactly one of them). Stops early after errors_max
    errors. Latencies are of successful operations only.

    Closed loop by default: each worker sends its next request when the previous one is
    answered. With `rate`, open loop: operation i is due at start + i/rate, a worker takes
    the next operation and waits until it is due, and its latency runs from when it was
    due, not from when it was sent, so a server (or a generator) falling behind shows in
    the latencies instead of slowing the offered load (`concurrency` then only caps the
    requests in flight; an operation that finds every worker busy starts late, and that
    lateness counts)."""
    _check_phase(concurrency, duration_s, count, rate)
    async with S3Client(
        endpoint, access_key, secret_key, region, request_timeout_s, pool_idle_max=concurrency * 4
    ) as client:
        connections = await asyncio.gather(*(client.connect() for _ in range(concurrency)))
        latencies: array[float] = array("d")
        samples: list[str] = []
        next_sequence = 0
        total_bytes = 0
        errors = 0
        limit = count if count is not None else 1 << 62
        perf_counter = time.perf_counter
        started = perf_counter()
        cpu_started = time.process_time()
        deadline = started + (duration_s if duration_s is not None else 1e12)

        async def worker(connection: HttpConnection) -> None:
            nonlocal next_sequence, total_bytes, errors
            op = op_factory(client)
            record = latencies.append
            now = perf_counter()
            while now < deadline and next_sequence < limit and errors < errors_max:
                sequence = next_sequence
                next_sequence += 1
                if rate is not None:
                    due = started + sequence / rate
                    if due >= deadline:
                        break
                    if due > now:
                        await asyncio.sleep(due - now)
                    now = due
                try:
                    moved = await op(connection, sequence)
                except Exception as error:  # counted and sampled: a load run keeps going
                    errors += 1
                    if len(samples) < ERROR_SAMPLES_MAX:
                        samples.append(f"{type(error).__name__}: {error}")
                    now = perf_counter()
                    continue
                end = perf_counter()
                record(end - now)
                total_bytes += moved
                now = end

        await asyncio.gather(*(worker(connection) for connection in connections))
        seconds = perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
    counts = PhaseCounts(latencies, total_bytes, errors, tuple(samples))
    return _phase_result(name, concurrency, counts, seconds, cpu_seconds)


@dataclass(frozen=True, slots=True)
class PhaseCounts:
    """What a phase's workers recorded: latencies of successful operations (seconds)."""

    latencies: Sequence[float]
    total_bytes: int
    errors: int
    error_samples: tuple[str, ...]


def _phase_result(
    name: str, concurrency: int, counts: PhaseCounts, seconds: float, cpu_seconds: float
) -> PhaseResult:
    ordered = sorted(counts.latencies)
    return PhaseResult(
        name=name,
        ops=len(ordered),
        bytes=counts.total_bytes,
        seconds=seconds,
        ops_per_s=len(ordered) / seconds if seconds else 0.0,
        mb_per_s=counts.total_bytes / MIB / seconds if seconds else 0.0,
        p50_ms=_percentile_ms(ordered, 0.50),
        p99_ms=_percentile_ms(ordered, 0.99),
        errors=counts.errors,
        concurrency=concurrency,
        client_cpu_s=cpu_seconds,
        error_samples=counts.error_samples,
    )


def _check_phase(
    concurrency: int, duration_s: float | None, count: int | None, rate: float | None
) -> None:
    if (duration_s is None) == (count is None):
        raise ValueError("give exactly one of duration_s and count")
    if rate is not None and not rate > 0:
        raise ValueError(f"rate {rate}: must be > 0")
    if not 1 <= concurrency <= CONCURRENCY_MAX:
        raise ValueError(f"concurrency {concurrency}: must be 1..{CONCURRENCY_MAX}")


def run_async(coroutine: Coroutine[object, object, T]) -> T:
    """Run a coroutine on a fresh uvloop event loop (from synchronous code)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def run_phase(
    name: str,
    endpoint: str,
    access_key: str,
    secret_key: str,
    op_factory: OpFactory,
    concurrency: int,
    duration_s: float | None = None,
    count: int | None = None,
    *,
    region: str = "us-east-1",
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    errors_max: int = ERRORS_MAX_DEFAULT,
    rate: float | None = None,
) -> PhaseResult:
    """Synchronous run_phase_async on its own uvloop loop (see there)."""
    return run_async(
        run_phase_async(
            name,
            endpoint,
            access_key,
            secret_key,
            op_factory,
            concurrency,
            duration_s,
            count,
            region=region,
            request_timeout_s=request_timeout_s,
            errors_max=errors_max,
            rate=rate,
        )
    )


def create_bucket(
    endpoint: str, access_key: str, secret_key: str, bucket: str, region: str = "us-east-1"
) -> None:
    """Create a bucket (no error if this user already owns it)."""

    async def create() -> None:
        async with S3Client(endpoint, access_key, secret_key, region) as client:
            connection = await client.connect()
            await client.create_bucket(connection, bucket)

    run_async(create())


# --------------------------------------------------------------------------- ceiling


class TrivialServer(asyncio.Protocol):
    """Answers every request at once without looking at it: GET -> 200 with
    `response_bytes` bytes (Content-Length or chunked), DELETE -> 204, others -> 200.
    With close_every > 0, every close_every-th response on a connection says
    `Connection: close` and the server closes the connection after it."""

    def __init__(self, responses: dict[bytes, bytes], default: bytes, close_every: int) -> None:
        self._responses = responses
        self._default = default
        self._close_every = close_every
        self._answered = 0
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def on_message_complete(self) -> None:
        if self._transport is not None:
            response = self._responses.get(self._parser.get_method(), self._default)
            self._answered += 1
            if self._close_every and self._answered % self._close_every == 0:
                self._transport.write(response.replace(b"\r\n", b"\r\nConnection: close\r\n", 1))
                self._transport.close()
            else:
                self._transport.write(response)


def trivial_responses(response_bytes: int, chunked: bool) -> tuple[dict[bytes, bytes], bytes]:
    body = b"x" * response_bytes
    if chunked:
        half = response_bytes // 2
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(piece), piece) for piece in (body[:half], body[half:]) if piece
        )
        get = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    else:
        get = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (response_bytes, body)
    ok = b'HTTP/1.1 200 OK\r\nETag: "0"\r\nContent-Length: 0\r\n\r\n'
    no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
    return {b"GET": get, b"DELETE": no_content}, ok


def serve_trivial(response_bytes: int, chunked: bool, close_every: int = 0, port: int = 0) -> None:
    """Run the trivial server in this process; prints `PORT <n>` once listening."""

    async def serve() -> None:
        responses, default = trivial_responses(response_bytes, chunked)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: TrivialServer(responses, default, close_every), "127.0.0.1", port, backlog=4096
        )
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve())


@contextlib.contextmanager
def trivial_server(
    response_bytes: int = 0, chunked: bool = False, close_every: int = 0, cpu: int | None = None
) -> Iterator[str]:
    """A trivial HTTP server in a child process; yields its endpoint URL."""
    command = [sys.executable, "-m", "bench.s3_load", "--serve-trivial"]
    command += ["--size", str(response_bytes), "--close-every", str(close_every)]
    command += ["--chunked"] if chunked else []
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPOSITORY_ROOT
    )
    try:
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(process.pid, {cpu})
        line = _readline_with_deadline(process, SERVER_READY_TIMEOUT_S)
        if not line.startswith(b"PORT "):
            raise RuntimeError(f"trivial server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        _stop_trivial_server(process)


def _stop_trivial_server(process: subprocess.Popen[bytes]) -> None:
    """Terminate (kill after 10 s), and close the pipe it printed its port on."""
    try:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    finally:
        if process.stdout is not None:
            process.stdout.close()


def _readline_with_deadline(process: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    import selectors

    stdout = process.stdout
    assert stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise RuntimeError(f"trivial server printed no port within {timeout_s} s")
    return stdout.readline()


def measure_ceiling(
    op: str = "put",
    size: int = 4096,
    concurrency: int = 32,
    duration_s: float = 5.0,
    server_cpu: int | None = None,
) -> PhaseResult:
    """The generator's own ceiling: the same signed requests (PUT of `size` bytes, or GET
    returning `size` bytes, or DELETE) against a trivial server in a child process."""
    factories = {
        "put": lambda: put_op("ceiling", size),
        "get": lambda: get_op("ceiling", 1),
        "delete": lambda: delete_op("ceiling"),
    }
    if op not in factories:
        raise ValueError(f"ceiling op {op!r}: one of {sorted(factories)}")
    with trivial_server(size if op == "get" else 0, cpu=server_cpu) as endpoint:
        return run_phase(
            f"ceiling {op} (trivial server)",
            endpoint,
            "ceiling",
            "ceiling-secret",
            factories[op](),
            concurrency,
            duration_s=duration_s,
        )


# --------------------------------------------------------------------------- command line


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib)\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 4096, 4KiB, 8MiB")
    scale = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2)[:1]]
    return int(match.group(1)) * scale


def print_results(results: Sequence[PhaseResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="S3 load")
    for column in ("phase", "conc", "ops", "seconds", "ops/s", "MiB/s", "p50 ms", "p99 ms"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    table.add_column("errors", justify="right")
    table.add_column("client CPU", justify="right")
    table.add_column("client CPU/op", justify="right")
    for result in results:
        table.add_row(
            result.name,
            str(result.concurrency),
            str(result.ops),
            f"{result.seconds:.2f}",
            f"{result.ops_per_s:,.0f}",
            f"{result.mb_per_s:,.1f}",
            f"{result.p50_ms:.2f}",
            f"{result.p99_ms:.2f}",
            str(result.errors),
            f"{result.client_cpu_percent:.0f}%",
            f"{result.client_cpu_us_per_op:.0f} us",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)  # a log file or pipe: do not squeeze the columns
    console.print(table)
    for result in results:
        for sample in result.error_samples:
            console.print(f"[red]{result.name}[/red]: {sample}", markup=True, highlight=False)


OPS = ("put", "get", "range", "delete", "list", "delete-objects", "multipart")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", default=os.environ.get("S3_ENDPOINT"))
    parser.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"))
    parser.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--bucket", default="s3-load")
    parser.add_argument("--create-bucket", action="store_true")
    parser.add_argument("--op", choices=OPS, default="put")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--count", type=int, help="operations instead of a duration")
    parser.add_argument(
        "--rate",
        type=float,
        help="offer this many operations per second (open loop; latency from when each was "
        "due) instead of sending as fast as --concurrency connections allow",
    )
    parser.add_argument("--size", type=parse_size, default=4096, help="object size")
    parser.add_argument("--objects", type=int, default=1000, help="objects prepared first")
    parser.add_argument("--prefix", default="obj-")
    parser.add_argument(
        "--scattered-keys",
        action="store_true",
        help="keys start with a hash of the object number (uuid-like, spread over the "
        "key space) instead of sorting in write order",
    )
    parser.add_argument("--part-size", type=parse_size, default=8 * MIB)
    parser.add_argument("--part-concurrency", type=int, default=4)
    parser.add_argument("--range-bytes", type=parse_size, default=4096)
    parser.add_argument(
        "--random-order",
        action="store_true",
        help="get/range: pick each object at random (seeded) instead of cycling through "
        "them in key order",
    )
    parser.add_argument("--ceiling", action="store_true", help="also measure the generator")
    parser.add_argument("--serve-trivial", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chunked", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--close-every", type=int, default=0, help=argparse.SUPPRESS)
    return parser


# Operations that read, list or delete objects a preparing phase puts first.
PREPARED_OPS = ("get", "range", "delete", "list", "delete-objects")
# Operations whose keys may be scattered; listing and DeleteObjects name keys in order.
SCATTERED_OPS = ("put", "get", "range", "delete")


@dataclass(frozen=True, slots=True)
class PlannedPhase:
    name: str
    factory: OpFactory
    count: int | None = None  # None: the command's --count, else its --duration
    rate: float | None = None


def prepare_count(args: argparse.Namespace) -> int:
    """Objects put first: --objects, rounded up to whole DeleteObjects batches for that op."""
    objects: int = args.objects
    if args.op == "delete-objects":
        return -(-objects // DELETE_OBJECTS_MAX) * DELETE_OBJECTS_MAX
    return objects


def scattered_keys(args: argparse.Namespace) -> bool:
    return bool(args.scattered_keys and args.op in SCATTERED_OPS)


def prepare_phase(args: argparse.Namespace) -> PlannedPhase:
    factory = put_op(args.bucket, args.size, args.prefix, scattered_keys(args))
    return PlannedPhase(f"prepare: put {args.size} B", factory, count=prepare_count(args))


def measured_phase(args: argparse.Namespace) -> PlannedPhase:
    """The phase of --op, built when it is about to run (its bodies take memory)."""
    bucket, prefix, scattered = args.bucket, args.prefix, scattered_keys(args)
    seed = 0 if args.random_order else None
    if args.op == "put":
        factory = put_op(bucket, args.size, prefix, scattered)
        return PlannedPhase(f"put {args.size} B", factory, rate=args.rate or None)
    if args.op == "get":
        factory = get_op(bucket, args.objects, prefix, None, scattered, seed)
        return PlannedPhase(f"get {args.size} B", factory)
    if args.op == "range":
        byte_range = (0, min(args.range_bytes, args.size) - 1)
        factory = get_op(bucket, args.objects, prefix, byte_range, scattered, seed)
        return PlannedPhase(f"get range {byte_range[1] + 1} B", factory)
    if args.op == "delete":
        return PlannedPhase("delete", delete_op(bucket, prefix, scattered), count=args.objects)
    if args.op == "list":
        return PlannedPhase("list (1000 keys/page)", list_op(bucket, prefix))
    if args.op == "delete-objects":
        batches = prepare_count(args) // DELETE_OBJECTS_MAX
        factory = delete_objects_op(bucket, prefix)
        return PlannedPhase("delete-objects (1000/batch)", factory, count=batches)
    factory = multipart_op(bucket, args.size, args.part_size, args.part_concurrency)
    return PlannedPhase(f"multipart {args.size} B / {args.part_size} B parts", factory)


def phase_span(args: argparse.Namespace, planned: PlannedPhase) -> tuple[float | None, int | None]:
    """(duration_s, count) of a phase: its own count, else --count, else --duration."""
    if planned.count is not None:
        return None, planned.count
    if args.count:
        return None, args.count
    return args.duration, None


def run_planned(args: argparse.Namespace, planned: PlannedPhase) -> PhaseResult:
    duration_s, count = phase_span(args, planned)
    return run_phase(
        planned.name,
        args.endpoint,
        args.access_key,
        args.secret_key,
        planned.factory,
        args.concurrency,
        duration_s=duration_s,
        count=count,
        region=args.region,
        rate=planned.rate,
    )


def generator_ceiling(args: argparse.Namespace) -> PhaseResult:
    """The generator against a trivial server, with the operation closest to --op's."""
    op = {"get": "get", "range": "get", "delete": "delete"}.get(args.op, "put")
    size = args.range_bytes if args.op == "range" else args.size
    duration_s = args.duration if not args.count else 5.0
    return measure_ceiling(op, size, args.concurrency, duration_s)


def run_command(args: argparse.Namespace, results: list[PhaseResult]) -> None:
    """Every phase --op asks for, in order, each result appended as it is measured."""
    if args.create_bucket:
        create_bucket(args.endpoint, args.access_key, args.secret_key, args.bucket, args.region)
    if args.op in PREPARED_OPS:
        results.append(run_planned(args, prepare_phase(args)))
    results.append(run_planned(args, measured_phase(args)))
    if args.ceiling:
        results.append(generator_ceiling(args))


def usage_problem(args: argparse.Namespace) -> str | None:
    if not (args.endpoint and args.access_key and args.secret_key):
        return "--endpoint, --access-key and --secret-key are required"
    if args.concurrency < 1 or args.concurrency > CONCURRENCY_MAX:
        return f"--concurrency must be 1..{CONCURRENCY_MAX}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve_trivial:
        serve_trivial(args.size, args.chunked, args.close_every)
        return 0
    problem = usage_problem(args)
    if problem is not None:
        print(f"s3_load: {problem}", file=sys.stderr)
        return 2
    results: list[PhaseResult] = []
    try:
        run_command(args, results)
    except (S3LoadError, ValueError, RuntimeError) as error:
        if results:
            print_results(results)
        print(f"s3_load: {error}", file=sys.stderr)
        return 1
    print_results(results)
    return 1 if any(result.errors for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
