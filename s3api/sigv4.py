"""AWS Signature Version 4 verification for S3 requests (Authorization header and presigned).

The canonical request is rebuilt from what came over the wire: the raw path (S3 neither
normalizes nor double-encodes it), the raw query string (re-encoded pair by pair and
sorted), the signed headers (trimmed, repeated values joined with ','), and the payload
hash the client declared in x-amz-content-sha256. Clients that send the path or query in
a different encoding than they signed (characters left raw on the wire but encoded in the
canonical form) are covered by a second candidate built from the decoded, AWS-encoded
form; a signature must match one of the two.

`authenticate` checks everything that can be checked before the body is read (so a
rejected upload never gets `100 Continue`); the body itself is verified by
`s3api.aws_chunked` (streaming signatures) or against the declared SHA-256.

Legacy Signature V2 (HMAC-SHA1, header `AWS key:signature` or the AWSAccessKeyId /
Signature / Expires query) is verified too: boto3 still presigns URLs with it unless
the client is configured with signature_version="s3v4".

`authenticate_form` verifies a browser-form upload (POST Object), signed by fields of
its form (V4 or V2) rather than by its headers.
"""

from __future__ import annotations

import base64
import calendar
import datetime
import functools
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import quote, unquote, unquote_to_bytes

from s3api.errors import S3Error
from s3api.limits import PRESIGN_EXPIRES_SECONDS_MAX

__all__ = [
    "ALGORITHM",
    "AuthContext",
    "CLOCK_SKEW_SECONDS_MAX",
    "EMPTY_SHA256",
    "PAYLOAD_SHA256",
    "STREAMING_SIGNED",
    "STREAMING_SIGNED_TRAILER",
    "STREAMING_UNSIGNED_TRAILER",
    "UNSIGNED_PAYLOAD",
    "authenticate",
    "authenticate_form",
    "canonical_query_string",
    "derive_signing_key",
    "form_signature_v2",
    "form_signature_v4",
    "hmac_sha256",
]

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
PAYLOAD_SHA256 = "SHA256"  # payload_mode when x-amz-content-sha256 is a hex digest
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CLOCK_SKEW_SECONDS_MAX = 15 * 60
SIGNING_KEY_CACHE_ENTRIES_MAX = 4096
AUTHORIZATION_HEADER_BYTES_MAX = 8192
# Parsed credential scopes and Authorization headers (without their signature) kept.
PARSED_AUTH_CACHE_ENTRIES_MAX = 1024
_SIGNATURE_FIELD = "Signature="
_SIGNATURE_HEX = re.compile(r"[0-9a-f]{64}\Z")

_STREAMING_ECDSA = (
    "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
    "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
)
_PAYLOAD_MODES = (
    UNSIGNED_PAYLOAD,
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
)
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_AMZ_DATE = re.compile(r"^\d{8}T\d{6}Z$")

Headers = Iterable[tuple[bytes, bytes]] | Mapping[str, str]


@dataclass(frozen=True, slots=True)
class AuthContext:
    """Who signed a request and what the body must still prove.

    payload_mode is one of PAYLOAD_SHA256 (declared_payload_hash holds the hex digest the
    body must hash to), UNSIGNED_PAYLOAD, STREAMING_SIGNED, STREAMING_SIGNED_TRAILER or
    STREAMING_UNSIGNED_TRAILER. seed_signature starts the chunk signature chain.
    """

    access_key: str
    secret_key: str
    signing_key: bytes
    date: str  # yyyymmdd of the credential scope
    region: str
    service: str
    timestamp: str  # yyyymmddTHHMMSSZ, as signed
    seed_signature: str
    payload_mode: str
    declared_payload_hash: str | None
    presigned: bool
    signed_headers: tuple[str, ...]
    signature_version: int = 4  # 2 for legacy HMAC-SHA1 requests (no streaming, no seed)

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"

    @property
    def streaming(self) -> bool:
        return self.payload_mode.startswith("STREAMING-")


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


@functools.lru_cache(maxsize=SIGNING_KEY_CACHE_ENTRIES_MAX)
def derive_signing_key(secret_key: str, date: str, region: str, service: str) -> bytes:
    """kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")."""
    key = hmac_sha256(("AWS4" + secret_key).encode("utf-8"), date.encode("ascii"))
    key = hmac_sha256(key, region.encode("utf-8"))
    key = hmac_sha256(key, service.encode("utf-8"))
    return hmac_sha256(key, b"aws4_request")


def _header_lists(headers: Headers) -> dict[str, list[bytes]]:
    result: dict[str, list[bytes]] = {}
    if isinstance(headers, Mapping):
        for name, value in headers.items():
            result.setdefault(name.lower(), []).append(value.encode("latin-1"))
    else:
        for raw_name, raw_value in headers:
            result.setdefault(raw_name.decode("latin-1").lower(), []).append(raw_value)
    return result


