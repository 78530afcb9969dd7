"""`blobstore standalone` as a real subprocess, for tests.

The supervisor runs in its own session (start_new_session), so its process group holds
the whole cluster: ZooKeeper, the bookies, the gateway and the gateway's workers. Tests
look at that group through /proc to prove that a stop leaves nothing behind.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from blobstore.cli.zookeeper_server import free_port
from tests.cluster.processes import ManagedProcess, ProcessReaper
from tests.waiting import wait_until

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def blobstore_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "blobstore.cli", *args]


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group `pgid`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry))
    return members


def port_is_listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    return not port_is_listening(port, host)


@dataclass
class Standalone:
    """One `blobstore standalone` supervisor on a data directory."""

    data_dir: Path
    port: int
    reaper: ProcessReaper
    extra_args: tuple[str, ...] = ()
    managed: ManagedProcess | None = None
    ready: dict[str, object] = field(default_factory=dict)
    starts: int = 0

    @property
    def ready_file(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}-ready.json"

    @property
    def endpoint(self) -> str:
        return str(self.ready["endpoint"])

    @property
    def pgid(self) -> int:
        assert self.managed is not None
        return self.managed.pid

    def start(self) -> Standalone:
        self.ready_file.unlink(missing_ok=True)
        self.starts += 1
        command = blobstore_command(
            "standalone",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--ready-file",
            str(self.ready_file),
            "--zk-port",
            str(free_port()),  # never 2181: other clusters may run on this machine
            *self.extra_args,
        )
        self.managed = self.reaper.add(
            ManagedProcess(
                f"standalone-{self.starts}",
                command,
                self.data_dir.parent / f"standalone-{self.starts}.log",
            )
        )
        self.managed.start()
        wait_until(
            self._ready_or_exited,
            READY_TIMEOUT_S,
            message=lambda: f"standalone not ready:\n{self.log_tails()}",
            interval_s=0.1,
        )
        self.ready = json.loads(self.ready_file.read_text())
        return self

    def _ready_or_exited(self) -> bool:
        """Whether the ready file is written; fails at once if the supervisor exited."""
        if self.ready_file.exists():
            return True
        assert self.managed is not None
        if not self.managed.alive():
            raise AssertionError(f"standalone exited early:\n{self.log_tails()}")
        return False

    def log_tails(self) -> str:
        assert self.managed is not None
        parts = [self.managed.log_tail(60)]
        for log in sorted((self.data_dir / "logs").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-30:]
            parts.append(f"----- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def layout(self) -> dict[str, Any]:
        return dict(json.loads((self.data_dir / "cluster.json").read_text()))

    def cluster_ports(self) -> list[int]:
        layout = self.layout()
        return [
            self.port,
            int(layout["zk_port"]),
            *layout["bookie_ports"],
            *layout["bookie_http_ports"],
        ]

    def credentials(self) -> tuple[str, str]:
        raw = json.loads((self.data_dir / "credentials.json").read_text())
        return raw["access_key"], raw["secret_key"]

    def s3(self) -> Any:
        access_key, secret_key = self.credentials()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
            ),
        )

    def terminate(self) -> int:
        """SIGTERM to the supervisor alone (as `kill PID` would); its exit code."""
        assert self.managed is not None and self.managed.process is not None
        self.managed.process.send_signal(signal.SIGTERM)
        try:
            return self.managed.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"standalone ignored SIGTERM:\n{self.log_tails()}") from None

    def signal_group(self, signum: int) -> int:
        """A signal to the whole process group, as a terminal sends SIGINT on Ctrl-C and
        SIGHUP when it closes; the supervisor's exit code."""
        assert self.managed is not None and self.managed.process is not None
        os.killpg(self.pgid, signum)
        try:
            return self.managed.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"standalone ignored {signum}:\n{self.log_tails()}") from None

    def kill_group(self) -> None:
        """kill -9 of the whole process group."""
        assert self.managed is not None and self.managed.process is not None
        os.killpg(self.pgid, signal.SIGKILL)
        self.managed.process.wait(timeout=STOP_TIMEOUT_S)

    def assert_nothing_left(self) -> None:
        pgid = self.pgid
        wait_until(
            lambda: not group_members(pgid),
            30,
            message=f"process group {pgid} is empty",
            interval_s=0.1,
        )
        for port in self.cluster_ports():
            wait_until(
                functools.partial(port_is_free, port),
                30,
                message=f"port {port} is free",
                interval_s=0.1,
            )
