"""The command line's answers to bad input: one line on stderr and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from blobstore.cli.main import _chosen


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
        (
            ("admin", "--zk", "127.0.0.1:1", "decommission", "127.0.0.1:1", "--rate-mb-s", "inf"),
            "--rate-mb-s inf: must be a number of MB/s in [0, 1000000)",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args: tuple[str, ...], expected: str) -> None:
    result = blobstore(*args)
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and expected in errors[0], result.stderr


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        ("BLOBSTORE_CATALOG_PAGE_SPLIT_BYTES=abc", "BLOBSTORE_CATALOG_PAGE_SPLIT_BYTES"),
        ("BLOBSTORE_LEDGER_BOOKIE_REQUEST_TIMEOUT_S=abc", "BLOBSTORE_LEDGER_BOOKIE_REQUEST"),
        ("BLOBSTORE_ZK_REQUEST_BYTES_MAX=100", "BLOBSTORE_ZK_REQUEST_BYTES_MAX"),
    ],
)
def test_the_gateway_reads_its_workers_settings_before_starting_them(
    variable: str, expected: str, tmp_path: Path
) -> None:
    """A bad value was found by each worker at its start: a traceback and exit 3."""
    name, _, value = variable.partition("=")
    environment = {
        **os.environ,
        name: value,
        "BLOBSTORE_ACCESS_KEY": "a",
        "BLOBSTORE_SECRET_KEY": "b",
    }
    result = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "gateway", "--zk", "127.0.0.1:1", "--port", "0"],
        capture_output=True, text=True, timeout=60, env=environment,
    )  # fmt: skip
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and expected in result.stderr, result.stderr


def test_the_gateway_refuses_a_ready_file_it_cannot_write(tmp_path: Path) -> None:
    environment = {**os.environ, "BLOBSTORE_ACCESS_KEY": "a", "BLOBSTORE_SECRET_KEY": "b"}
    for zk, expected in (
        ("127.0.0.1:notaport", "the port must be a number"),
        ("127.0.0.1:1", "--ready-file"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "blobstore.cli", "gateway", "--zk", zk, "--port", "0",
             "--ready-file", str(tmp_path / "missing" / "ready.json")],
            capture_output=True, text=True, timeout=60, env=environment,
        )  # fmt: skip
        assert result.returncode == 2, result
        assert "Traceback" not in result.stderr and expected in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        ("BLOBSTORE_GATEWAY_PORT", "argument --port: 'abc' (from BLOBSTORE_GATEWAY_PORT)"),
        ("BLOBSTORE_GATEWAY_WORKERS", "argument --workers: 'abc' (from BLOBSTORE_GATEWAY_WORKERS)"),
    ],
)
def test_a_bad_gateway_variable_is_named(variable: str, expected: str) -> None:
    environment = {**os.environ, variable: "abc"}
    result = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "gateway", "--zk", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, env=environment,
    )  # fmt: skip
    assert result.returncode == 2, result
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    given = blobstore("gateway", "--zk", "127.0.0.1:1", "--port", "abc")
    assert "argument --port: 'abc' is not an integer" in given.stderr, given.stderr
