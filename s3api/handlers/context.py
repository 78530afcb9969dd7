"""What every handler gets: the request, who sent it, the store, and helpers to read the
body (verified as it streams) and to load the bucket the request names once the request
is authorized on it (`S3Context.authorized_bucket`, `S3Context.decide`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload
from urllib.parse import unquote

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Scope

from blobstore.access.actions import Access, OperationRequest, required_accesses
from blobstore.access.conditions import ConditionContext
from blobstore.access.decision import ACL as ACL_RULE
from blobstore.access.decision import IMPLICIT_DENY, AccessRequest, Decision, combine, decide
from blobstore.access.policy_context import RequestFacts, condition_context
from blobstore.catalog.errors import NoSuchBucketError
from blobstore.catalog.records import BucketRecord, ObjectRecord
from blobstore.objects import ObjectStore
from blobstore.runtime.aio import IdleWatchdog
from s3api.aws_chunked import PayloadReader
from s3api.checksums import ALGORITHMS, header_name
from s3api.config import GatewayConfig
from s3api.errors import S3Error
from s3api.handlers.authorization import Authorizer, object_owner, object_state
from s3api.identities import Identity
from s3api.limits import REQUEST_XML_BYTES_MAX
from s3api.sigv4 import AuthContext

T = TypeVar("T")

QUERY_PARAMETERS_MAX = 128


def parse_query(query_string: bytes) -> dict[str, str]:
    """Query parameters, percent-decoded (first value wins; '+' is a space as S3 reads it)."""
    result: dict[str, str] = {}
    items = query_string.split(b"&")
    if len(items) > QUERY_PARAMETERS_MAX:
        raise S3Error("InvalidArgument", "Too many query parameters")
    for item in items:
        if not item:
            continue
        raw_name, _, raw_value = item.partition(b"=")
        try:
            name = unquote(raw_name.replace(b"+", b" ").decode("ascii"), errors="strict")
            value = unquote(raw_value.replace(b"+", b" ").decode("ascii"), errors="strict")
        except (UnicodeDecodeError, ValueError):
            raise S3Error("InvalidArgument", "The query string is not valid") from None
        result.setdefault(name, value)
    return result


class RequestHeaders(Headers):
    """A request's headers with dictionary lookups. Starlette's `Headers` scans the whole
    list for each `get`, `[]` and `in`, and a PUT looks up some twenty names. Lookups
    answer the first value of a name, as `Headers` does; `items()`, `getlist()` and the
    rest still see every field as sent."""

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope=scope)
        first: dict[str, str] = {}
        for name, value in reversed(self._list):
            first[name.decode("latin-1").lower()] = value.decode("latin-1")
        self._first = first

    def __getitem__(self, key: str) -> str:
        return self._first[key.lower()]

    def __contains__(self, key: Any) -> bool:
        return isinstance(key, str) and key.lower() in self._first

    @overload
    def get(self, key: str) -> str | None: ...
    @overload
    def get(self, key: str, default: str) -> str: ...
    @overload
    def get(self, key: str, default: T) -> str | T: ...
    def get(self, key: str, default: Any = None) -> Any:
        return self._first.get(key.lower(), default)

    @property
    def first_values(self) -> Mapping[str, str]:
        """Lower-case name -> its first value."""
        return self._first


class GatewayRequest(Request):
    """Starlette's `Request` with `RequestHeaders`."""

    @property
    def headers(self) -> RequestHeaders:
        headers = self.__dict__.get("_headers")
        if headers is None:
            headers = self._headers = RequestHeaders(self.scope)
        return headers


# Headers by which a write sets an ACL (x-amz-acl, x-amz-grant-*).
ACL_HEADERS = (
    "x-amz-acl",
    "x-amz-grant-full-control",
    "x-amz-grant-read",
    "x-amz-grant-read-acp",
    "x-amz-grant-write",
    "x-amz-grant-write-acp",
)
NO_CONDITIONS: ConditionContext = {}
# Writes that create an object (and may set its ACL).
OBJECT_WRITES = frozenset({"PutObject", "PostObject", "CopyObject", "CreateMultipartUpload"})


