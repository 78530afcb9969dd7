"""A maintenance driver writes to local disk only in its run's scratch directory, and a
driver killed with -9 leaves it to the next run, which removes it; a live driver's
directory is never removed (`blobstore/maintenance/scratch.py`).

The sweep's liveness test is the kernel's: a run directory whose lock some live process
holds (here a child process holding the flock) is kept, one whose lock is free is not.
The system test kills a real driver with -9 (and its JVM) after its scan and checks that
nothing of Spark's appeared in the machine's temporary directory, and that the next run removed the
dead run's directory.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from blobstore.cli import maintain as maintain_cli
from blobstore.maintenance import scratch
from blobstore.maintenance.hooks import HOOKS_ENV
from blobstore.maintenance.spark import scratch_settings
from blobstore.runtime.errors import UsageError
from tests.maintenance.conftest import MaintenanceCluster
from tests.maintenance.killing import KILLED_RUN_TIMEOUT_S, kill_group, rerun, start_run
from tests.maintenance.workload import delete_heavy
from tests.waiting import wait_until

HOLDER_TIMEOUT_S = 30.0
# What Spark and its JVM leave in the temporary directory when a driver dies without
# cleaning up (before each run had its scratch directory).
SPARK_LEFTOVERS = ("spark-", "blockmgr-", "liblz4-java-", "hadoop-")
# A short ZooKeeper session: the killed driver's lock goes sooner.
RUN_ARGS = ("--grace", "0", "--zk-session-timeout", "4")
WORKLOAD_OBJECTS = 8
HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def make_run_dir(root: Path, name: str, lock: bool = True) -> Path:
    """A run directory as a driver leaves it (with a file of Spark's in it)."""
    run_dir = root / f"{scratch.RUN_PREFIX}{name}"
    (run_dir / "blockmgr-1").mkdir(parents=True)
    (run_dir / "blockmgr-1" / "shuffle_0_0_0.data").write_bytes(b"spill")
    if lock:
        (run_dir / scratch.LOCK_NAME).touch()
    return run_dir


@pytest.fixture
def lock_holder() -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes started by `hold_lock`, ended on the way out."""
    holders: list[subprocess.Popen[str]] = []
    yield holders
    for holder in holders:
        holder.kill()
        holder.wait()
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.stdout.close()


def hold_lock(holders: list[subprocess.Popen[str]], run_dir: Path) -> subprocess.Popen[str]:
    """A live process of its own holding the run directory's lock, as a driver does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir / scratch.LOCK_NAME)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    holders.append(holder)
    assert holder.stdout is not None
    assert holder.stdout.readline() == "locked\n"
    return holder


def test_the_sweep_keeps_a_live_drivers_directory_and_removes_a_dead_ones(
    tmp_path: Path, lock_holder: list[subprocess.Popen[str]], caplog: pytest.LogCaptureFixture
) -> None:
    live = make_run_dir(tmp_path, "live")
    dead = make_run_dir(tmp_path, "dead")
    other = tmp_path / "not-a-run"
    other.mkdir()
    holder = hold_lock(lock_holder, live)
    assert scratch.sweep(tmp_path, time.time()) == [dead]
    assert live.exists() and not dead.exists() and other.exists()
    assert scratch.sweep(tmp_path, time.time()) == []
    holder.kill()  # as kill -9 ends a driver: the kernel drops its lock
    holder.wait()
    with caplog.at_level("INFO", logger=scratch.__name__):
        run = scratch.open_run(tmp_path, time.time())
    assert "event=scratch_swept" in caplog.text
    assert sorted(tmp_path.iterdir()) == sorted([other, run.path])
    run.remove()


def test_a_directory_without_its_lock_goes_only_once_older_than_its_making(
    tmp_path: Path,
) -> None:
    making = make_run_dir(tmp_path, "making", lock=False)
    made_at = making.stat().st_mtime
    assert scratch.sweep(tmp_path, made_at + scratch.MAKING_S_MAX) == []
    assert making.exists()
    assert scratch.sweep(tmp_path, made_at + scratch.MAKING_S_MAX + 1) == [making]
    assert not making.exists()


def test_a_run_holds_its_lock_until_it_removes_its_directory(tmp_path: Path) -> None:
    run = scratch.open_run(tmp_path / "root", time.time())
    assert run.path.parent == tmp_path / "root"
    assert run.path.name.startswith(f"{scratch.RUN_PREFIX}") and f"-{os.getpid()}-" in run.path.name
    assert sorted(p.name for p in run.path.iterdir()) == [scratch.LOCK_NAME]
    assert (tmp_path / "root").stat().st_mode & 0o777 == 0o700
    fd = os.open(run.path / scratch.LOCK_NAME, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):  # another open file: as another process sees it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    assert scratch.sweep(tmp_path / "root", time.time() + 3600) == []
    run.remove()
    assert list((tmp_path / "root").iterdir()) == []


def test_the_root_is_the_setting_or_this_users_directory_in_the_temporary_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(scratch.SCRATCH_DIR_ENV, raising=False)
    default = Path(tempfile.gettempdir()) / f"blobstore-spark-{os.getuid()}"
    assert scratch.scratch_root() == default
    monkeypatch.setenv(scratch.SCRATCH_DIR_ENV, str(tmp_path / "scratch"))
    assert scratch.scratch_root() == tmp_path / "scratch"
    assert scratch.scratch_root(str(tmp_path / "flag")) == tmp_path / "flag"  # --scratch-dir


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_a_root_that_is_not_a_directory_of_this_user_is_one_usage_error(
    tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "root"
    if kind == "file":
        root.write_text("")
    else:
        (tmp_path / "target").mkdir()
        root.symlink_to(tmp_path / "target")
    with pytest.raises(UsageError, match=scratch.SCRATCH_DIR_ENV):
        scratch.open_run(root, time.time())


@pytest.mark.parametrize("name", ["run", "with space", 'with "quotes"', "back\\slash"])
def test_the_jvm_temporary_directory_is_one_java_option_whatever_its_path(
    tmp_path: Path, name: str
) -> None:
    run_dir = tmp_path / name
    settings = scratch_settings(run_dir)
    assert settings["spark.local.dir"] == str(run_dir)
    assert settings["spark.hadoop.hadoop.tmp.dir"] == str(run_dir / "hadoop")
    options = shlex.split(settings["spark.driver.extraJavaOptions"])  # the launcher's rules
    assert options[-1] == f"-Djava.io.tmpdir={run_dir}"


# ------------------------------------------------------------------ a real driver


def test_a_killed_drivers_scratch_stays_out_of_tmp_and_goes_with_the_next_run(
    cluster: MaintenanceCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.time()
    temp = Path(tempfile.gettempdir())
    before = set(os.listdir(temp))
    root = tmp_path / "scratch"
    monkeypatch.setenv(scratch.SCRATCH_DIR_ENV, str(root))  # the runs' (children inherit it)
    cluster.start()
    delete_heavy(cluster.s3(), "scratch", random.Random(7), WORKLOAD_OBJECTS)
    killed, names = _killed_after_scan(cluster, tmp_path)
    assert scratch.LOCK_NAME in names
    for prefix in ("blockmgr-", "spark-", "liblz4-java-"):  # the JVM wrote here, as set
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    assert killed.exists()
    report = rerun(cluster, RUN_ARGS)
    assert report["outcome"] == "ok" and not report["errors"], report
    assert not killed.exists()
    assert list(root.iterdir()) == []  # and the rerun removed its own on the way out
    assert _spark_leftovers(temp, before, began) == []


def _killed_after_scan(cluster: MaintenanceCluster, tmp_path: Path) -> tuple[Path, list[str]]:
    """Run a driver to the end of its scan, then SIGKILL it with its JVM and workers
    (no cleanup of theirs runs); return the run directory it left and what was in it
    while the driver lived."""
    log = tmp_path / "killed.log"
    pause = tmp_path / "scanned"
    process = start_run(cluster, RUN_ARGS, {HOOKS_ENV: f"scanned=pause:{pause}"}, log)
    try:
        wait_until(
            lambda: Path(f"{pause}.reached").exists() or process.poll() is not None,
            KILLED_RUN_TIMEOUT_S,
            message=lambda: f"the run never finished its scan:\n{log.read_text(errors='replace')}",
        )
        left = list(scratch.scratch_root().iterdir())
        assert len(left) == 1 and left[0].name.startswith(scratch.RUN_PREFIX), left
        names = sorted(p.name for p in left[0].iterdir())
    finally:
        kill_group(process)
    assert process.wait() == -signal.SIGKILL, log.read_text(errors="replace")
    return left[0], names


def _spark_leftovers(temp: Path, before: set[str], began: float) -> list[str]:
    """Spark's names that appeared in the temporary directory since `began` (others'
    processes may make such names too, before the test began)."""
    found = []
    for name in sorted(set(os.listdir(temp)) - before):
        if not name.startswith(SPARK_LEFTOVERS):
            continue
        try:
            if (temp / name).lstat().st_mtime >= began - 1:
                found.append(name)
        except FileNotFoundError:
            continue
    return found


def test_the_scratch_root_flag_reaches_the_options_and_overrides_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(scratch.SCRATCH_DIR_ENV, "/from/env")
    parser = argparse.ArgumentParser()
    maintain_cli.add_arguments(parser)
    assert maintain_cli.options_of(parser.parse_args(["--zk", "z"])).scratch_dir == "/from/env"
    given = parser.parse_args(["--zk", "z", "--scratch-dir", "/from/flag"])
    assert maintain_cli.options_of(given).scratch_dir == "/from/flag"
    assert "--scratch-dir" in parser.format_help()
