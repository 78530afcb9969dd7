"""The command line's answers to bad input: one line on stderr and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from blobstore.cli import _chosen


def blobstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blobstore.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_a_global_option_value_is_not_taken_for_the_command() -> None:
    assert _chosen(["--log-level", "DEBUG", "admin", "bookies"], {"admin"}) == "admin"
    assert _chosen(["--log-level=DEBUG", "admin"], {"admin"}) == "admin"
    result = blobstore("--log-level", "DEBUG", "admin", "--help")
    assert result.returncode == 0 and "inspect" in result.stdout.lower(), result


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--log-level", "chatty", "admin", "--help"), "--log-level"),
        (("zookeeper", "--data-dir", "/proc/1/zk", "--port", "2999"), "No such file"),
        (("zookeeper", "--data-dir", "/tmp/unused-zk", "--port", "70000"), "--port 70000"),
        (("admin", "--zk", "127.0.0.1:1", "ledgers", "show", "9" * 30), "ledger id"),
        (
            ("admin", "--zk", "127.0.0.1:1", "decommission", "127.0.0.1:1", "--wait-open-s", "nan"),
            "--wait-open-s",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args: tuple[str, ...], expected: str) -> None:
    result = blobstore(*args)
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and expected in errors[0], result.stderr
