"""Bucket CORS: the configuration (Get/Put/DeleteBucketCors), OPTIONS preflight, and the
CORS headers added to ordinary responses when the request has an Origin that a rule
allows.

Rules are stored in the bucket record as `s3api.xml_requests.parse_cors_configuration` returns
them: {"ID", "AllowedOrigin": [...], "AllowedMethod": [...], "AllowedHeader": [...],
"ExposeHeader": [...], "MaxAgeSeconds"}. An origin or header pattern may hold '*'.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from blobstore.catalog.records import BucketRecord
from blobstore.objects import ObjectStore
from s3api import xml_requests, xml_responses
from s3api.errors import S3Error
from s3api.handlers._private import xml_response
from s3api.handlers.context import S3Context


def _matches(pattern: str, value: str) -> bool:
    regex = "^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$"
    return re.match(regex, value, re.IGNORECASE) is not None


def match_rule(
    rules: list[dict[str, Any]] | None, origin: str, method: str, request_headers: list[str]
) -> dict[str, Any] | None:
    for rule in rules or []:
        if method not in rule["AllowedMethod"]:
            continue
        if not any(_matches(p, origin) for p in rule["AllowedOrigin"]):
            continue
        allowed = rule.get("AllowedHeader", [])
        if all(any(_matches(p, h) for p in allowed) for h in request_headers):
            return rule
    return None


def _allow_headers(rule: dict[str, Any], origin: str, method: str) -> dict[str, str]:
    wildcard = rule["AllowedOrigin"] == ["*"]
    headers = {
        "Access-Control-Allow-Origin": "*" if wildcard else origin,
        "Access-Control-Allow-Methods": ", ".join(rule["AllowedMethod"]),
        "Vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
    }
    if not wildcard:
        headers["Access-Control-Allow-Credentials"] = "true"
    if rule.get("ExposeHeader"):
        headers["Access-Control-Expose-Headers"] = ", ".join(rule["ExposeHeader"])
    if rule.get("MaxAgeSeconds") is not None:
        headers["Access-Control-Max-Age"] = str(rule["MaxAgeSeconds"])
    return headers


async def preflight(store: ObjectStore, bucket: str, request: Request) -> Response:
    origin = request.headers.get("origin")
    method = request.headers.get("access-control-request-method")
    if not origin or not method:
        raise S3Error(
            "InvalidRequest" if not origin else "AccessForbidden",
            "Insufficient information. Origin request header needed."
            if not origin
            else "CORSResponse: This CORS request is not allowed.",
        )
    record = await store.catalog.get_bucket(bucket)
    requested = [
        h.strip().lower()
        for h in request.headers.get("access-control-request-headers", "").split(",")
        if h.strip()
    ]
    if not record.cors:
        raise S3Error("AccessForbidden", "CORSResponse: CORS is not enabled for this bucket.")
    rule = match_rule(record.cors, origin, method, requested)
    if rule is None:
        # S3's words, its spelling included.
        raise S3Error(
            "AccessForbidden",
            "CORSResponse: This CORS request is not allowed. This is usually because the "
            "evalution of Origin, request method / Access-Control-Request-Method or "
            "Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        )
    headers = _allow_headers(rule, origin, method)
    if requested:
        headers["Access-Control-Allow-Headers"] = ", ".join(requested)
    return Response(b"", headers=headers)


def cors_response_headers(record: BucketRecord, request: Request) -> list[tuple[bytes, bytes]]:
    origin = request.headers.get("origin")
    if not origin or not record.cors:
        return []
    rule = match_rule(record.cors, origin, request.method, [])
    if rule is None:
        return []
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in _allow_headers(rule, origin, request.method).items()
    ]


# ---------------------------------------------------------------------- configuration


async def get_bucket_cors(ctx: S3Context) -> Response:
    record = await ctx.authorized_bucket()
    if not record.cors:
        raise S3Error("NoSuchCORSConfiguration", BucketName=ctx.bucket)
    return xml_response(xml_responses.cors_configuration(record.cors))


async def put_bucket_cors(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    rules = xml_requests.parse_cors_configuration(await ctx.small_body())
    await ctx.store.catalog.update_bucket(ctx.bucket, lambda b: replace(b, cors=rules))
    return Response(b"", status_code=200)


async def delete_bucket_cors(ctx: S3Context) -> Response:
    await ctx.authorized_bucket()
    await ctx.store.catalog.update_bucket(ctx.bucket, lambda b: replace(b, cors=None))
    return Response(b"", status_code=204)
