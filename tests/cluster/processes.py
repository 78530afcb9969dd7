"""Real child processes for system tests: ZooKeeper, bookies, gateways.

Every child runs in its own process group and is registered with a `ProcessReaper`, which
kills whatever is still alive when the test ends, pass or fail. Readiness is polled with
a deadline, never a fixed sleep. Each child's output goes to a log file whose tail is
printed when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.waiting import wait_until

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


def blobstore_command(*args: str) -> list[str]:
    """The `blobstore` CLI run by this interpreter (works from a fresh .venv)."""
    return [sys.executable, "-m", "blobstore.cli", *args]


@dataclass
class ManagedProcess:
    name: str
    command: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, (
            f"{self.name} already running"
        )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"\n=== start {' '.join(self.command)}\n".encode())
            log_file.flush()
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """kill -9 the whole process group and reap it."""
        if self.process is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait with a deadline, then SIGKILL. Returns the exit code."""
        if self.process is None:
            return None
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def suspend(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class ProcessReaper:
    processes: list[ManagedProcess] = field(default_factory=list)

    def add(self, process: ManagedProcess) -> ManagedProcess:
        self.processes.append(process)
        return process

    def reap_all(self) -> None:
        for process in reversed(self.processes):
            process.kill()

    def log_tails(self) -> str:
        return "\n".join(
            f"----- {p.name} ({p.log_path}) -----\n{p.log_tail()}" for p in self.processes
        )


def wait_for_ready_file(
    process: ManagedProcess, ready_file: Path, timeout_s: float = READY_TIMEOUT_S
) -> dict[str, object]:
    """Poll for the JSON a child writes once it serves; fail fast if the child exits."""
    return wait_until(
        lambda: _ready_or_exited(process, ready_file),
        timeout_s,
        message=lambda: f"{process.name} ready:\n{process.log_tail()}",
    )


def _ready_or_exited(process: ManagedProcess, ready_file: Path) -> dict[str, object] | None:
    """The ready file's JSON once it is whole; raises if the child exited first."""
    if ready_file.exists():
        try:
            return dict(json.loads(ready_file.read_text()))
        except json.JSONDecodeError:
            pass  # being written; it is renamed into place, but be lenient
    if not process.alive():
        raise RuntimeError(
            f"{process.name} exited with {process.process and process.process.returncode} "
            f"before it was ready:\n{process.log_tail()}"
        )
    return None


@dataclass
class BookieProcess:
    """One `blobstore bookie` child. The first start binds port 0 and learns its ports
    from the ready file; restarts reuse them, so the bookie id (host:port) stays stable."""

    index: int
    zk: str
    root: Path
    reaper: ProcessReaper
    extra_args: Sequence[str] = ()
    port: int = 0
    http_port: int = 0
    managed: ManagedProcess | None = None

    @property
    def journal_dir(self) -> Path:
        return self.root / "journal"

    @property
    def ledger_dir(self) -> Path:
        return self.root / "ledgers"

    @property
    def ready_file(self) -> Path:
        return self.root / "ready.json"

    @property
    def bookie_id(self) -> str:
        assert self.port, "bookie never started"
        return f"127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> BookieProcess:
        self.ready_file.unlink(missing_ok=True)
        command = blobstore_command(
            "bookie",
            "--zk",
            self.zk,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--journal-dir",
            str(self.journal_dir),
            "--ledger-dir",
            str(self.ledger_dir),
            "--ready-file",
            str(self.ready_file),
            *self.extra_args,
        )
        if self.managed is None:
            self.managed = self.reaper.add(
                ManagedProcess(f"bookie-{self.index}", command, self.root / "bookie.log")
            )
        self.managed.command = command
        self.managed.start()
        ready = wait_for_ready_file(self.managed, self.ready_file, timeout_s)
        self.port = int(ready["port"])  # type: ignore[call-overload]
        self.http_port = int(ready["http_port"])  # type: ignore[call-overload]
        return self

    def kill(self) -> None:
        assert self.managed is not None
        self.managed.kill()

    def stop(self) -> int | None:
        assert self.managed is not None
        return self.managed.stop()

    def suspend(self) -> None:
        assert self.managed is not None
        self.managed.suspend()

    def resume(self) -> None:
        assert self.managed is not None
        self.managed.resume()

    def restart(self) -> BookieProcess:
        if self.managed is not None and self.managed.alive():
            self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.managed is not None and self.managed.alive()

    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"
