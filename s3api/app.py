"""The gateway application: one ASGI application (`GatewayApp`) per worker process.

Every request goes through `Gateway.__call__`, a pure ASGI callable:

1. a request id is chosen; every response carries it (`x-amz-request-id`, `x-amz-id-2`)
   and so does every log line about the request;
2. the bucket, key and operation are resolved from Host, raw path, query and method;
3. authentication: the SigV4 (or V2) signature is verified from the headers alone,
   before the body is read, so a rejected upload never gets `100 Continue`; an unsigned
   request is anonymous (not refused here); operations signed by their form instead
   (POST Object, `FORM_HANDLERS`) are authenticated by their handler. Users are
   `s3api.identities`' (the bootstrap users and those kept in ZooKeeper);
4. the handler runs; it authorizes the request once the bucket's record is loaded
   (`S3Context.authorized_bucket`, `S3Context.decide`: `blobstore.access.decision` on
   the requester, its identity policies, the bucket's owner, policy, ACLs, ownership and
   public access block, the account's public access block, and the request's condition
   keys), AccessDenied when refused; a handler that returns without a decision is a
   bug (InternalError). S3 errors render as S3 XML (no body for HEAD); anything else is
   logged with its traceback and answered InternalError;
5. request metrics are recorded (operation, status, latency, bytes in and out) and the
   access log line written (both added up and written in batches), naming the
   principal and the decision.

Unsigned GET /health and GET /metrics answer health and Prometheus metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from blobstore.access.account import AccountBlockView
from blobstore.access.actions import required_accesses
from blobstore.objects import ObjectStore
from blobstore.runtime.gc_pauses import freeze_after_startup
from blobstore.runtime.heap import keep_freed_memory
from blobstore.runtime.loop_lag import LoopLagMonitor
from blobstore.runtime.sampled_gauge import PUBLISH_INTERVAL_S
from s3api import metrics
from s3api.access_log import AccessLog
from s3api.config import CONFIG_ENV, GatewayConfig
from s3api.errors import S3Error, log_server_error, render_error, to_s3_error
from s3api.handlers import FORM_HANDLERS, HANDLERS, FormRequest
from s3api.handlers.authorization import Authorizer
from s3api.handlers.context import GatewayRequest, S3Context, parse_query
from s3api.handlers.cors import cors_response_headers, preflight
from s3api.identities import Identities
from s3api.request_ids import HOST_ID, new_request_id
from s3api.routes import NOT_IMPLEMENTED, resolve_address, resolve_operation
from s3api.sigv4 import EMPTY_SHA256, PAYLOAD_SHA256, AuthContext, authenticate

logger = logging.getLogger(__name__)

# The request being served by the current task: log lines written on its behalf anywhere
# (object layer, catalog, ledger client) get `request_id=...` appended.
current_request_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "current_request_id", default=""
)


class RequestIdLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        request_id = current_request_id.get()
        if request_id and isinstance(record.msg, str) and "request_id=" not in record.msg:
            record.msg = f"{record.msg} request_id={request_id}"
        return True


def _signed(request: GatewayRequest) -> bool:
    """Whether a request carries an Authorization header or a presigned V4 signature."""
    return "authorization" in request.headers or b"X-Amz-Signature" in request.scope["query_string"]


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


def _log_response_cut(request_id: str, operation: str, error: Exception) -> None:
    logger.error(
        "event=response_cut request_id=%s operation=%s error=%r", request_id, operation, error
    )


ACCESS_LOG = AccessLog(metrics.IN_FLIGHT)


def _principal(context: S3Context | None) -> str:
    """Who the access log says asked: a user's name, `anonymous`, or `-` (not known:
    the request failed before its authentication did)."""
    if context is None:
        return "-"
    return context.requester or "anonymous"


def _check_decided(context: S3Context | None) -> None:
    """A handler that answered must have had the request authorized (a new handler
    that forgets to is a bug, answered InternalError rather than served unchecked)."""
    if context is None or context.decision is not None:
        return
    if context.operation == "DeleteObjects" or not required_accesses(context.operation_request()):
        return  # DeleteObjects decides per key; NotImplemented asks for nothing
    raise AssertionError(f"{context.operation} answered without an authorization decision")


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.store = ObjectStore(config.zk, config.objects)
        self.identities = Identities.for_gateway(config.users)
        self.account_block = AccountBlockView()
        self.authorizer = Authorizer(
            self.identities, self.account_block, frozenset(user.name for user in config.users)
        )
        self.started = False

    # ------------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, RequestIdLogFilter) for f in handler.filters):
                handler.addFilter(RequestIdLogFilter())
        ACCESS_LOG.start(self.config.access_log)
        await self.store.start()
        await self.identities.start(self.store.zk)
        await self.account_block.start(self.store.zk)
        freeze_after_startup()
        keep_freed_memory()
        self.started = True
        self._write_ready_file()
        logger.info(
            "event=gateway_worker_ready pid=%d gateway_id=%s", os.getpid(), self.store.gateway_id
        )
        publisher = asyncio.ensure_future(self._publish_metrics())
        loop_lag = LoopLagMonitor(metrics.EVENT_LOOP_LAG, f"gateway worker {os.getpid()}")
        loop_lag.start()
        try:
            yield
        finally:
            self.started = False
            loop_lag.stop()
            publisher.cancel()
            metrics.publish()
            ACCESS_LOG.flush()
            await self.account_block.stop()
            await self.identities.stop()
            await self.store.close()
            logger.info("event=gateway_worker_stopped pid=%d", os.getpid())

    @staticmethod
    async def _publish_metrics() -> None:
        """Once a second: what requests and background work counted (requests publish
        on their own when the worker is idle; this covers a busy worker, whose batched
        metrics would otherwise wait for their next update or a scrape it answers)."""
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL_S)
            metrics.publish()

    def _write_ready_file(self) -> None:
        if not self.config.ready_file:
            return
        path = Path(self.config.ready_file)
        port = int(os.environ.get("BLOBSTORE_GATEWAY_BOUND_PORT", self.config.port))
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(
            json.dumps({"port": port, "scheme": self.config.scheme, "pid": os.getpid()})
        )
        os.replace(temporary, path)

    # ------------------------------------------------------------------ requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http", scope["type"]
        request_id = new_request_id()
        host_id = HOST_ID
        started_s = time.monotonic()
        state: dict[str, Any] = {"status": 0, "operation": "Unknown", "extra_headers": []}
        bytes_in = 0
        bytes_out = 0
        body_pending = _has_body(scope)

        async def counting_receive() -> Message:
            nonlocal bytes_in, body_pending
            message = await receive()
            bytes_in += len(message.get("body", b""))
            if not message.get("more_body", False):
                body_pending = False
            return message

        async def stamped_send(message: Message) -> None:
            nonlocal bytes_out
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-amz-request-id", request_id.encode()))
                headers.append((b"x-amz-id-2", host_id.encode()))
                headers.extend(state["extra_headers"])
                if body_pending:
                    # Answered before the body was read (an error, or a rejected
                    # 100-continue): the rest of the body would be taken for the next
                    # request on this connection, so the connection ends here.
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                bytes_out += len(message.get("body", b""))
            await send(message)

        metrics.IN_FLIGHT.add(1)
        current_request_id.set(request_id)
        try:
            await self._handle(
                scope, counting_receive, stamped_send, request_id, host_id, state, body_pending
            )
        finally:
            metrics.IN_FLIGHT.add(-1)
            operation = state["operation"]
            status = str(state["status"] or 499)
            metrics.TALLY.add(operation, status, time.monotonic() - started_s, bytes_in, bytes_out)
            context: S3Context | None = state.get("context")
            ACCESS_LOG.request(
                request_id,
                operation,
                scope["method"],
                scope.get("path", ""),
                status,
                bytes_in,
                bytes_out,
                time.monotonic() - started_s,
                principal=_principal(context),
                decision=context.decision if context is not None else None,
            )

    async def _handle(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        request_id: str,
        host_id: str,
        state: dict[str, Any],
        has_body: bool,
    ) -> None:
        request = GatewayRequest(scope, receive)
        method = scope["method"]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        raw_path = raw_path.split(b"?", 1)[0]
        if method == "GET" and raw_path in (b"/health", b"/metrics") and not _signed(request):
            state["operation"] = raw_path[1:].decode().capitalize()
            await self._service_endpoint(raw_path)(scope, receive, send)
            return
        resource = raw_path.decode("utf-8", "replace")
        context: S3Context | None = None
        try:
            bucket, key, virtual = resolve_address(
                request.headers.get("host", ""), raw_path, self.config.domain
            )
            resource = f"/{bucket}/{key}" if key else f"/{bucket}" if bucket else "/"
            query = parse_query(scope["query_string"])
            operation = resolve_operation(method, bucket, key, query, request.headers)
            state["operation"] = operation
            if operation == "PreflightCors":
                response = await preflight(self.store, bucket, request)
            elif operation in FORM_HANDLERS:
                form = self._form_request(request, request_id, bucket, query)
                try:
                    response = await FORM_HANDLERS[operation](form)
                finally:
                    # Set once the handler knows who sent it.
                    context = state["context"] = form.context
                _check_decided(form.context)
            else:
                auth = self._authenticate(scope, raw_path, bucket if virtual else None, has_body)
                if auth is None and operation == NOT_IMPLEMENTED:
                    # As S3 checks authentication first: nothing said to an anonymous
                    # request about what is implemented.
                    raise S3Error("AccessDenied")
                user = None if auth is None else self.identities.get(auth.access_key)
                if auth is not None and user is None:  # disabled since its signature was checked
                    raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=auth.access_key)
                context = state["context"] = S3Context(
                    request=request,
                    request_id=request_id,
                    bucket=bucket,
                    key=key,
                    operation=operation,
                    query=query,
                    user=user,
                    auth=auth,
                    store=self.store,
                    config=self.config,
                    authorizer=self.authorizer,
                    auth_type="REST-QUERY-STRING" if auth and auth.presigned else "REST-HEADER",
                )
                response = await HANDLERS[operation](context)
                _check_decided(context)
        except Exception as e:  # noqa: BLE001 - every failure becomes an S3 error response
            response = self._error_response(e, method, resource, request_id, host_id, context)
        if context is not None and context.bucket_record is not None:
            state["extra_headers"] = cors_response_headers(context.bucket_record, request)
        try:
            await response(scope, receive, send)
        except Exception as e:
            if state["status"]:  # the response has started: too late for an error response
                _log_response_cut(request_id, state["operation"], e)
                raise
            response = self._error_response(e, method, resource, request_id, host_id, context)
            await response(scope, receive, send)

    def _authenticate(
        self, scope: Scope, raw_path: bytes, virtual_host_bucket: str | None, has_body: bool
    ) -> AuthContext | None:
        """Who signed the request, checked from its headers alone (the body is unread);
        None for an unsigned (anonymous) request, which authorization then decides on."""
        auth = authenticate(
            scope["method"],
            raw_path,
            scope["query_string"],
            scope["headers"],
            self._lookup_secret,
            time.time(),
            virtual_host_bucket=virtual_host_bucket,
        )
        if auth is None:
            return None
        if (
            auth.payload_mode == PAYLOAD_SHA256
            and auth.declared_payload_hash != EMPTY_SHA256
            and not has_body
        ):
            # A request without a body (GET, HEAD, DELETE...) whose signed payload
            # hash is not the empty body's: no handler reads a body to catch it.
            raise S3Error(
                "XAmzContentSHA256Mismatch",
                ClientComputedContentSHA256=auth.declared_payload_hash or "",
                S3ComputedContentSHA256=EMPTY_SHA256,
            )
        return auth

    def _form_request(
        self, request: GatewayRequest, request_id: str, bucket: str, query: dict[str, str]
    ) -> FormRequest:
        """A request signed by fields of its form, for its handler to authenticate."""
        return FormRequest(
            request,
            request_id,
            bucket,
            query,
            self.store,
            self.config,
            self.identities.get,
            self.authorizer,
        )

    def _lookup_secret(self, access_key: str) -> str | None:
        return self.identities.lookup_secret(access_key)

    def _error_response(
        self,
        exc: BaseException,
        method: str,
        resource: str,
        request_id: str,
        host_id: str,
        context: S3Context | None,
    ) -> Response:
        error = to_s3_error(exc, requester=context.requester if context else None)
        if not log_server_error(exc, error, request_id, resource):
            logger.info("request_id=%s error=%s message=%s", request_id, error.code, error.message)
        headers = dict(error.headers)
        if error.status == 503:
            headers.setdefault("Retry-After", "1")
        if method == "HEAD" or not error.has_body:
            return Response(b"", status_code=error.status, headers=headers)
        body = render_error(error, request_id, resource=resource, host_id=host_id)
        return Response(
            body, status_code=error.status, headers=headers, media_type="application/xml"
        )

    def _service_endpoint(self, raw_path: bytes) -> Response:
        if raw_path == b"/metrics":
            text, content_type = metrics.exposition()
            return Response(text, media_type=content_type)
        healthy = self.started and self.store.zk is not None and self.store.zk.connected
        return Response(
            json.dumps({"status": "ok" if healthy else "unavailable"}),
            status_code=200 if healthy else 503,
            media_type="application/json",
        )


class GatewayApp:
    """The ASGI application: every HTTP request goes to the gateway, which routes S3
    requests itself and turns every failure into an S3 error response; the lifespan
    protocol starts and stops it. (A Starlette application with one catch-all route
    would add two middlewares, a router and two wrappers of `send` to every request, for
    nothing the gateway uses.)"""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.gateway(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        else:  # websocket: never configured (uvicorn runs with ws="none")
            raise RuntimeError(f"unsupported ASGI scope {scope['type']!r}")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup", message
        running = self.gateway.lifespan(None)
        try:
            await running.__aenter__()
        except BaseException as e:
            logger.exception("event=gateway_worker_start_failed")
            await send({"type": "lifespan.startup.failed", "message": repr(e)})
            return
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        assert message["type"] == "lifespan.shutdown", message
        try:
            await running.__aexit__(None, None, None)
        except BaseException as e:
            logger.exception("event=gateway_worker_stop_failed")
            await send({"type": "lifespan.shutdown.failed", "message": repr(e)})
            return
        await send({"type": "lifespan.shutdown.complete"})


def create_app() -> GatewayApp:
    """The uvicorn factory: settings come from the supervisor through the environment."""
    config = GatewayConfig.from_json(os.environ[CONFIG_ENV])
    return GatewayApp(Gateway(config))