def _first(headers: dict[str, list[bytes]], name: str) -> str | None:
    values = headers.get(name)
    return values[0].decode("latin-1") if values else None


def _aws_encode(raw: bytes) -> bytes:
    # quote() leaves exactly AWS's unreserved set (A-Z a-z 0-9 - _ . ~) and emits uppercase hex.
    return quote(raw, safe="").encode("ascii")


def _query_pairs(query_string: bytes) -> list[tuple[bytes, bytes]]:
    pairs = []
    for item in query_string.split(b"&"):
        if not item:
            continue
        key, _, value = item.partition(b"=")
        pairs.append((key, value))
    return pairs


def canonical_query_string(pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Decode then AWS-encode each key and value, sort by key then value, join with '&'."""
    encoded = sorted(
        (_aws_encode(unquote_to_bytes(key)), _aws_encode(unquote_to_bytes(value)))
        for key, value in pairs
    )
    return b"&".join(key + b"=" + value for key, value in encoded)


def _raw_query_string(pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    return b"&".join(key + b"=" + value for key, value in sorted(pairs))


def _normalized_path(raw_path: bytes) -> bytes:
    return b"/".join(_aws_encode(unquote_to_bytes(segment)) for segment in raw_path.split(b"/"))


def _canonical_headers(headers: dict[str, list[bytes]], signed: tuple[str, ...]) -> bytes:
    lines = []
    for name in signed:
        values = headers.get(name, [])
        value = b",".join(b" ".join(v.split()) for v in values)
        lines.append(name.encode("latin-1") + b":" + value + b"\n")
    return b"".join(lines)


def _parse_amz_date(text: str, error: Callable[[str], S3Error]) -> float:
    if not _AMZ_DATE.match(text):
        raise error(text)
    try:
        return _amz_date_seconds(text)
    except ValueError:
        raise error(text) from None


@functools.lru_cache(maxsize=1024)
def _amz_date_seconds(text: str) -> float:
    """Seconds since the epoch of a checked YYYYMMDDTHHMMSSZ (time.strptime is slow for
    every request; concurrent requests mostly share their second). ValueError when invalid."""
    fields = (int(text[0:4]), int(text[4:6]), int(text[6:8]))
    clock = (int(text[9:11]), int(text[11:13]), int(text[13:15]))
    datetime.date(*fields)  # validates the day of the month
    if clock[0] > 23 or clock[1] > 59 or clock[2] > 60:
        raise ValueError(text)
    return float(calendar.timegm((*fields, *clock, 0, 0, 0)))


def _amz_timestamp(headers: dict[str, list[bytes]]) -> str:
    amz_date = _first(headers, "x-amz-date")
    if amz_date is not None:
        return amz_date.strip()
    date = _first(headers, "date")
    if date is not None:
        try:
            parsed = parsedate_to_datetime(date)
        except (TypeError, ValueError):
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                # "-0000" and asctime dates carry no zone: HTTP dates are GMT (RFC 9110).
                parsed = parsed.replace(tzinfo=datetime.UTC)
            return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(parsed.timestamp()))
    raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")


def _check_skew(timestamp: str, signed_at: float, now: float) -> None:
    if abs(signed_at - now) > CLOCK_SKEW_SECONDS_MAX:
        raise S3Error(
            "RequestTimeTooSkewed",
            RequestTime=timestamp,
            ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            MaxAllowedSkewMilliseconds=CLOCK_SKEW_SECONDS_MAX * 1000,
        )


def _payload_mode(value: str) -> tuple[str, str | None]:
    if value in _PAYLOAD_MODES:
        return value, None
    if _HEX64.match(value):
        return PAYLOAD_SHA256, value.lower()
    if value in _STREAMING_ECDSA:
        raise S3Error("NotImplemented", "SigV4a streaming signatures are not supported")
    raise S3Error(
        "InvalidArgument",
        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a "
        "valid sha256 value.",
        ArgumentName="x-amz-content-sha256",
        ArgumentValue=value,
    )


@dataclass(frozen=True, slots=True)
class _Credential:
    access_key: str
    date: str
    region: str
    service: str


def _parse_credential(
    text: str, timestamp: str, region: str | None, error_code: str
) -> _Credential:
    return _parse_credential_of_day(text, timestamp[:8], region, error_code)


@functools.lru_cache(maxsize=PARSED_AUTH_CACHE_ENTRIES_MAX)
def _parse_credential_of_day(
    text: str, day: str, region: str | None, error_code: str
) -> _Credential:
    """`_parse_credential` for a timestamp of `day` (a client sends the same credential
    all day: parsed once; a failure raises again each time, it is not cached)."""
    parts = text.rsplit("/", 4)
    if len(parts) != 5 or not parts[0]:
        raise S3Error(
            error_code,
            'Error parsing the X-Amz-Credential parameter; the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".',
        )
    access_key, date, cred_region, service, terminal = parts
    prefix = (
        "The authorization header is malformed; "
        if error_code == "AuthorizationHeaderMalformed"
        else "Error parsing the X-Amz-Credential parameter; "
    )
    if terminal != "aws4_request":
        raise S3Error(
            error_code,
            f"{prefix}incorrect terminal '{terminal}'. This endpoint uses 'aws4_request'.",
        )
    if service != "s3":
        raise S3Error(
            error_code,
            f"{prefix}incorrect service '{service}'. This endpoint belongs to 's3'.",
        )
    if region is not None and cred_region != region:
        raise S3Error(
            error_code,
            f"{prefix}the region '{cred_region}' is wrong; expecting '{region}'",
            Region=region,
        )
    if date != day:
        raise S3Error(
            error_code,
            f'{prefix}Invalid credential date "{date}". This date is not the same as '
            'X-Amz-Date: "' + day + '".',
        )
    return _Credential(access_key, date, cred_region, service)


def _parse_authorization(value: str) -> tuple[str, tuple[str, ...], str]:
    if len(value) > AUTHORIZATION_HEADER_BYTES_MAX:
        raise S3Error("AuthorizationHeaderMalformed", "The authorization header is too long.")
    # SDKs end the header with the signature; what comes before it (algorithm,
    # credential, signed headers) repeats for a client all day and is parsed once. Any
    # other shape, and any error, goes through the full parse below.
    head, found, signature = value.rpartition(_SIGNATURE_FIELD)
    if found and _SIGNATURE_HEX.match(signature) and head.endswith(", "):
        parsed = _authorization_head(head)
        if parsed is not None:
            return parsed[0], parsed[1], signature
    return _parse_authorization_fields(value)


@functools.lru_cache(maxsize=PARSED_AUTH_CACHE_ENTRIES_MAX)
def _authorization_head(head: str) -> tuple[str, tuple[str, ...]] | None:
    """Credential and signed headers of an Authorization header that is `head` followed
    by a signature; None when the full parse fails (it then runs again and raises)."""
    try:
        credential, signed, _ = _parse_authorization_fields(head + _SIGNATURE_FIELD + "0")
    except S3Error:
        return None
    return credential, signed


def _parse_authorization_fields(value: str) -> tuple[str, tuple[str, ...], str]:
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise S3Error(
            "AuthorizationHeaderMalformed",
            "The authorization mechanism you have provided is not supported. Please use "
            "AWS4-HMAC-SHA256.",
        )
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, field_value = item.strip().partition("=")
        if not sep or name in fields:
            raise S3Error(
                "AuthorizationHeaderMalformed",
                f"The authorization header is malformed; the authorization component "
                f'"{item.strip()}" is malformed.',
            )
        fields[name] = field_value.strip()
    missing = [n for n in ("Credential", "SignedHeaders", "Signature") if not fields.get(n)]
    if missing:
        raise S3Error(
            "AuthorizationHeaderMalformed",
            f"The authorization header is malformed; missing {missing[0]}.",
        )
    signed = tuple(fields["SignedHeaders"].split(";"))
    return fields["Credential"], signed, fields["Signature"]


def _check_signed_headers(
    signed: tuple[str, ...], headers: dict[str, list[bytes]], presigned: bool
) -> None:
    """Host and every x-amz-* header present must be signed, as S3 requires.

    For presigned URLs this is what keeps the holder of a URL from adding effects the
    signer never authorised (x-amz-copy-source, x-amz-tagging, x-amz-meta-*, ...).
    """
    code = "AuthorizationQueryParametersError" if presigned else "AuthorizationHeaderMalformed"
    if any(not name or name != name.lower() for name in signed):
        raise S3Error(code, "The list of signed headers is malformed.")
    unsigned = sorted(
        name
        for name in headers
        if (name == "host" or name.startswith("x-amz-")) and name not in signed
    )
    if unsigned:
        raise S3Error(
            "AccessDenied",
            "There were headers present in the request which were not signed",
            HeadersNotSigned=", ".join(unsigned),
        )
    if "host" not in signed:
        raise S3Error(code, "The list of signed headers must include 'host'.")


def authenticate(
    method: str,
    raw_path: bytes,
    query_string: bytes,
    headers: Headers,
    lookup_secret: Callable[[str], str | None],
    now: float,
    *,
    region: str | None = None,
    virtual_host_bucket: str | None = None,
) -> AuthContext | None:
    """Verify a request's SigV4 signature; None for an anonymous (unsigned) request.

    method is the HTTP method, raw_path the ASGI scope["raw_path"], query_string the raw
    scope["query_string"], headers the ASGI scope["headers"] (or a str mapping),
    lookup_secret maps an access key to its secret (None if unknown), now is time.time().
    region, when given, must match the credential scope (else any region is accepted).
    virtual_host_bucket names the bucket taken from the Host header of a virtual-hosted
    request: legacy Signature V2 signs the path with the bucket in front.
    Raises S3Error for every failure S3 reports.
    """
    header_lists = _header_lists(headers)
    pairs = _query_pairs(query_string)
    authorization = _first(header_lists, "authorization")
    query_algorithm = _query_algorithm(pairs)
    if authorization is not None:
        if query_algorithm is not None:
            raise _invalid_authorization(
                "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
                "Signature query string parameter or the Authorization header should be "
                "specified",
                authorization,
            )
        if authorization.startswith("AWS4-"):
            return _authenticate_header(
                method, raw_path, pairs, header_lists, authorization, lookup_secret, now, region
            )
        if not authorization.startswith("AWS "):  # Bearer, Basic, ...: not AWS's at all
            raise _invalid_authorization("Unsupported Authorization Type", authorization)
    elif query_algorithm is not None:
        return _authenticate_presigned(
            method, raw_path, pairs, header_lists, query_algorithm, lookup_secret, now, region
        )
    elif not any(key == b"AWSAccessKeyId" for key, _ in pairs):
        return None
    request = _V2Request(method, raw_path, query_string, header_lists, virtual_host_bucket)
    return _authenticate_v2(request, authorization, lookup_secret, now, region)


def _query_algorithm(pairs: list[tuple[bytes, bytes]]) -> str | None:
    """The X-Amz-Algorithm query parameter of a presigned V4 URL (the last one given)."""
    algorithm = None
    for key, value in pairs:
        if key in (b"X-Amz-Algorithm", b"x-amz-algorithm"):
            algorithm = unquote(value.decode("latin-1"))
    return algorithm


def _invalid_authorization(message: str, authorization: str) -> S3Error:
    return S3Error(
        "InvalidArgument",
        message,
        ArgumentName="Authorization",
        ArgumentValue=authorization[:200],
    )


def _authenticate_header(
    method: str,
    raw_path: bytes,
    pairs: list[tuple[bytes, bytes]],
    headers: dict[str, list[bytes]],
    authorization: str,
    lookup_secret: Callable[[str], str | None],
    now: float,
    region: str | None,
) -> AuthContext:
    credential_text, signed, signature = _parse_authorization(authorization)
    timestamp = _amz_timestamp(headers)
    signed_at = _parse_amz_date(
        timestamp,
        lambda t: S3Error(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        ),
    )
    credential = _parse_credential(
        credential_text, timestamp, region, "AuthorizationHeaderMalformed"
    )
    _check_signed_headers(signed, headers, presigned=False)
    content_sha256 = _first(headers, "x-amz-content-sha256")
    if content_sha256 is None:
        raise S3Error(
            "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
        )
    payload_mode, declared = _payload_mode(content_sha256.strip())
    _check_skew(timestamp, signed_at, now)
    return _verify(
        method,
        raw_path,
        pairs,
        headers,
        signed,
        signature,
        timestamp,
        credential,
        content_sha256.strip(),
        payload_mode,
        declared,
        lookup_secret,
        presigned=False,
    )


def _authenticate_presigned(
    method: str,
    raw_path: bytes,
    pairs: list[tuple[bytes, bytes]],
    headers: dict[str, list[bytes]],
    algorithm: str,
    lookup_secret: Callable[[str], str | None],
    now: float,
    region: str | None,
) -> AuthContext:
    params = _presigned_params(algorithm, pairs)
    code = "AuthorizationQueryParametersError"
    timestamp = params["x-amz-date"]
    signed_at = _parse_amz_date(
        timestamp,
        lambda t: S3Error(
            code, "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\""
        ),
    )
    expires = _presigned_expires(params["x-amz-expires"])
    credential = _parse_credential(params["x-amz-credential"], timestamp, region, code)
    signed = tuple(params["x-amz-signedheaders"].split(";"))
    _check_signed_headers(signed, headers, presigned=True)
    _check_presigned_window(signed_at, expires, now)
    payload_value = _first(headers, "x-amz-content-sha256") or params.get(
        "x-amz-content-sha256", UNSIGNED_PAYLOAD
    )
    payload_mode, declared = _payload_mode(payload_value.strip())
    unsigned_pairs = [
        (key, value)
        for key, value in pairs
        if unquote(key.decode("latin-1")).lower() != "x-amz-signature"
    ]
    return _verify(
        method,
        raw_path,
        unsigned_pairs,
        headers,
        signed,
        params["x-amz-signature"],
        timestamp,
        credential,
        payload_value.strip(),
        payload_mode,
        declared,
        lookup_secret,
        presigned=True,
    )


def _presigned_params(algorithm: str, pairs: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The query parameters of a presigned V4 URL, names lowercased and values decoded,
    once the algorithm is known and every parameter the signature needs is present."""
    params: dict[str, str] = {}
    for key, value in pairs:
        params[unquote(key.decode("latin-1")).lower()] = unquote(value.decode("latin-1"))
    code = "AuthorizationQueryParametersError"
    if algorithm != ALGORITHM:
        raise S3Error(code, 'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"', Algorithm=algorithm)
    needed = ("x-amz-credential", "x-amz-signature", "x-amz-signedheaders", "x-amz-date")
    missing = [name for name in needed if not params.get(name)]
    if missing or "x-amz-expires" not in params:
        raise S3Error(
            code,
            "Query-string authentication version 4 requires the X-Amz-Algorithm, "
            "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and "
            "X-Amz-Expires parameters.",
        )
    return params


def _presigned_expires(text: str) -> int:
    """Seconds a presigned URL stays valid, from its X-Amz-Expires parameter."""
    code = "AuthorizationQueryParametersError"
    digits = text.removeprefix("-")
    if not digits.isdigit() or not digits.isascii():
        raise S3Error(code, "X-Amz-Expires should be a number")
    expires = int(text)
    if expires < 0:
        raise S3Error(code, "X-Amz-Expires must be non-negative")
    if expires > PRESIGN_EXPIRES_SECONDS_MAX:
        raise S3Error(
            code,
            "X-Amz-Expires must be less than a week (in seconds); that is, the given "
            f"X-Amz-Expires must be less than {PRESIGN_EXPIRES_SECONDS_MAX} seconds",
        )
    return expires


def _check_presigned_window(signed_at: float, expires: int, now: float) -> None:
    """A presigned URL is valid from its signing time (less the allowed clock skew) until
    `expires` seconds after it."""
    if signed_at - now > CLOCK_SKEW_SECONDS_MAX:
        raise S3Error("AccessDenied", "Request is not valid yet")
    if now > signed_at + expires:
        raise S3Error("AccessDenied", "Request has expired").with_fields(
            {
                "X-Amz-Expires": expires,
                "Expires": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(signed_at + expires)),
                "ServerTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            }
        )


def _verify(
    method: str,
    raw_path: bytes,
    pairs: list[tuple[bytes, bytes]],
    headers: dict[str, list[bytes]],
    signed: tuple[str, ...],
    signature: str,
    timestamp: str,
    credential: _Credential,
    payload_value: str,
    payload_mode: str,
    declared: str | None,
    lookup_secret: Callable[[str], str | None],
    *,
    presigned: bool,
) -> AuthContext:
    secret = lookup_secret(credential.access_key)
    if secret is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=credential.access_key)
    signing_key = derive_signing_key(secret, credential.date, credential.region, credential.service)
    scope = f"{credential.date}/{credential.region}/{credential.service}/aws4_request"
    path = raw_path or b"/"
    tail = _canonical_tail(headers, signed, payload_value)
    head = method.upper().encode("ascii") + b"\n"
    canonical = head + path + b"\n" + _raw_query_string(pairs) + b"\n" + tail
    provided = signature.lower().encode("ascii", "replace")
    sts_head = f"{ALGORITHM}\n{timestamp}\n{scope}\n".encode("ascii")
    string_to_sign = sts_head + hashlib.sha256(canonical).hexdigest().encode("ascii")
    expected = hmac.digest(signing_key, string_to_sign, "sha256").hex()
    if not hmac.compare_digest(expected.encode("ascii"), provided):
        # Most clients sign the request as they send it; the rare others sign it decoded
        # and re-encoded the way AWS canonicalizes.
        normalized = head + _normalized_path(path) + b"\n" + canonical_query_string(pairs)
        second = _second_candidate_signature(
            normalized + b"\n" + tail, canonical, sts_head, signing_key, provided
        )
        if second is None:
            raise S3Error(
                "SignatureDoesNotMatch",
                AWSAccessKeyId=credential.access_key,
                StringToSign=string_to_sign.decode("latin-1"),
                SignatureProvided=signature,
                CanonicalRequest=canonical.decode("latin-1"),
            )
        expected = second
    return AuthContext(
        access_key=credential.access_key,
        secret_key=secret,
        signing_key=signing_key,
        date=credential.date,
        region=credential.region,
        service=credential.service,
        timestamp=timestamp,
        seed_signature=expected,
        payload_mode=payload_mode,
        declared_payload_hash=declared,
        presigned=presigned,
        signed_headers=signed,
    )


