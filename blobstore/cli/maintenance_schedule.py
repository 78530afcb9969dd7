"""The standalone's schedule of `blobstore maintain`: when a run starts, how long it may
take, how it is stopped, and the lines it leaves in the log. The decisions are pure
functions (`maintenance_step`, `maintenance_end_line`); `MaintenanceRunner` carries them
out with a child process in its own process group."""

from __future__ import annotations

import datetime
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from blobstore.runtime.errors import UsageError
from blobstore.runtime.pdeathsig import die_with_parent

MAINTENANCE_INTERVAL_S_DEFAULT = 3600.0
MAINTENANCE_GRACE_S_DEFAULT = 3600.0
# A run still going after this long is killed with its process group; the next run takes
# up its work (every step of a run is safe to cut short).
MAINTENANCE_RUN_S_MAX = 6 * 3600.0
# SIGTERM to the run's process group, then SIGKILL to what is left after this long.
MAINTENANCE_STOP_TIMEOUT_S = 10.0
# DATA/logs/maintenance.log is rotated past this size (one older file kept).
MAINTENANCE_LOG_BYTES_MAX = 16 * 1024 * 1024
assert MAINTENANCE_STOP_TIMEOUT_S < MAINTENANCE_RUN_S_MAX
ERROR_PREFIX = "blobstore: error: "  # how every command prints its one-line errors
ERROR_LINE_CHARS_MAX = 500


def last_error_line(log_text: str) -> str:
    """The line of a log that best says why a process failed: the last naming an error,
    else the last line, shortened to ERROR_LINE_CHARS_MAX."""
    lines = [line for line in log_text.splitlines() if line.strip()]
    chosen = next((line for line in reversed(lines) if "error" in line.lower()), None)
    if chosen is None:
        chosen = lines[-1] if lines else "no output"
    chosen = chosen.strip().removeprefix(ERROR_PREFIX)
    if len(chosen) > ERROR_LINE_CHARS_MAX:
        chosen = chosen[: ERROR_LINE_CHARS_MAX - 3] + "..."
    return chosen


def _python_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "blobstore.cli", *args]


@dataclass(frozen=True, slots=True)
class MaintenanceSchedule:
    """When the supervisor runs `blobstore maintain`: `interval_s` after the cluster
    serves, then `interval_s` after each run ends (never two at once); 0: never."""

    interval_s: float
    grace_s: float
    run_s_max: float = MAINTENANCE_RUN_S_MAX

    def __post_init__(self) -> None:
        assert self.interval_s >= 0, self.interval_s
        assert self.grace_s >= 0, self.grace_s
        assert self.run_s_max > 0, self.run_s_max

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0


def maintenance_schedule(
    interval_s: float | None, grace_s: float | None, environ: Mapping[str, str]
) -> MaintenanceSchedule:
    """The schedule from the flags, else the environment, else the defaults; a bad value
    is a UsageError naming the flag or the variable."""
    return MaintenanceSchedule(
        interval_s=_seconds(
            "--maintenance-interval",
            interval_s,
            "BLOBSTORE_MAINTENANCE_INTERVAL_S",
            environ,
            MAINTENANCE_INTERVAL_S_DEFAULT,
        ),
        grace_s=_seconds(
            "--maintenance-grace",
            grace_s,
            "BLOBSTORE_MAINTENANCE_GRACE_S",
            environ,
            MAINTENANCE_GRACE_S_DEFAULT,
        ),
    )


def _seconds(
    flag: str, value: float | None, key: str, environ: Mapping[str, str], default: float
) -> float:
    where = f"{flag} {value}"
    if value is None:
        text = environ.get(key, "").strip()
        if not text:
            return default
        where = f"{key}={text!r}"
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{where}: not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(f"{where}: must be a number of seconds, 0 or more")
    return value


MaintenanceStep = Literal["wait", "start", "reap", "kill"]


