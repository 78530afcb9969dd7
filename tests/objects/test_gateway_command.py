"""`blobstore gateway` refuses bad settings with one line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_stale_private_metrics_dirs_are_removed(tmp_path: Path) -> None:
    """A gateway killed with -9 leaves its metrics directory; the next one removes it,
    and never one whose supervisor still runs."""
    from s3api.main import METRICS_DIR_PREFIX, remove_stale_metrics_dirs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"{METRICS_DIR_PREFIX}{gone.pid}-abc"
    stale.mkdir()
    (stale / "counter_1.db").write_bytes(b"x")
    alive = tmp_path / f"{METRICS_DIR_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    unrelated = tmp_path / "something-else"
    unrelated.mkdir()
    assert remove_stale_metrics_dirs(str(tmp_path)) == 1
    assert not stale.exists() and alive.exists() and unrelated.exists()