def _canonical_tail(
    headers: dict[str, list[bytes]], signed: tuple[str, ...], payload_value: str
) -> bytes:
    """The end of a canonical request: signed headers, their names, the payload hash."""
    return (
        _canonical_headers(headers, signed)
        + b"\n"
        + ";".join(signed).encode("latin-1")
        + b"\n"
        + payload_value.encode("latin-1")
    )


def _second_candidate_signature(
    canonical: bytes, first: bytes, sts_head: bytes, signing_key: bytes, provided: bytes
) -> str | None:
    """The signature of `canonical` when it differs from the `first` canonical request
    and matches the one `provided`; None otherwise."""
    if canonical == first:
        return None
    string_to_sign = sts_head + hashlib.sha256(canonical).hexdigest().encode("ascii")
    expected = hmac.digest(signing_key, string_to_sign, "sha256").hex()
    return expected if hmac.compare_digest(expected.encode("ascii"), provided) else None


# ---------------------------------------------------------------------------- Signature V2
#
# Legacy HMAC-SHA1 signing, still what boto3 produces for presigned URLs unless the client
# is configured with signature_version="s3v4". The string to sign is
#   METHOD \n Content-MD5 \n Content-Type \n (Date | Expires) \n x-amz-headers resource
# where resource is the path (with the bucket for virtual-hosted requests) plus the
# sub-resources S3 lists, sorted, values decoded. The body is not signed.

