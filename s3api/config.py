"""The gateway's configuration: one frozen record built from the command line and
`BLOBSTORE_*` environment variables, validated at startup (errors name the setting).

Worker processes receive it as JSON in `BLOBSTORE_GATEWAY_CONFIG_JSON` (set by the
supervisor before the workers start), so every worker runs with the same settings.

Users come from BLOBSTORE_ACCESS_KEY / BLOBSTORE_SECRET_KEY (user name = the access key,
or BLOBSTORE_USER) and/or a users file: a JSON list of
`{"access_key": "...", "secret_key": "...", "user": "..."}`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blobstore.access.decision import BUCKET_OWNER_ENFORCED, OWNERSHIP_SETTINGS
from blobstore.objects.config import ObjectStoreConfig
from blobstore.runtime.errors import UsageError
from s3api.limits import (
    REQUEST_HEADER_SECTION_BYTES_DEFAULT,
    REQUEST_HEADER_SECTION_BYTES_MAX,
    REQUEST_HEADER_SECTION_BYTES_MIN,
)

CONFIG_ENV = "BLOBSTORE_GATEWAY_CONFIG_JSON"


@dataclass(frozen=True, slots=True)
class User:
    access_key: str
    secret_key: str
    name: str


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    zk: str
    host: str = "127.0.0.1"
    port: int = 9000
    workers: int = 1
    tls_cert: str | None = None
    tls_key: str | None = None
    # Virtual-hosted-style addressing: "<bucket>.<domain>" (empty: path-style only).
    domain: str = ""
    region: str = "us-east-1"
    users: tuple[User, ...] = ()
    ready_file: str | None = None
    access_log: bool = True  # one line per request (s3api/access_log.py)
    # uvicorn: connections + tasks past which new requests get 503.
    limit_concurrency: int = 1024
    timeout_graceful_shutdown_s: int = 30
    timeout_keep_alive_s: int = 5
    # A request body that stalls this long gets RequestTimeout (it holds a writer ledger).
    body_idle_timeout_s: float = 60.0
    backlog: int = 2048
    # Writes naming an ACL beyond the owner's own (public-read, x-amz-grant-*): "refuse"
    # them as S3 does with ACLs disabled, or "ignore" the ACL and store the object (for
    # applications that always send one and cannot be told not to).
    acls: str = "refuse"
    # The object ownership of a bucket created without x-amz-object-ownership (and
    # without an ACL beyond its owner's, which makes it ObjectWriter): S3's default
    # since 2023, BucketOwnerEnforced (ACLs disabled), or ObjectWriter /
    # BucketOwnerPreferred (ACLs enabled, as S3 created buckets before, for
    # applications and test suites written then).
    default_object_ownership: str = BUCKET_OWNER_ENFORCED
    # A request whose header section (its field lines) is larger is refused before it
    # is handled: 400 RequestHeaderSectionTooLarge, S3's answer past its own 8 KiB.
    max_header_bytes: int = REQUEST_HEADER_SECTION_BYTES_DEFAULT
    # SSE-C over plain HTTP: S3 refuses it (the customer's key would cross the network in
    # clear); "1" takes it anyway, for tests and for a gateway behind a TLS proxy.
    sse_c_over_http: bool = False
    objects: ObjectStoreConfig = field(default_factory=ObjectStoreConfig)

    def __post_init__(self) -> None:
        self._check_serving()
        self._check_request_handling()

    def _check_serving(self) -> None:
        """Where the gateway listens and who may use it."""
        if not self.zk:
            raise UsageError("no ZooKeeper address: pass --zk HOST:PORT or set BLOBSTORE_ZK")
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port {self.port}: must be 0..65535")
        if not 1 <= self.workers <= 256:
            raise UsageError(f"--workers {self.workers}: must be 1..256")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise UsageError("--tls-cert and --tls-key go together")
        for path in (self.tls_cert, self.tls_key):
            if path and not Path(path).is_file():
                raise UsageError(f"TLS file {path} does not exist")
        if not self.users:
            raise UsageError(
                "no users: set BLOBSTORE_ACCESS_KEY and BLOBSTORE_SECRET_KEY or pass --users-file"
            )

    def _check_request_handling(self) -> None:
        """How requests are admitted, timed out and addressed."""
        if self.acls not in ("refuse", "ignore"):
            raise UsageError(f"BLOBSTORE_GATEWAY_ACLS={self.acls!r}: must be refuse or ignore")
        if self.default_object_ownership not in OWNERSHIP_SETTINGS:
            raise UsageError(
                f"BLOBSTORE_GATEWAY_OBJECT_OWNERSHIP={self.default_object_ownership!r}: must be "
                + ", ".join(OWNERSHIP_SETTINGS)
            )
        if not 1 <= self.backlog <= 65535:
            raise UsageError(f"BLOBSTORE_GATEWAY_BACKLOG={self.backlog}: must be 1..65535")
        if self.timeout_graceful_shutdown_s < 0 or self.timeout_keep_alive_s < 0:
            raise UsageError("BLOBSTORE_GATEWAY_GRACEFUL_SHUTDOWN_S and _KEEP_ALIVE_S must be >= 0")
        if not 0 < self.body_idle_timeout_s <= 3600:
            raise UsageError(
                f"BLOBSTORE_GATEWAY_BODY_IDLE_TIMEOUT_S={self.body_idle_timeout_s}: must be in (0, 3600]"
            )
        if not 1 <= self.limit_concurrency <= 1_000_000:
            raise UsageError(
                f"BLOBSTORE_GATEWAY_LIMIT_CONCURRENCY={self.limit_concurrency}: must be 1..1000000"
            )
        header_bounds = (REQUEST_HEADER_SECTION_BYTES_MIN, REQUEST_HEADER_SECTION_BYTES_MAX)
        if not header_bounds[0] <= self.max_header_bytes <= header_bounds[1]:
            raise UsageError(
                f"--max-header-bytes {self.max_header_bytes}: must be "
                f"{header_bounds[0]}..{header_bounds[1]}"
            )
        if self.domain.startswith(".") or self.domain.endswith("."):
            raise UsageError(f"--domain {self.domain!r}: no leading or trailing dot")

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    def user_by_access_key(self) -> dict[str, User]:
        return {user.access_key: user for user in self.users}

    # ------------------------------------------------------------------ transport

    def to_json(self) -> str:
        value = dataclasses.asdict(self)
        return json.dumps(value)

    @classmethod
    def from_json(cls, text: str) -> GatewayConfig:
        value: dict[str, Any] = json.loads(text)
        value["users"] = tuple(User(**u) for u in value["users"])
        value["objects"] = ObjectStoreConfig(**value["objects"])
        return cls(**value)


def load_users(users_file: str | None, environ: Mapping[str, str]) -> tuple[User, ...]:
    users: dict[str, User] = {}
    access_key = environ.get("BLOBSTORE_ACCESS_KEY")
    secret_key = environ.get("BLOBSTORE_SECRET_KEY")
    if bool(access_key) != bool(secret_key):
        raise UsageError("BLOBSTORE_ACCESS_KEY and BLOBSTORE_SECRET_KEY go together")
    if access_key and secret_key:
        name = environ.get("BLOBSTORE_USER") or access_key
        users[access_key] = User(access_key, secret_key, name)
    if users_file:
        try:
            raw = json.loads(Path(users_file).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"--users-file {users_file}: {e}") from None
        if not isinstance(raw, list):
            raise UsageError(f"--users-file {users_file}: expected a JSON list of users")
        for index, entry in enumerate(raw):
            if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k), str) and entry.get(k) for k in ("access_key", "secret_key")
            ):
                raise UsageError(
                    f"--users-file {users_file}: entry {index} needs access_key and secret_key"
                )
            name = entry.get("user") or entry["access_key"]
            users[entry["access_key"]] = User(entry["access_key"], entry["secret_key"], str(name))
    return tuple(users.values())


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: not an integer") from None


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: not a number") from None


def config_from_args(args: Any, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    environ = os.environ if environ is None else environ
    return GatewayConfig(
        zk=args.zk or "",
        host=args.host,
        port=args.port,
        workers=args.workers,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        domain=args.domain,
        region=args.region,
        users=load_users(args.users_file, environ),
        ready_file=args.ready_file,
        access_log=args.access_log,
        limit_concurrency=_env_int(environ, "BLOBSTORE_GATEWAY_LIMIT_CONCURRENCY", 1024),
        timeout_graceful_shutdown_s=_env_int(environ, "BLOBSTORE_GATEWAY_GRACEFUL_SHUTDOWN_S", 30),
        timeout_keep_alive_s=_env_int(environ, "BLOBSTORE_GATEWAY_KEEP_ALIVE_S", 5),
        body_idle_timeout_s=_env_float(environ, "BLOBSTORE_GATEWAY_BODY_IDLE_TIMEOUT_S", 60.0),
        backlog=_env_int(environ, "BLOBSTORE_GATEWAY_BACKLOG", 2048),
        acls=environ.get("BLOBSTORE_GATEWAY_ACLS") or "refuse",
        default_object_ownership=(
            environ.get("BLOBSTORE_GATEWAY_OBJECT_OWNERSHIP") or BUCKET_OWNER_ENFORCED
        ),
        max_header_bytes=getattr(args, "max_header_bytes", REQUEST_HEADER_SECTION_BYTES_DEFAULT),
        sse_c_over_http=environ.get("BLOBSTORE_GATEWAY_SSE_C_OVER_HTTP", "0").lower()
        in ("1", "true", "yes"),
        objects=ObjectStoreConfig.from_env(environ),
    )
