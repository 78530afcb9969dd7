"""`blobstore gateway` refuses bad settings with one line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def gateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BLOBSTORE_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "gateway", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )


KEYS = {"BLOBSTORE_ACCESS_KEY": "a", "BLOBSTORE_SECRET_KEY": "b"}


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), KEYS, "no ZooKeeper address"),
        (("--zk", "127.0.0.1:1"), {}, "no users"),
        (("--zk", "127.0.0.1:1", "--tls-cert", "/nonexistent"), KEYS, "--tls-cert and --tls-key"),
        (
            ("--zk", "127.0.0.1:1"),
            {**KEYS, "BLOBSTORE_ENTRY_SIZE_BYTES": "huge"},
            "BLOBSTORE_ENTRY_SIZE_BYTES",
        ),
        (("--zk", "127.0.0.1:1", "--users-file", "/nonexistent.json"), {}, "--users-file"),
        (("--zk", "127.0.0.1:1", "--workers", "0"), KEYS, "--workers"),
    ],
)
def test_bad_settings_are_one_line_errors(
    args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    result = gateway(*args, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