_V2_SUBRESOURCES = frozenset(
    (
        "accelerate acl cors defaultObjectAcl location logging partNumber policy "
        "requestPayment torrent versioning versionId versions website uploads uploadId "
        "response-content-type response-content-language response-expires "
        "response-cache-control response-content-disposition response-content-encoding "
        "delete lifecycle tagging restore storageClass notification replication analytics "
        "metrics inventory select select-type object-lock"
    ).split()
)


def _v2_signature(secret: str, string_to_sign: bytes) -> bytes:
    return base64.b64encode(hmac.new(secret.encode("utf-8"), string_to_sign, hashlib.sha1).digest())


def _v2_resources(raw_path: bytes, query_string: bytes, bucket: str | None) -> list[bytes]:
    """The canonical resources a V2 signature may cover: the request's, and for a
    path-style bucket request (`/bucket`) also `/bucket/`, the form AWS documents for a
    bucket and the one boto3 signs."""
    resource = _v2_resource(raw_path, query_string, bucket)
    path = raw_path or b"/"
    if bucket or path.count(b"/") != 1 or path == b"/":
        return [resource]
    return [resource, _v2_resource(path + b"/", query_string, bucket)]


def _v2_resource(raw_path: bytes, query_string: bytes, bucket: str | None) -> bytes:
    path = raw_path or b"/"
    if bucket:
        path = b"/" + bucket.encode("utf-8") + path
    sub: list[tuple[bytes, bytes]] = []
    for item in query_string.split(b"&"):
        key, sep, value = item.partition(b"=")
        if key.decode("latin-1") in _V2_SUBRESOURCES:
            sub.append((key, key + b"=" + unquote_to_bytes(value) if sep else key))
    if not sub:
        return path
    sub.sort(key=lambda pair: pair[0])
    return path + b"?" + b"&".join(text for _, text in sub)


