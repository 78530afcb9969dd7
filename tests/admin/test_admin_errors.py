"""Admin command mistakes are one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from blobstore.cli.zookeeper_server import free_port


def _admin(*args: str, zk_env: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("BLOBSTORE_ZK", None)
    if zk_env:
        env["BLOBSTORE_ZK"] = zk_env
    return subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("decommission", "not-a-bookie-id"), "bookie id must be host:port"),
        (("fsck", "--concurrency", "0"), "--concurrency must be"),
        (("decommission", "127.0.0.1:3181", "--wait-open-s", "-1"), "--wait-open-s"),
        (("decommission", "127.0.0.1:3181", "--rate-mb-s", "-5"), "--rate-mb-s -5: must be"),
        (("du",), "cannot reach ZooKeeper"),
    ],
)
def test_one_clear_line(args: tuple[str, ...], expected: str) -> None:
    result = _admin("--zk", f"127.0.0.1:{free_port()}", *args)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("blobstore: error: "), result.stderr
    assert expected in lines[0], lines[0]


def test_unknown_bookie_and_bucket_are_one_line(zk_connect: str) -> None:
    result = _admin("--zk", zk_connect, "decommission", "127.0.0.1:1")
    assert result.returncode == 2 and "unknown bookie" in result.stderr, result.stderr
    result = _admin("fsck", "--bucket", "nope", "--json", zk_env=zk_connect)  # BLOBSTORE_ZK
    assert result.returncode == 2 and "no bucket named" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    result = _admin("du")
    assert result.returncode == 2 and "no ZooKeeper address" in result.stderr, result.stderr


def test_a_missing_chroot_is_one_line_not_an_empty_cluster(zk_connect: str) -> None:
    """A mistyped /chroot used to list "0 bookie(s) registered" and exit 0."""
    for args in (("bookies",), ("fsck",), ("ledgers",)):
        result = _admin("--zk", f"{zk_connect}/no-such-chroot", *args)
        assert result.returncode == 2, (args, result)
        assert "does not exist" in result.stderr and "Traceback" not in result.stderr, result