def maintenance_step(
    schedule: MaintenanceSchedule,
    now: float,
    due_at: float,
    started_at: float | None,
    exited: bool,
) -> MaintenanceStep:
    """What the supervisor does about maintenance at `now` (monotonic seconds): `reap`
    the run that exited, `kill` the one past `run_s_max`, `start` one when none runs and
    one is due, or `wait`. `started_at` is None when no run is going on."""
    if started_at is not None:
        if exited:
            return "reap"
        if now - started_at >= schedule.run_s_max:
            return "kill"
        return "wait"
    if schedule.enabled and now >= due_at:
        return "start"
    return "wait"


def maintenance_end_line(
    report: dict[str, Any] | None, exit_code: int | None, duration_s: float, killed: bool
) -> str:
    """The line printed when a run ends: its outcome, duration and reclaimed bytes from
    its JSON report (None when it printed none)."""
    from blobstore.admin._output import human_bytes  # rich and kazoo: loaded when needed

    took = f"{duration_s:.1f} s"
    if killed:
        return f"maintenance: run killed after {took} (exit code {exit_code}), past its bound"
    if report is None:
        return f"maintenance: run failed in {took} (exit code {exit_code}, no report)"
    line = (
        f"maintenance: run {report.get('run_id', '?')} {report.get('outcome', '?')} in {took}: "
        f"{human_bytes(int(report.get('disk_bytes_reclaimed', 0)))} reclaimed on disk, "
        f"{int(report.get('ledgers_deleted', 0))} ledgers deleted, "
        f"{int(report.get('compacted_ledgers', 0))} compacted"
    )
    errors = len(report.get("errors") or [])
    return line + (f", {errors} errors" if errors else "")


def _read_report(path: Path) -> dict[str, Any] | None:
    """The JSON report a run printed (its standard output), if it printed one."""
    try:
        report = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def _utc_text(timestamp: float) -> str:
    return f"{datetime.datetime.fromtimestamp(timestamp, datetime.UTC):%Y-%m-%d %H:%M:%SZ}"