@dataclass(frozen=True, slots=True)
class _V2Request:
    """What a Signature V2 string to sign covers of a request."""

    method: str
    raw_path: bytes
    query_string: bytes
    headers: dict[str, list[bytes]]
    virtual_host_bucket: str | None


def _authenticate_v2(
    request: _V2Request,
    authorization: str | None,
    lookup_secret: Callable[[str], str | None],
    now: float,
    region: str | None,
) -> AuthContext:
    params = {
        unquote(k.decode("latin-1")): unquote(v.decode("latin-1"))
        for k, v in _query_pairs(request.query_string)
    }
    amz = _v2_amz_headers(params, request.headers)
    presigned = authorization is None
    if authorization is None:
        access_key, signature, date_line = _v2_query_signature(params, now)
    else:
        access_key, signature = _v2_authorization_signature(authorization)
        date_line = _v2_date_line(request.headers, "x-amz-date" in amz, now)
    secret = lookup_secret(access_key)
    if secret is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    resources = _v2_resources(request.raw_path, request.query_string, request.virtual_host_bucket)
    strings = [_v2_string_to_sign(request, params, date_line, amz, r) for r in resources]
    provided = signature.encode("latin-1", "replace")
    if not any(hmac.compare_digest(_v2_signature(secret, text), provided) for text in strings):
        raise S3Error(
            "SignatureDoesNotMatch",
            AWSAccessKeyId=access_key,
            StringToSign=strings[0].decode("latin-1"),
            SignatureProvided=signature,
        )
    timestamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return AuthContext(
        access_key=access_key,
        secret_key=secret,
        signing_key=b"",
        date=timestamp[:8],
        region=region or "us-east-1",
        service="s3",
        timestamp=timestamp,
        seed_signature="",
        payload_mode=UNSIGNED_PAYLOAD,
        declared_payload_hash=None,
        presigned=presigned,
        signed_headers=(),
        signature_version=2,
    )


