"""POST Object: browser-based uploads (a multipart/form-data POST to the bucket, path
style `POST /<bucket>` or virtual-hosted `POST /`).

The request is signed by fields of its form, not by its headers, so the gateway hands it
over unauthenticated (`FormRequest`) and this handler, reading the body as it arrives:

1. reads the fields before the `file` part (at most `POST_FORM_FIELDS_BYTES_MAX`, as S3:
   MaxPostPreDataLengthExceeded); a body that is not multipart/form-data is refused
   before it is read, a broken one is MalformedPOSTRequest;
2. authenticates them (`sigv4.authenticate_form`: V4 or V2 signature of the policy);
   an unsigned form is anonymous (`anonymous_context`); either is then authorized as
   PutObject is (s3:PutObject on the key, and s3:PutObjectAcl with an `acl` field):
   an anonymous form is stored only where a bucket policy or ACL lets anyone write;
3. checks the form against its policy (`post_policy`): expiration, conditions, fields
   no condition names;
4. stores the file as PutObject stores a body: streamed into the object layer in
   bounded pieces, hashed as it streams (MD5 ETag, Content-MD5 and x-amz-checksum-*
   fields verified, S3's default checksum otherwise), content-length-range enforced,
   and visible only once whole and committed. Fields after the file are read and
   ignored, as S3 does.

The fields PutObject takes as headers (Content-Type, Cache-Control, x-amz-meta-*,
x-amz-storage-class, `acl` as x-amz-acl, ...) are given as the headers of the request
its handler pieces read (`_form_request`), so a form means what the same headers mean on
a PUT; `tagging` is a Tagging XML document, as in S3's forms.

The answer: a redirect (303) to `success_action_redirect` with the bucket, key and ETag
in its query; otherwise `success_action_status` 200 (empty), 201 (a PostResponse
document) or 204, the default.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urlsplit
from xml.sax.saxutils import escape

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.responses import Response

from blobstore.catalog.records import CONTENT_TYPE_DEFAULT, ObjectRecord
from blobstore.objects import ObjectStore, VerifiedBody, WrittenData
from blobstore.runtime.aio import IdleWatchdog
from s3api import xml_requests
from s3api.aws_chunked import PayloadReader
from s3api.checksums import ALGORITHMS, DEFAULT_ALGORITHM, header_name
from s3api.config import GatewayConfig
from s3api.errors import S3Error
from s3api.handlers import encryption
from s3api.handlers._private import quote_etag, written_version_headers
from s3api.handlers.authorization import Authorizer
from s3api.handlers.context import GatewayRequest, S3Context
from s3api.handlers.objects import (
    body_checksums,
    checksum_headers,
    storage_class,
    system_metadata,
    written_object,
)
from s3api.identities import Identity
from s3api.limits import KIB, PUT_OBJECT_SIZE_MAX, user_metadata, validate_key
from s3api.post_policy import PostPolicy, check_form, check_size, parse_policy
from s3api.sigv4 import AuthContext, authenticate_form

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

OPERATION = "PostObject"
# What may precede the file: S3 refuses more (MaxPostPreDataLengthExceeded). Fields after
# the file are ignored, and held to the same bound.
POST_FORM_FIELDS_BYTES_MAX = 20 * KIB
# Headers of one part, and the length of one header line.
POST_PART_HEADERS_MAX = 8
POST_PART_HEADER_BYTES_MAX = 4 * KIB
# Counted for each part against the bounds above, beyond its headers and value: the
# boundary line and the blank lines around it.
PART_FRAMING_BYTES = 8
BOUNDARY_BYTES_MAX = 256  # python-multipart's own limit (RFC 2046 says 70)
FILE_FIELD = "file"
KEY_FIELD = "key"
FILENAME_VARIABLE = "${filename}"
# Form fields whose meaning differs from the header of the same name: `acl` is the
# x-amz-acl header; `tagging` is XML (read on its own), not x-amz-tagging's query form.
FIELD_HEADERS = {"acl": "x-amz-acl"}
# Fields read from the form itself, never as headers (a key or a Tagging document may
# hold line breaks).
NOT_HEADERS = frozenset({KEY_FIELD, "tagging"})
_NOT_IN_HEADERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+\Z")  # lowercased
CHECKSUM_FIELDS = frozenset({"content-md5", *(header_name(a) for a in ALGORITHMS)})
SUCCESS_STATUSES = (200, 201, 204)
SUCCESS_STATUS_DEFAULT = 204
REDIRECT_STATUS = 303
assert POST_PART_HEADER_BYTES_MAX <= POST_FORM_FIELDS_BYTES_MAX, "a field's header fits"


@dataclass(slots=True)
class FormRequest:
    """A request the gateway leaves to its handler to authenticate, from its form: what
    the handler needs to do so, and (`context`) the request's context once it knows who
    sent it (the gateway's CORS headers and error records read it)."""

    request: GatewayRequest
    request_id: str
    bucket: str
    query: dict[str, str]
    store: ObjectStore
    config: GatewayConfig
    lookup_user: Callable[[str], Identity | None]
    authorizer: Authorizer
    context: S3Context | None = None

    def lookup_secret(self, access_key: str) -> str | None:
        user = self.lookup_user(access_key)
        return user.secret_key if user is not None else None


# ---------------------------------------------------------------------- the form


_PART_DATA = 0
_HEADERS_DONE = 1  # data: the part's Content-Disposition value
_PART_END = 2
_END = 3
# (kind, data, bytes of the form it stands for: a piece's length, a part's headers and
# framing)
_Event = tuple[int, bytes, int]


class _FormParser:
    """python-multipart's streaming parser, its callbacks turned into the events of each
    chunk fed (pieces of data are copies of at most the chunk's bytes)."""

    __slots__ = (
        "_parser",
        "_events",
        "_header_name",
        "_header_value",
        "_header_bytes",
        "_disposition",
    )

    def __init__(self, boundary: bytes) -> None:
        self._events: list[_Event] = []
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._header_bytes = 0
        self._disposition = b""
        callbacks: MultipartCallbacks = {
            "on_part_begin": self._part_begin,
            "on_part_data": self._part_data,
            "on_part_end": lambda: self._events.append((_PART_END, b"", 0)),
            "on_header_field": self._header_field,
            "on_header_value": self._header_value_piece,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_end": lambda: self._events.append((_END, b"", 0)),
        }
        try:
            self._parser = MultipartParser(
                boundary,
                callbacks,
                max_header_count=POST_PART_HEADERS_MAX,
                max_header_size=POST_PART_HEADER_BYTES_MAX,
            )
        except FormParserError:
            raise S3Error("MalformedPOSTRequest", "The multipart boundary is too long") from None

    def _part_begin(self) -> None:
        self._disposition = b""
        self._header_bytes = PART_FRAMING_BYTES

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        self._events.append((_PART_DATA, data[start:end], end - start))

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _header_value_piece(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if bytes(self._header_name).strip().lower() == b"content-disposition":
            self._disposition = bytes(self._header_value).strip()
        self._header_bytes += len(self._header_name) + len(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        self._events.append((_HEADERS_DONE, self._disposition, self._header_bytes))

    def feed(self, chunk: bytes) -> list[_Event]:
        self._events = []
        try:
            self._parser.write(chunk)
        except FormParserError:
            raise S3Error("MalformedPOSTRequest") from None
        return self._events


def _part_name(disposition: bytes) -> tuple[str, str | None]:
    """(field name lowercased, filename or None) of a part's Content-Disposition."""
    kind, options = parse_options_header(disposition)
    name = options.get(b"name")
    if kind != b"form-data" or name is None:
        raise S3Error("MalformedPOSTRequest", "A part of the form has no form-data name")
    filename = options.get(b"filename")
    try:
        return name.decode("utf-8").lower(), filename.decode("utf-8") if filename else None
    except UnicodeDecodeError:
        raise S3Error("MalformedPOSTRequest", "A part's name is not UTF-8") from None


class PostForm:
    """The form of a POST Object request, read as it arrives: `read_fields()` reads the
    fields before the file, `file()` then yields the file's bytes (and reads the rest)."""

    __slots__ = ("_events", "fields", "filename", "has_file")

    def __init__(self, boundary: bytes, chunks: AsyncIterator[bytes]) -> None:
        self._events = self._parsed(_FormParser(boundary), chunks)
        self.fields: dict[str, str] = {}
        self.filename = ""
        self.has_file = False

    @staticmethod
    async def _parsed(parser: _FormParser, chunks: AsyncIterator[bytes]) -> AsyncIterator[_Event]:
        async for chunk in chunks:
            for event in parser.feed(chunk):
                yield event

    async def read_fields(self) -> None:
        """Up to the file's data (or the end of a form without a file)."""
        name = ""
        value = bytearray()
        size = 0
        async for kind, data, counted in self._events:
            size += counted
            if size > POST_FORM_FIELDS_BYTES_MAX:
                raise S3Error("MaxPostPreDataLengthExceeded")
            if kind == _HEADERS_DONE:
                name, filename = _part_name(data)
                if name == FILE_FIELD:
                    self.filename, self.has_file = filename or "", True
                    return
            elif kind == _PART_DATA:
                value += data
            elif kind == _PART_END:
                self._add_field(name, bytes(value))
                value.clear()
            else:
                return
        raise S3Error("MalformedPOSTRequest", "The body ended within the form")

    def _add_field(self, name: str, value: bytes) -> None:
        if name in self.fields:
            raise S3Error(
                "InvalidArgument",
                f"The form has more than one field named '{name}'",
                ArgumentName=name,
                ArgumentValue=self.fields[name],
            )
        try:
            self.fields[name] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise S3Error(
                "InvalidArgument", f"The field '{name}' is not UTF-8", ArgumentName=name
            ) from None

    async def file(self) -> AsyncIterator[bytes]:
        """The file's bytes as they arrive; then the rest of the form is read (and its
        fields ignored) before the iteration ends."""
        assert self.has_file, "no file in the form"
        async for kind, data, _ in self._events:
            if kind == _PART_DATA:
                yield data
            elif kind == _PART_END:
                break
        else:
            raise S3Error("MalformedPOSTRequest", "The body ended within the file")
        size = 0
        async for kind, _, counted in self._events:
            size += counted
            if size > POST_FORM_FIELDS_BYTES_MAX:
                raise S3Error("MalformedPOSTRequest", "The fields after the file are too large")
            if kind == _END:
                return
        raise S3Error("MalformedPOSTRequest", "The body ended within the form")


def form_boundary(content_type: str) -> bytes:
    """The boundary of a multipart/form-data body; PreconditionFailed for any other."""
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise S3Error(
            "PreconditionFailed",
            Condition="Bucket POST must be of the enclosure-type multipart/form-data",
        )
    if len(boundary) > BOUNDARY_BYTES_MAX:
        raise S3Error("MalformedPOSTRequest", "The multipart boundary is too long")
    return boundary


async def _received(request: GatewayRequest, idle_timeout_s: float) -> AsyncIterator[bytes]:
    """The raw body, as `S3Context` reads it: a client silent for the body idle timeout
    gets RequestTimeout (a stalled upload must not hold a writer ledger forever)."""
    watchdog = IdleWatchdog(idle_timeout_s)
    try:
        while True:
            watchdog.waiting()
            try:
                message = await request.receive()
            except asyncio.CancelledError:
                if watchdog.expired():
                    raise S3Error("RequestTimeout") from None
                raise
            watchdog.progressed()
            if message["type"] != "http.request":
                raise S3Error("IncompleteBody", "The client closed the connection")
            if message.get("body"):
                yield message["body"]
            if not message.get("more_body", False):
                return
    finally:
        watchdog.close()


# ---------------------------------------------------------------------- who and what


def anonymous_context(form: FormRequest, fields: dict[str, str]) -> S3Context:
    """An unsigned form (no policy, no signature): S3 stores it where the bucket lets
    anyone write (a bucket policy or ACL granting s3:PutObject to everyone), which the
    authorization of `post_object` decides."""
    return _context(form, fields, None, None)


def _context(
    form: FormRequest, fields: dict[str, str], user: Identity | None, auth: AuthContext | None
) -> S3Context:
    context = S3Context(
        request=_form_request(form, fields),
        request_id=form.request_id,
        bucket=form.bucket,
        key="",
        operation=OPERATION,
        query=form.query,
        user=user,
        auth=auth,
        store=form.store,
        config=form.config,
        authorizer=form.authorizer,
        auth_type="POST",
    )
    form.context = context
    return context


def _form_request(form: FormRequest, fields: dict[str, str]) -> GatewayRequest:
    """The request as PutObject's pieces read it: the form's fields as its headers (but
    for those read from the form itself, which may hold what a header cannot)."""
    headers = []
    for name, value in fields.items():
        if name in NOT_HEADERS:
            continue
        if not _HEADER_NAME.match(name) or _NOT_IN_HEADERS.search(value):
            # What a header cannot carry, a stored header (Content-Type, metadata)
            # cannot either.
            raise S3Error(
                "InvalidArgument",
                f"The field '{name}' holds characters a header cannot carry",
                ArgumentName=name,
            )
        headers.append((FIELD_HEADERS.get(name, name).encode("utf-8"), value.encode("utf-8")))
    return GatewayRequest({**form.request.scope, "headers": headers}, form.request.receive)


def authenticated_context(form: FormRequest, fields: dict[str, str]) -> S3Context:
    """The request's context once its form's signature is verified (its key is set
    once the form is known to hold a file)."""
    auth = authenticate_form(fields, form.lookup_secret)
    if auth is None:
        return anonymous_context(form, fields)
    user = form.lookup_user(auth.access_key)
    assert user is not None, f"no user for verified key {auth.access_key!r}"
    return _context(form, fields, user, auth)


def object_key(fields: dict[str, str], filename: str) -> str:
    """The `key` field, ${filename} replaced by the file's name."""
    key = fields.get(KEY_FIELD)
    if not key:
        raise S3Error(
            "InvalidArgument",
            "Bucket POST must contain a field named 'key'.  If it is specified, please check "
            "the order of the fields.",
            ArgumentName=KEY_FIELD,
            ArgumentValue="",
        )
    return key.replace(FILENAME_VARIABLE, filename)


def checked_policy(fields: dict[str, str], bucket: str, key: str, now_s: float) -> PostPolicy:
    """The form's policy, once the form meets it (the bucket and the stored key are
    checked as fields)."""
    policy = parse_policy(fields["policy"])
    check_form(policy, {**fields, "bucket": bucket, KEY_FIELD: key}, now_s)
    return policy


def _template(ctx: S3Context, fields: dict[str, str]) -> ObjectRecord:
    tagging = fields.get("tagging")
    return ObjectRecord(
        bucket=ctx.bucket,
        key=ctx.key,
        content_type=ctx.headers.get("content-type") or CONTENT_TYPE_DEFAULT,
        metadata=user_metadata(ctx.headers.items()),
        system_metadata=system_metadata(ctx),
        storage_class=storage_class(ctx),
        tags=xml_requests.parse_tagging(tagging.encode("utf-8")) if tagging else {},
    )


# ---------------------------------------------------------------------- the operation


async def post_object(form: FormRequest) -> Response:
    """POST Object: the steps of the module's docstring, in its order."""
    body = PostForm(
        form_boundary(form.request.headers.get("content-type", "")),
        _received(form.request, form.config.body_idle_timeout_s),
    )
    await body.read_fields()
    fields = body.fields
    ctx = authenticated_context(form, fields)
    if not body.has_file:
        raise S3Error("IncorrectNumberOfFilesInPostRequest")
    ctx.key = key = object_key(fields, body.filename)
    policy = checked_policy(fields, ctx.bucket, key, time.time()) if "policy" in fields else None
    validate_key(key)
    bucket = await ctx.authorized_bucket(cached=True)  # the commit checks the owner again
    owner, acl = written_object(ctx, bucket)
    sse = encryption.write_spec(ctx, bucket)
    template = replace(
        _template(ctx, fields), owner=owner, system_metadata=system_metadata(ctx) | acl
    )
    size_max = PUT_OBJECT_SIZE_MAX
    if policy is not None and policy.size_max is not None:
        size_max = min(size_max, policy.size_max)
    checksum_fields = {k: v for k, v in fields.items() if k in CHECKSUM_FIELDS}
    reader = PayloadReader(
        ctx.auth,
        checksum_fields,
        body.file(),
        size_max=size_max,
        default_algorithm=DEFAULT_ALGORITHM,
    )

    async def finish(data: WrittenData) -> VerifiedBody:
        if policy is not None:
            assert reader.digest is not None, "the body was not read to its end"
            check_size(policy, reader.digest.size, complete=True)  # the plaintext's
        return body_checksums(reader)

    result = await ctx.store.put_object(
        template,
        aiter(reader),
        size_max=size_max,
        finish=finish,
        compute_md5=False,
        owner=bucket.owner,
        sse=sse,
    )
    return _answer(form, fields, result.record, sse.customer_key)


def _answer(
    form: FormRequest, fields: dict[str, str], record: ObjectRecord, customer_key: bytes
) -> Response:
    """The redirect or the status the form asks for (204 by default)."""
    etag = quote_etag(record.etag)
    headers = {"ETag": etag, "Location": _location(form, record.key)}
    headers.update(checksum_headers(record.checksums))
    headers.update(encryption.response_headers(record.sse, customer_key))
    headers.update(written_version_headers(record.version_id))
    redirect = redirect_url(
        fields.get("success_action_redirect") or fields.get("redirect", ""),
        record.bucket,
        record.key,
        etag,
    )
    if redirect:
        headers["Location"] = redirect
        return Response(b"", status_code=REDIRECT_STATUS, headers=headers)
    status = success_status(fields.get("success_action_status", ""))
    if status != 201:
        return Response(b"", status_code=status, headers=headers)
    document = post_response(headers["Location"], record.bucket, record.key, etag)
    return Response(document, status_code=201, headers=headers, media_type="application/xml")


def success_status(value: str) -> int:
    """success_action_status: 200, 201 or 204; anything else is the default, 204."""
    status = int(value) if value.isascii() and value.isdigit() and len(value) == 3 else 0
    return status if status in SUCCESS_STATUSES else SUCCESS_STATUS_DEFAULT


def redirect_url(url: str, bucket: str, key: str, etag: str) -> str:
    """Where a form with success_action_redirect goes once stored ("" when it names no
    http(s) URL): the URL with bucket, key and ETag added to its query."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or _NOT_IN_HEADERS.search(url):
        return ""
    query = urlencode({"bucket": bucket, "key": key, "etag": etag}, quote_via=quote)
    return f"{url}{'&' if parts.query else '?'}{query}"


def _location(form: FormRequest, key: str) -> str:
    """The object's URL, as the request addressed its bucket (path or virtual-hosted)."""
    scope = form.request.scope
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    path = raw_path.split(b"?", 1)[0].decode("latin-1").rstrip("/")
    host = form.request.headers.get("host", "")
    return f"{scope['scheme']}://{host}{path}/{quote(key)}"


def post_response(location: str, bucket: str, key: str, etag: str) -> bytes:
    """The document of a 201 answer."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<PostResponse>'
        f"<Location>{escape(location)}</Location><Bucket>{escape(bucket)}</Bucket>"
        f"<Key>{escape(key)}</Key><ETag>{escape(etag)}</ETag></PostResponse>"
    ).encode()