class MaintenanceRunner:
    """Runs `blobstore maintain` on its schedule from the supervisor's loop (`tick`):
    one run at a time, in a process group of its own, so that a run past `run_s_max`,
    or one going on when the cluster stops, is ended whole (the driver and its Spark
    JVM). Its output goes to DATA/logs/maintenance.log, its report to
    DATA/maintenance-last.json, its metrics to DATA/maintenance.prom."""

    def __init__(
        self,
        schedule: MaintenanceSchedule,
        data_dir: Path,
        zk: str,
        env: dict[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.schedule = schedule
        self.data_dir = data_dir
        self.zk = zk
        self.env = env
        self.clock = clock
        self.due_at = clock() + schedule.interval_s
        self.first_at = time.time() + schedule.interval_s  # the same moment, for people
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.log_offset = 0  # where this run's output starts in the log

    @property
    def log_path(self) -> Path:
        return self.data_dir / "logs" / "maintenance.log"

    @property
    def report_path(self) -> Path:
        return self.data_dir / "maintenance-last.json"

    @property
    def metrics_path(self) -> Path:
        return self.data_dir / "maintenance.prom"

    def command(self) -> list[str]:
        return _python_cli(
            "maintain",
            "--zk",
            self.zk,
            "--grace",
            f"{self.schedule.grace_s:g}",
            "--json",
            "--metrics-file",
            str(self.metrics_path),
        )

    def describe(self) -> str:
        """The schedule, for the startup banner."""
        if not self.schedule.enabled:
            return (
                "maintenance: off (--maintenance-interval 0); to run it by hand:\n"
                f"  blobstore maintain --zk {self.zk} --grace {self.schedule.grace_s:g}"
            )
        interval = f"{self.schedule.interval_s:g} s"
        return (
            "maintenance (ledger GC, compaction, lifecycle): `blobstore maintain` "
            f"every {interval},\n  the first at {_utc_text(self.first_at)}, then {interval} "
            f"after each run ends; grace {self.schedule.grace_s:g} s\n"
            f"  log {self.log_path}, metrics {self.metrics_path}"
        )

    def tick(self) -> None:
        """Start, reap or kill a run, as `maintenance_step` decides."""
        now = self.clock()
        exited = self.process is not None and self.process.poll() is not None
        step = maintenance_step(self.schedule, now, self.due_at, self.started_at, exited)
        if step == "start":
            self._start(now)
        elif step == "reap":
            self._ended(now, killed=False)
        elif step == "kill":
            self._end_group()
            self._ended(now, killed=True)

    def stop(self) -> None:
        """The cluster stops: end a run going on (its process group) and reap it."""
        if self.process is None or self.started_at is None:
            return
        if self.process.poll() is not None:  # it ended on its own meanwhile
            self._ended(self.clock(), killed=False)
            return
        self._end_group()
        line = (
            f"maintenance: run stopped with the cluster after "
            f"{self.clock() - self.started_at:.1f} s (pid {self.process.pid})"
        )
        self._log(line)
        print(line, flush=True)
        self.process = self.started_at = None

    def _start(self, now: float) -> None:
        command = self.command()
        try:
            self.report_path.unlink(missing_ok=True)
            rotate_log(self.log_path, MAINTENANCE_LOG_BYTES_MAX)
            self._log(f"maintenance: run starting at {_utc_text(time.time())}: {' '.join(command)}")
            self.log_offset = self.log_path.stat().st_size
            with open(self.log_path, "ab") as log, open(self.report_path, "wb") as report:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=report,
                    stderr=log,
                    env=self.env,
                    cwd=self.data_dir,  # Spark's scratch files stay in the data directory
                    start_new_session=True,
                    preexec_fn=_dies_with(os.getpid()),  # noqa: PLW1509 - only prctl
                )
        except OSError as e:  # the cluster keeps serving; the next run is tried later
            self.due_at = now + self.schedule.interval_s
            print(f"maintenance: cannot start a run: {e}", file=sys.stderr, flush=True)
            return
        self.started_at = now
        print(f"maintenance: run started (pid {self.process.pid}; log {self.log_path})", flush=True)

    def _ended(self, now: float, killed: bool) -> None:
        assert self.process is not None and self.started_at is not None
        report = _read_report(self.report_path)
        line = maintenance_end_line(report, self.process.returncode, now - self.started_at, killed)
        if report is None or report.get("outcome") != "ok":
            line += f": {self._last_error_line()} (log {self.log_path})"
        if report is not None:
            self._log(json.dumps(report, indent=2, sort_keys=True))
        self._log(line)
        print(line, flush=True)
        self.process = self.started_at = None
        self.due_at = now + self.schedule.interval_s

    def _last_error_line(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_offset)
                return last_error_line(log.read().decode(errors="replace"))
        except OSError as e:
            return f"log unreadable: {e.strerror}"

    def _end_group(self) -> None:
        """SIGTERM to the run's process group, SIGKILL to whatever is left of it after
        MAINTENANCE_STOP_TIMEOUT_S; the driver is reaped."""
        assert self.process is not None
        group = self.process.pid  # a pid is not reused while its group has members
        _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + MAINTENANCE_STOP_TIMEOUT_S
        try:
            self.process.wait(timeout=MAINTENANCE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        while _signal_group(group, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(group, signal.SIGKILL)
        self.process.wait(timeout=MAINTENANCE_STOP_TIMEOUT_S)

    def _log(self, line: str) -> None:
        """Append to the maintenance log; a log that cannot be written (a full disk) is
        said on stderr and does not stop the cluster."""
        try:
            with open(self.log_path, "a") as log:
                log.write(line + "\n")
        except OSError as e:
            print(f"maintenance: cannot write {self.log_path}: {e}", file=sys.stderr, flush=True)


def rotate_log(path: Path, bytes_max: int) -> None:
    """Before a run: a log past `bytes_max` becomes `<name>.1` (the previous `.1` goes),
    so the runs' logs take at most about twice `bytes_max`."""
    try:
        if path.stat().st_size > bytes_max:
            path.replace(path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass


def _signal_group(group: int, signum: int) -> bool:
    """Send `signum` to a process group; whether any process was in it."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    return True


def _dies_with(supervisor_pid: int) -> Callable[[], None]:
    """preexec_fn of a maintenance run: SIGKILL when the supervisor dies (its Spark JVM
    then ends too: it exits when its driver's pipe closes)."""

    def preexec() -> None:
        die_with_parent(signal.SIGKILL, supervisor_pid)

    return preexec