def _v2_amz_headers(params: dict[str, str], headers: dict[str, list[bytes]]) -> dict[str, bytes]:
    """The x-amz-* headers a V2 signature covers, query parameters first, headers over them."""
    amz: dict[str, bytes] = {
        name.lower(): value.encode("utf-8")
        for name, value in params.items()
        if name.lower().startswith("x-amz-")
    }
    for name, values in headers.items():
        if name.startswith("x-amz-"):
            amz[name] = b",".join(v.strip() for v in values)
    return amz


def _v2_query_signature(params: dict[str, str], now: float) -> tuple[str, str, bytes]:
    """Access key, signature and Expires line of a V2 presigned URL that has not expired."""
    access_key = params.get("AWSAccessKeyId", "")
    signature = params.get("Signature", "")
    expires_text = params.get("Expires", "")
    if not signature or not expires_text.isdigit() or not expires_text.isascii():
        raise S3Error(
            "AccessDenied",
            "Query-string authentication requires the Signature, Expires and "
            "AWSAccessKeyId parameters",
        )
    if now > int(expires_text):
        raise S3Error(
            "AccessDenied",
            "Request has expired",
            Expires=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(expires_text))),
            ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        )
    return access_key, signature, expires_text.encode("ascii")


def _v2_authorization_signature(authorization: str) -> tuple[str, str]:
    """Access key and signature of an `AWS key:signature` Authorization header."""
    access_key, sep, signature = authorization[4:].strip().rpartition(":")
    if not sep or not access_key or not signature:
        raise S3Error(
            "InvalidArgument",
            "AWS authorization header is invalid.  Expected AwsAccessKeyId:signature",
        )
    return access_key, signature