@dataclass(slots=True)
class S3Context:
    request: GatewayRequest
    request_id: str
    bucket: str
    key: str
    operation: str
    query: dict[str, str]
    user: Identity | None  # None: anonymous
    auth: AuthContext | None  # None: anonymous
    store: ObjectStore
    config: GatewayConfig
    authorizer: Authorizer
    bucket_record: BucketRecord | None = None
    decision: Decision | None = None  # the request's, once decided (the access log's)
    auth_type: str = "REST-HEADER"  # s3:authType: REST-QUERY-STRING presigned, POST forms
    _view: asyncio.Future[None] | None = None
    _conditions: ConditionContext | None = None

    def view(self) -> asyncio.Future[None]:
        """This request's view of the catalog (`ZooKeeperClient.fresh_view_started()`),
        started on first use and shared by the request's reads: they see every write
        acknowledged before it, and together cost one ZooKeeper sync, not one each."""
        if self._view is None:
            self._view = self.store.catalog.zk.fresh_view_started()
        return self._view

    @property
    def headers(self) -> RequestHeaders:
        return self.request.headers

    @property
    def method(self) -> str:
        return self.request.method

    @property
    def secure(self) -> bool:
        """The request came over TLS (S3's aws:SecureTransport)."""
        return bool(self.request.scope.get("scheme") == "https")

    @property
    def requester(self) -> str | None:
        """The user's name; None when anonymous."""
        return None if self.user is None else self.user.name

    # ------------------------------------------------------------------ authorization

    def conditions(self) -> ConditionContext:
        """The request's condition keys (`blobstore.access.policy_context`), built once."""
        if self._conditions is None:
            self._conditions = self._condition_context(self.query)
        return self._conditions

    def _condition_context(
        self, query: Mapping[str, str], existing_object_tags: Mapping[str, str] | None = None
    ) -> ConditionContext:
        scope = self.request.scope
        client = scope.get("client")
        auth = self.auth
        return condition_context(
            RequestFacts(
                user=self.requester,
                source_ip=client[0] if client else "",
                secure_transport=self.secure,
                now_s=time.time(),
                headers=self.headers.first_values,
                query=query,
                auth_type=self.auth_type,
                signature_version=(
                    "AWS"
                    if auth is not None and auth.signature_version == 2
                    else "AWS4-HMAC-SHA256"
                ),
                existing_object_tags=existing_object_tags,
            )
        )

    def may_list_key(self, bucket: BucketRecord) -> bool:
        """Whether the requester may list `bucket` under this request's key (s3:ListBucket
        with s3:prefix the key): S3 then answers a read of a missing key NoSuchKey, not
        AccessDenied. An allow becomes the request's decision."""
        accesses = required_accesses(OperationRequest(operation="ListObjects", bucket=bucket.name))
        conditions = self._condition_context({"prefix": self.key})
        decision = self._decision(accesses, bucket, None, conditions)
        if decision.allowed:
            self.decision = decision
        return decision.allowed

    def operation_request(self, operation: str = "") -> OperationRequest:
        """What of this request decides its accesses (a copy's source is decided apart,
        on its own bucket: `decide_copy_source`)."""
        names = self.headers.first_values
        return OperationRequest(
            operation=operation or self.operation,
            bucket=self.bucket,
            key=self.key,
            version_id=self.query.get("versionId", ""),
            sets_acl=not names.keys().isdisjoint(ACL_HEADERS),
            sets_tags="x-amz-tagging" in names,
        )

    def decide(
        self,
        accesses: Iterable[Access],
        bucket: BucketRecord | None,
        obj: ObjectRecord | None = None,
    ) -> Decision:
        """The decision on `accesses` (all on `bucket`; None: account-level or a bucket
        yet to be created), recorded as the request's (its first denial, else its first
        allow); not raising."""
        decision = self._decision(accesses, bucket, obj, None)
        if self.decision is None or (self.decision.allowed and not decision.allowed):
            self.decision = decision
        return decision

    def _decision(
        self,
        accesses: Iterable[Access],
        bucket: BucketRecord | None,
        obj: ObjectRecord | None,
        conditions: ConditionContext | None,
    ) -> Decision:
        """The decision on `accesses` under `conditions` (None: this request's)."""
        authorizer = self.authorizer
        requester = authorizer.requester(self.user)
        state = authorizer.bucket_state(bucket) if bucket is not None else None
        target = object_state(bucket, obj) if bucket is not None else None
        # The condition keys are read only by policies' statements: none, none built.
        consulted = requester.policies or (state is not None and state.policy is not None)
        if not consulted:
            conditions = NO_CONDITIONS
        elif conditions is None and obj is not None and obj.tags:
            # s3:ExistingObjectTag/<key>: the tags of the version the request names.
            conditions = self._condition_context(self.query, obj.tags)
        elif conditions is None:
            conditions = self.conditions()
        return combine(
            [
                decide(
                    AccessRequest(
                        requester,
                        access,
                        conditions,
                        bucket=state,
                        obj=target,
                        account_block=authorizer.account_block,
                    )
                )
                for access in accesses
            ]
        )

    def authorize(self, bucket: BucketRecord | None, obj: ObjectRecord | None = None) -> None:
        """AccessDenied unless every access this request needs on `bucket` is allowed.
        A write setting the new object's ACL asks for s3:PutObjectAcl on the object it
        creates, whose owner is the one the bucket's ownership gives it."""
        accesses = required_accesses(self.operation_request())
        if bucket is not None:
            accesses = tuple(a for a in accesses if a.bucket == bucket.name)
        if not accesses:
            return
        if bucket is not None and obj is None and self.operation in OBJECT_WRITES:
            acl_accesses = tuple(a for a in accesses if a.action == "s3:PutObjectAcl")
            accesses = tuple(a for a in accesses if a.action != "s3:PutObjectAcl")
            if acl_accesses:
                canned = self.headers.get("x-amz-acl")
                owner = object_owner(bucket, self.requester, canned.strip() if canned else None)
                created = ObjectRecord(bucket=bucket.name, key=self.key, owner=owner)
                if not self._may_set_new_acl(acl_accesses, accesses, bucket, created):
                    self.decide(acl_accesses, bucket, created)  # the denial, recorded
                    raise S3Error("AccessDenied")
        if not self.decide(accesses, bucket, obj).allowed:
            raise S3Error("AccessDenied")

    def _may_set_new_acl(
        self,
        acl_accesses: tuple[Access, ...],
        write_accesses: tuple[Access, ...],
        bucket: BucketRecord,
        created: ObjectRecord,
    ) -> bool:
        """Whether a write may give the object it creates the ACL it names: by a
        decision on s3:PutObjectAcl of that object or, for an anonymous write the bucket's
        ACL allows (a WRITE grant to AllUsers), as part of the write itself, as S3 let
        such writers set the ACL of what they upload (an explicit deny still denies)."""
        decision = self._decision(acl_accesses, bucket, created, None)
        if decision.allowed:
            return True
        if self.requester is not None or decision.rule != IMPLICIT_DENY:
            return False
        write = self._decision(write_accesses, bucket, None, None)
        return write.allowed and write.rule == ACL_RULE

    def _allowed(self, bucket: BucketRecord, obj: ObjectRecord | None) -> bool:
        try:
            self.authorize(bucket, obj)
        except S3Error:
            self.decision = None  # decided again on the newest record
            return False
        return True

    async def authorized_bucket(
        self, *, cached: bool = False, obj: ObjectRecord | None = None
    ) -> BucketRecord:
        """The bucket this request names, once the request is allowed on it
        (`blobstore.access.decision`); AccessDenied otherwise. `obj`: the object the
        request names, when its handler has read it (its owner and ACL decide in a
        bucket with ACLs enabled).

        `cached`: a record from this process's watched cache will do when it allows
        the request, without a ZooKeeper sync; only for a write whose commit checks the
        owner again against the record its version check holds (`Catalog.put_object`'s
        `owner`). A refusal is always decided on the newest record.

        A request whose `x-amz-expected-bucket-owner` names someone else is refused as
        well (S3's guard against writing to a bucket that changed hands)."""
        expected = self.headers.get("x-amz-expected-bucket-owner")
        if cached:
            try:
                record = await self.store.catalog.get_bucket(self.bucket, cached=True)
            except NoSuchBucketError:
                pass
            else:
                if (expected is None or expected == record.owner) and self._allowed(record, obj):
                    self.bucket_record = record
                    return record
        record = await self.store.catalog.get_bucket(self.bucket, self.view())
        self.bucket_record = record
        if expected is not None and expected != record.owner:
            raise S3Error("AccessDenied")
        self.authorize(record, obj)
        return record

    async def _stream(self) -> AsyncIterator[bytes]:
        """The raw body, read from the ASGI `receive` (Starlette's `Request.stream` is one
        more generator per chunk for nothing here); a client silent for the
        body idle timeout gets RequestTimeout (a stalled upload must not hold a writer
        ledger forever; `GatewayConfig.body_idle_timeout_s`). The time between reads, when
        the consumer is writing what it got, is not counted."""
        receive = self.request.receive
        watchdog = IdleWatchdog(self.config.body_idle_timeout_s)
        try:
            while True:
                watchdog.waiting()
                try:
                    message = await receive()
                except asyncio.CancelledError:
                    if watchdog.expired():
                        raise S3Error("RequestTimeout") from None
                    raise
                watchdog.progressed()
                if message["type"] != "http.request":
                    raise S3Error("IncompleteBody", "The client closed the connection")
                body = message.get("body")
                more = message.get("more_body", False)
                if body:
                    yield body
                if not more:
                    return
        finally:
            watchdog.close()

    def payload(
        self,
        size_max: int,
        extra_algorithms: Iterable[str] = (),
        default_algorithm: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PayloadReader:
        """The body, decoded (aws-chunked) and verified (signatures, SHA-256, Content-MD5,
        checksums) before its iteration ends; `headers` in place of the request's."""
        return PayloadReader(
            self.auth,
            self.headers if headers is None else headers,
            self._stream(),
            size_max=size_max,
            extra_algorithms=extra_algorithms,
            default_algorithm=default_algorithm,
        )

    async def small_body(
        self,
        size_max: int = REQUEST_XML_BYTES_MAX,
        *,
        checksum_headers_are_the_body: bool = True,
        checksum_required: bool = False,
    ) -> bytes:
        """A whole (small, e.g. XML) request body, verified. Where the request's
        x-amz-checksum-* headers describe something else (CompleteMultipartUpload: the
        whole object), they are not checked against the body. `checksum_required`: the
        body must declare Content-MD5 or a checksum (S3 requires one for some operations;
        every SDK sends it)."""
        headers = None
        if not checksum_headers_are_the_body:
            names = {header_name(a) for a in ALGORITHMS}
            headers = {k: v for k, v in self.headers.items() if k not in names}
        reader = self.payload(size_max, headers=headers)
        if checksum_required and reader.expect.content_md5 is None and not reader.expect.algorithm:
            raise S3Error(
                "InvalidRequest",
                "Missing required header for this request: Content-MD5 or x-amz-checksum-*",
            )
        pieces = [piece async for piece in reader]
        return b"".join(pieces)
