"""`blobstore standalone` runs `blobstore maintain` on its own: `--maintenance-interval`
seconds after the cluster serves and after each run ends, one run at a time, each in a
process group of its own that is ended whole when it runs too long or the cluster stops.
Its reports reach ZooKeeper (`admin maintenance status`), its output
DATA/logs/maintenance.log, its metrics DATA/maintenance.prom. With an interval of 0 no
run is ever started."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from blobstore.cli.maintenance_schedule import (
    MaintenanceRunner,
    MaintenanceSchedule,
    maintenance_end_line,
    maintenance_schedule,
    maintenance_step,
    rotate_log,
)
from blobstore.cli.zookeeper_server import free_port
from blobstore.runtime.errors import UsageError
from tests.cluster.processes import ProcessReaper
from tests.standalone.cluster import Standalone, group_members
from tests.waiting import wait_until

# A run takes 15-40 s (Spark starts in 5-10 s); the bound only catches a hang.
RUN_TIMEOUT_S = 180.0
ADMIN_TIMEOUT_S = 60.0
STARTED = re.compile(r"^maintenance: run started \(pid (\d+);", re.MULTILINE)
ENDED = re.compile(r"^maintenance: run (\S+) (ok|failed) in ", re.MULTILINE)


def test_maintenance_runs_on_schedule_and_stops_with_the_cluster(
    tmp_path: Path, reaper: ProcessReaper
) -> None:
    data = tmp_path / "data"
    schedule = ("--maintenance-interval", "5", "--maintenance-grace", "0")
    cluster = Standalone(data, free_port(), reaper, extra_args=schedule).start()
    assert "`blobstore maintain` every 5 s" in _output(cluster), cluster.log_tails()
    _put_and_delete(cluster.s3())

    run_id = wait_until(
        lambda: _first_ended_run(cluster),
        RUN_TIMEOUT_S,
        message=lambda: f"no maintenance run ended:\n{cluster.log_tails()}",
        interval_s=0.2,
    )
    status = _status(str(cluster.ready["zk"]))
    ended = next(r for r in status["runs"] if r["run_id"] == run_id)
    assert ended["state"] == "ok" and not ended["errors"], ended
    assert ended["records_scanned"] >= 1, ended  # the object left in place
    assert run_id in (data / "logs" / "maintenance.log").read_text()
    assert (
        "blobstore_maintenance_last_success_time_seconds" in (data / "maintenance.prom").read_text()
    )

    # The next run starts 5 s after the first ended; the cluster stops in its middle.
    driver_pid = wait_until(
        lambda: _started_pids(cluster)[1:],
        RUN_TIMEOUT_S,
        message=lambda: f"no second run started:\n{cluster.log_tails()}",
        interval_s=0.1,
    )[0]
    assert cluster.terminate() == 0, cluster.log_tails()
    assert "maintenance: run stopped with the cluster" in _output(cluster)
    cluster.assert_nothing_left()
    wait_until(
        lambda: not group_members(driver_pid),  # the driver and its Spark JVM
        30,
        message=f"maintenance process group {driver_pid} is empty",
        interval_s=0.1,
    )

    # Off: the banner says so, and the schedule never starts a run (unit test below).
    cluster.extra_args = ("--maintenance-interval", "0")
    cluster.start()
    assert "maintenance: off (--maintenance-interval 0)" in _output(cluster)
    assert cluster.terminate() == 0, cluster.log_tails()
    assert not _started_pids(cluster), _output(cluster)
    cluster.assert_nothing_left()


def _output(cluster: Standalone) -> str:
    """What the supervisor printed since its last start."""
    assert cluster.managed is not None
    return cluster.managed.log_path.read_text(errors="replace").rsplit("\n=== start ", 1)[-1]


def _put_and_delete(s3: Any) -> None:
    s3.create_bucket(Bucket="maint")
    for index in range(6):
        s3.put_object(Bucket="maint", Key=f"k{index}", Body=bytes([index]) * 100_000)
    s3.delete_objects(
        Bucket="maint", Delete={"Objects": [{"Key": f"k{index}"} for index in range(5)]}
    )


def _first_ended_run(cluster: Standalone) -> str | None:
    """The run id of the first run that ended (an AssertionError if it failed)."""
    output = _output(cluster)
    if "maintenance: run failed" in output or "maintenance: run killed" in output:
        raise AssertionError(f"maintenance run failed:\n{cluster.log_tails()}")
    match = ENDED.search(output)
    if match is None:
        return None
    assert match.group(2) == "ok", cluster.log_tails()
    return match.group(1)


def _started_pids(cluster: Standalone) -> list[int]:
    return [int(pid) for pid in STARTED.findall(_output(cluster))]


def _status(zk: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", zk]
        + ["maintenance", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=ADMIN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


# ------------------------------------------------------------------ the pure pieces

ON = MaintenanceSchedule(interval_s=5.0, grace_s=0.0, run_s_max=100.0)
OFF = MaintenanceSchedule(interval_s=0.0, grace_s=0.0, run_s_max=100.0)


@pytest.mark.parametrize(
    ("schedule", "now", "started_at", "exited", "step"),
    [
        (ON, 4.9, None, False, "wait"),  # not due yet (due at 5)
        (ON, 5.0, None, False, "start"),
        (OFF, 1e9, None, False, "wait"),  # off: never due
        (ON, 50.0, 10.0, False, "wait"),  # one run at a time
        (ON, 50.0, 10.0, True, "reap"),
        (ON, 110.0, 10.0, False, "kill"),  # past run_s_max
        (ON, 110.0, 10.0, True, "reap"),  # it ended by itself first
    ],
)
def test_maintenance_step(
    schedule: MaintenanceSchedule, now: float, started_at: float | None, exited: bool, step: str
) -> None:
    assert maintenance_step(schedule, now, 5.0, started_at, exited) == step


@pytest.mark.parametrize(
    ("interval", "grace", "environ", "expected"),
    [
        (None, None, {}, (3600.0, 3600.0)),
        (None, None, {"BLOBSTORE_MAINTENANCE_INTERVAL_S": "60"}, (60.0, 3600.0)),
        (0.0, None, {"BLOBSTORE_MAINTENANCE_INTERVAL_S": "60"}, (0.0, 3600.0)),  # flag wins
        (None, 0.0, {"BLOBSTORE_MAINTENANCE_GRACE_S": "60"}, (3600.0, 0.0)),
    ],
)
def test_maintenance_schedule_from_flags_then_environment(
    interval: float | None,
    grace: float | None,
    environ: dict[str, str],
    expected: tuple[float, float],
) -> None:
    schedule = maintenance_schedule(interval, grace, environ)
    assert (schedule.interval_s, schedule.grace_s) == expected


@pytest.mark.parametrize(
    ("interval", "environ", "named"),
    [
        (-1.0, {}, "--maintenance-interval -1.0"),
        (float("nan"), {}, "--maintenance-interval nan"),
        (None, {"BLOBSTORE_MAINTENANCE_INTERVAL_S": "hourly"}, "BLOBSTORE_MAINTENANCE_INTERVAL_S"),
        (None, {"BLOBSTORE_MAINTENANCE_INTERVAL_S": "inf"}, "BLOBSTORE_MAINTENANCE_INTERVAL_S"),
    ],
)
def test_a_bad_schedule_names_its_flag_or_variable(
    interval: float | None, environ: dict[str, str], named: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(named)):
        maintenance_schedule(interval, None, environ)


def test_maintenance_end_line() -> None:
    report = {"run_id": "r1", "outcome": "ok", "disk_bytes_reclaimed": 6 << 20}
    report |= {"ledgers_deleted": 3, "compacted_ledgers": 1, "errors": []}
    assert maintenance_end_line(report, 0, 12.04, killed=False) == (
        "maintenance: run r1 ok in 12.0 s: 6.0 MiB reclaimed on disk, 3 ledgers deleted, "
        "1 compacted"
    )
    failed = {**report, "outcome": "failed", "errors": ["a", "b"]}
    assert maintenance_end_line(failed, 1, 3.0, killed=False).endswith(", 2 errors")
    assert "no report" in maintenance_end_line(None, 2, 3.0, killed=False)
    assert "killed" in maintenance_end_line(None, -15, 3.0, killed=True)


# ------------------------------------------------------------------ the runner, no Spark


class _SleepingRunner(MaintenanceRunner):
    """A run that never ends by itself: a shell and its child, one process group."""

    def command(self) -> list[str]:
        return ["sh", "-c", "sleep 600 & wait"]


def _runner(tmp_path: Path, schedule: MaintenanceSchedule, now: list[float]) -> MaintenanceRunner:
    (tmp_path / "logs").mkdir(exist_ok=True)
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    return _SleepingRunner(schedule, tmp_path, "127.0.0.1:1", {"PATH": "/usr/bin:/bin"}, clock)


def test_an_interval_of_0_never_starts_a_run(tmp_path: Path) -> None:
    now = [0.0]
    runner = _runner(tmp_path, OFF, now)
    for now[0] in (0.0, 5.0, 1e9):
        runner.tick()
    assert runner.process is None
    assert not (tmp_path / "logs" / "maintenance.log").exists()


def test_a_run_past_its_bound_is_killed_with_its_group_and_the_next_waits(
    tmp_path: Path,
) -> None:
    now = [0.0]
    runner = _runner(tmp_path, ON, now)
    now[0] = 5.0
    runner.tick()
    assert runner.process is not None
    group = runner.process.pid
    wait_until(lambda: len(group_members(group)) == 2, 10, message="sh and its sleep run")
    now[0] = 5.0 + ON.run_s_max
    runner.tick()
    assert runner.process is None and not group_members(group)
    assert runner.due_at == now[0] + ON.interval_s  # the next one, interval after the end
    log = (tmp_path / "logs" / "maintenance.log").read_text()
    assert "maintenance: run killed after 100.0 s" in log, log


def test_stop_ends_a_run_going_on(tmp_path: Path) -> None:
    now = [0.0]
    runner = _runner(tmp_path, ON, now)
    now[0] = 5.0
    runner.tick()
    assert runner.process is not None
    group = runner.process.pid
    runner.stop()
    assert runner.process is None and not group_members(group)
    assert "run stopped with the cluster" in (tmp_path / "logs" / "maintenance.log").read_text()


def test_the_maintenance_log_is_rotated_past_its_bound_keeping_one_older(
    tmp_path: Path,
) -> None:
    log = tmp_path / "maintenance.log"
    rotate_log(log, 10)  # none yet: nothing to do
    log.write_text("first run\n")
    rotate_log(log, 10)  # 10 bytes: not past the bound
    assert log.read_text() == "first run\n"
    log.write_text("a longer first run\n")
    rotate_log(log, 10)
    assert (
        not log.exists() and (tmp_path / "maintenance.log.1").read_text() == "a longer first run\n"
    )
    log.write_text("the second run's long log\n")
    rotate_log(log, 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maintenance.log.1"]
    assert (tmp_path / "maintenance.log.1").read_text() == "the second run's long log\n"