def _v2_date_line(headers: dict[str, list[bytes]], amz_date_signed: bool, now: float) -> bytes:
    """The Date line of a V2 header signature, once its date is within the allowed skew.

    With x-amz-date present the line is empty: x-amz-date is signed among the amz headers.
    """
    # An x-amz-date header, even empty, is the date (S3 does not fall back to Date then).
    amz_date = _first(headers, "x-amz-date")
    date_text = amz_date if amz_date is not None else _first(headers, "date")
    try:
        signed_at = parsedate_to_datetime(date_text).timestamp() if date_text else None
    except (TypeError, ValueError):
        signed_at = None
    if signed_at is None or signed_at < 0:  # S3 reads no date before 1970 either
        raise S3Error(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        )
    _check_skew(date_text or "", signed_at, now)
    return b"" if amz_date_signed else (date_text or "").strip().encode("latin-1")


def _v2_string_to_sign(
    request: _V2Request,
    params: dict[str, str],
    date_line: bytes,
    amz: dict[str, bytes],
    resource: bytes,
) -> bytes:
    def standard(name: str) -> bytes:
        value = _first(request.headers, name)
        if value is None:
            value = params.get(name)
        return (value or "").strip().encode("latin-1")

    return (
        request.method.upper().encode("ascii")
        + b"\n"
        + standard("content-md5")
        + b"\n"
        + standard("content-type")
        + b"\n"
        + date_line
        + b"\n"
        + b"".join(name.encode("latin-1") + b":" + amz[name] + b"\n" for name in sorted(amz))
        + resource
    )


# ---------------------------------------------------------------------------- POST forms
#
# A browser-form upload (POST Object) is signed by fields of its form, not by headers:
# the signature covers the base64 `policy` field alone (s3api/post_policy.py checks the
# form against it). Signature V4: x-amz-signature = hex HMAC-SHA256 of the policy under
# the signing key of x-amz-credential (x-amz-algorithm AWS4-HMAC-SHA256, x-amz-date the
# signing time); Signature V2: signature = base64 HMAC-SHA1 of the policy under the
# secret of AWSAccessKeyId. The file is not signed.

_FORM_V4_FIELDS = ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature")
_FORM_V2_FIELDS = ("awsaccesskeyid", "signature")
_FORM_FIELD_NAMES = {
    "awsaccesskeyid": "AWSAccessKeyId",
    "signature": "signature",
    "policy": "policy",
    "x-amz-algorithm": "x-amz-algorithm",
    "x-amz-credential": "x-amz-credential",
    "x-amz-date": "x-amz-date",
    "x-amz-signature": "x-amz-signature",
}


