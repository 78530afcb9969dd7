"""The test harness itself: a test run stopped with SIGTERM (a CI job's timeout) stops
the servers its fixtures started, instead of leaving them running without a parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


def _children(pid: int) -> set[int]:
    """The processes `pid` started (its main thread did: pytest starts the servers)."""
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _is_zookeeper(pid: int) -> bool:
    try:
        return b"zookeeper" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_a_run_stopped_with_sigterm_stops_the_servers_it_started(tmp_path: Path) -> None:
    # One test that needs the session's ZooKeeper server; it is stopped while that runs.
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'inner'}",
            "tests/catalog/test_catalog_basic.py::test_bucket_lifecycle",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers: set[int] = set()
    try:

        def started_servers() -> set[int]:
            assert run.poll() is None, "the inner run ended before its ZooKeeper started"
            return {pid for pid in _children(run.pid) if _is_zookeeper(pid)}

        servers = wait_until(
            started_servers, 120, message="no ZooKeeper server was started", interval_s=0.05
        )
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
        wait_until(
            lambda: not any(_is_zookeeper(pid) for pid in servers),
            10,
            message="ZooKeeper outlived the run",
            interval_s=0.1,
        )
    finally:
        if run.poll() is None:
            run.kill()
        for pid in servers:  # reparented once the run ended: not its children then
            if _is_zookeeper(pid):
                os.kill(pid, signal.SIGKILL)
