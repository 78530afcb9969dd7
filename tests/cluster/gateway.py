"""`blobstore gateway` as a real child process for system tests, plus boto3 helpers.

The gateway binds port 0 on its first start and reports its port in the ready file;
restarts reuse the port. Credentials and object layer settings are passed through the
environment, as an operator would.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from tests.cluster.processes import (
    READY_TIMEOUT_S,
    ManagedProcess,
    ProcessReaper,
    blobstore_command,
    wait_for_ready_file,
)
from tests.waiting import wait_until

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-0123456789"
APPEND_BATCH_ENTRIES = 4  # the default's shape: 4 MiB batches of 1 MiB entries


def entry_size_env(entry_size_bytes: int) -> dict[str, str]:
    """A gateway's settings for entries of `entry_size_bytes`, appended in batches of
    the default's count of entries, so a test cluster's small entries still stream a
    PUT's body to the bookies as it arrives."""
    return {
        "BLOBSTORE_ENTRY_SIZE_BYTES": str(entry_size_bytes),
        "BLOBSTORE_APPEND_BATCH_BYTES": str(APPEND_BATCH_ENTRIES * entry_size_bytes),
    }


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 / localhost (openssl CLI)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = directory / "cert.pem"
    key = directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@dataclass
class GatewayProcess:
    name: str
    zk: str
    root: Path
    reaper: ProcessReaper
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: Sequence[str] = ()
    tls: tuple[Path, Path] | None = None
    port: int = 0
    managed: ManagedProcess | None = None

    @property
    def ready_file(self) -> Path:
        return self.root / "ready.json"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def endpoint(self) -> str:
        assert self.port, "gateway never started"
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> GatewayProcess:
        self.root.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        tls_args: list[str] = []
        if self.tls:
            tls_args = ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        command = blobstore_command(
            "gateway",
            "--zk",
            self.zk,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ready-file",
            str(self.ready_file),
            *tls_args,
            *self.extra_args,
        )
        env = {"BLOBSTORE_ACCESS_KEY": ACCESS_KEY, "BLOBSTORE_SECRET_KEY": SECRET_KEY, **self.env}
        if self.managed is None:
            self.managed = self.reaper.add(
                ManagedProcess(self.name, command, self.root / "gateway.log", env=env)
            )
        self.managed.command = command
        self.managed.start()
        ready = wait_for_ready_file(self.managed, self.ready_file, timeout_s)
        self.port = int(ready["port"])  # type: ignore[call-overload]
        return self

    def kill(self) -> None:
        assert self.managed is not None
        self.managed.kill()

    def stop(self) -> int | None:
        assert self.managed is not None
        return self.managed.stop()

    def alive(self) -> bool:
        return self.managed is not None and self.managed.alive()

    def metric(self, name: str) -> float:
        """The value of an unlabelled sample on this gateway's /metrics (0 if absent)."""
        with urllib.request.urlopen(f"{self.endpoint}/metrics", timeout=10) as response:
            text = response.read().decode()
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return 0.0

    def bytes_written(self) -> float:
        """Object bytes this gateway appended to ledgers."""
        return self.metric("blobstore_object_bytes_written_total")

    def log_text(self) -> str:
        try:
            return (self.root / "gateway.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def client(
        self,
        access_key: str = ACCESS_KEY,
        secret_key: str = SECRET_KEY,
        **config: Any,
    ) -> Any:
        """A boto3 S3 client for this gateway (path-style, few retries)."""
        settings: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "signature_version": "s3v4",
            "retries": {"max_attempts": 2, "mode": "standard"},
            "connect_timeout": 10,
            "read_timeout": 60,
        }
        settings.update(config)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name="us-east-1",
            verify=str(self.tls[0]) if self.tls else None,
            config=Config(**settings),
        )


# A gateway access line, up to the fields the helpers below read.
ACCESS_LINE = re.compile(
    r" INFO s3api\.access: request_id=\S+ operation=(?P<operation>\S+) method=\S+ "
    r"path=(?P<path>.*) status=(?P<status>\d+) bytes_in=(?P<bytes_in>\d+) "
)


def access_log(
    gateway: GatewayProcess, operation: str, path: str, count: int
) -> list[dict[str, str]]:
    """The fields of the gateway's access lines for `count` successful `operation`s on
    `path`, once all are written (lines go out in batches)."""
    assert count >= 1, count
    lines = wait_until(
        lambda: _access_lines(gateway, operation, path, count),
        10,
        message=lambda: repr((operation, path, _access_lines(gateway, operation, path, 0))),
        interval_s=0.1,
    )
    assert len(lines) == count, (operation, path, lines)
    return lines


def _access_lines(
    gateway: GatewayProcess, operation: str, path: str, count_min: int
) -> list[dict[str, str]]:
    """The access lines of successful `operation`s on `path`, or none while fewer than
    `count_min` are written."""
    lines = [
        match.groupdict()
        for match in map(ACCESS_LINE.search, gateway.log_text().splitlines())
        if match and match.group("operation", "path", "status") == (operation, path, "200")
    ]
    return lines if len(lines) >= count_min else []