def form_signature_v4(signing_key: bytes, policy: str) -> str:
    """x-amz-signature of a form whose base64 policy is `policy`."""
    return hmac_sha256(signing_key, policy.encode("utf-8")).hex()


def form_signature_v2(secret_key: str, policy: str) -> str:
    """signature of a Signature V2 form whose base64 policy is `policy`."""
    digest = hmac.digest(secret_key.encode("utf-8"), policy.encode("utf-8"), "sha1")
    return base64.b64encode(digest).decode("ascii")


def _missing_form_field(name: str) -> S3Error:
    shown = _FORM_FIELD_NAMES.get(name, name)
    return S3Error(
        "InvalidArgument",
        f"Bucket POST must contain a field named '{shown}'.  If it is specified, please "
        "check the order of the fields.",
        ArgumentName=shown,
        ArgumentValue="",
    )


def _form_fields(fields: Mapping[str, str], names: Iterable[str]) -> list[str]:
    """The values of `names` in `fields`, each required (InvalidArgument naming the first
    missing one)."""
    values = []
    for name in names:
        value = fields.get(name)
        if not value:
            raise _missing_form_field(name)
        values.append(value)
    return values


def authenticate_form(
    fields: Mapping[str, str],
    lookup_secret: Callable[[str], str | None],
    *,
    region: str | None = None,
) -> AuthContext | None:
    """Verify the signature of a POST Object form; None for an anonymous form (no policy
    and no signature fields).

    fields maps the form's field names, lowercased, to their values (the fields before
    the file); lookup_secret and region as for `authenticate`. The policy's expiration
    and conditions are the caller's to check (s3api/post_policy.py). Raises S3Error as
    S3 answers: InvalidArgument for a missing or malformed field, InvalidAccessKeyId,
    SignatureDoesNotMatch.
    """
    if any(name in fields for name in _FORM_V4_FIELDS):
        return _authenticate_form_v4(fields, lookup_secret, region)
    if any(name in fields for name in _FORM_V2_FIELDS):
        return _authenticate_form_v2(fields, lookup_secret)
    if "policy" in fields:
        raise _missing_form_field("awsaccesskeyid")
    return None


def _authenticate_form_v4(
    fields: Mapping[str, str], lookup_secret: Callable[[str], str | None], region: str | None
) -> AuthContext:
    algorithm, credential_text, timestamp, signature = _form_fields(fields, _FORM_V4_FIELDS)
    (policy,) = _form_fields(fields, ("policy",))
    if algorithm != ALGORITHM:
        raise S3Error(
            "InvalidArgument",
            'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"',
            ArgumentName="x-amz-algorithm",
            ArgumentValue=algorithm,
        )
    _parse_amz_date(
        timestamp,
        lambda t: S3Error(
            "InvalidArgument",
            "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"",
            ArgumentName="x-amz-date",
            ArgumentValue=t,
        ),
    )
    credential = _parse_credential(credential_text, timestamp, region, "InvalidArgument")
    secret = lookup_secret(credential.access_key)
    if secret is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=credential.access_key)
    signing_key = derive_signing_key(secret, credential.date, credential.region, credential.service)
    expected = form_signature_v4(signing_key, policy)
    if not hmac.compare_digest(expected.encode("ascii"), signature.lower().encode("utf-8")):
        raise S3Error(
            "SignatureDoesNotMatch",
            AWSAccessKeyId=credential.access_key,
            StringToSign=policy,
            SignatureProvided=signature,
        )
    return AuthContext(
        access_key=credential.access_key,
        secret_key=secret,
        signing_key=signing_key,
        date=credential.date,
        region=credential.region,
        service=credential.service,
        timestamp=timestamp,
        seed_signature=expected,
        payload_mode=UNSIGNED_PAYLOAD,
        declared_payload_hash=None,
        presigned=False,
        signed_headers=(),
    )


def _authenticate_form_v2(
    fields: Mapping[str, str], lookup_secret: Callable[[str], str | None]
) -> AuthContext:
    access_key, signature, policy = _form_fields(fields, (*_FORM_V2_FIELDS, "policy"))
    secret = lookup_secret(access_key)
    if secret is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    expected = form_signature_v2(secret, policy)
    if not hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8")):
        raise S3Error(
            "SignatureDoesNotMatch",
            AWSAccessKeyId=access_key,
            StringToSign=policy,
            SignatureProvided=signature,
        )
    timestamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return AuthContext(
        access_key=access_key,
        secret_key=secret,
        signing_key=b"",
        date=timestamp[:8],
        region="us-east-1",
        service="s3",
        timestamp=timestamp,
        seed_signature="",
        payload_mode=UNSIGNED_PAYLOAD,
        declared_payload_hash=None,
        presigned=False,
        signed_headers=(),
        signature_version=2,
    )
