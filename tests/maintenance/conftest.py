"""A fresh cluster per maintenance test: ZooKeeper (a chroot of the session's server),
three real bookies, a real gateway whose writer ledgers close at 1 MiB (so a workload of
a few MiB spreads over many closed ledgers), boto3 clients, and `blobstore maintain`
run as the real command in its own process (local Spark).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.gateway import GatewayProcess, entry_size_env
from tests.cluster.processes import BookieProcess, ProcessReaper
from tests.conftest import BookieFactory

ROOT = Path(__file__).resolve().parents[2]
ENTRY_SIZE_BYTES = 64 * 1024
LEDGER_BYTES_MAX = 1024 * 1024
GATEWAY_ENV = {
    **entry_size_env(ENTRY_SIZE_BYTES),
    "BLOBSTORE_LEDGER_BYTES_MAX": str(LEDGER_BYTES_MAX),
    "BLOBSTORE_SWEEP_INTERVAL_S": "1",
    "BLOBSTORE_ZK_SESSION_TIMEOUT_S": "4",
}
# Bookies as deployed: 1 GiB entry logs, so a workload lives in the active log (the job
# has the bookies roll it).
BOOKIE_ARGS: tuple[str, ...] = ()
MAINTAIN_TIMEOUT_S = 300.0


@dataclass
class MaintenanceCluster:
    zk: str
    root: Path
    reaper: ProcessReaper
    start_bookies: BookieFactory
    bookies: list[BookieProcess] = field(default_factory=list)
    gateways: list[GatewayProcess] = field(default_factory=list)

    def start(self, bookie_args: Sequence[str] = BOOKIE_ARGS) -> MaintenanceCluster:
        self.bookies.extend(self.start_bookies(3, extra_args=bookie_args))
        self.start_gateway("gateway")
        return self

    def start_gateway(self, name: str, env: Mapping[str, str] | None = None) -> GatewayProcess:
        gateway = GatewayProcess(
            name=name,
            zk=self.zk,
            root=self.root / name,
            reaper=self.reaper,
            env={**GATEWAY_ENV, **(env or {})},
        )
        self.gateways.append(gateway)
        return gateway.start()

    @property
    def gateway(self) -> GatewayProcess:
        return self.gateways[0]

    def s3(self) -> Any:
        return self.gateway.client()

    def maintain_command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "blobstore.cli", "maintain", "--zk", self.zk, *args]

    def maintain(
        self, *args: str, env: Mapping[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run `blobstore maintain ARGS --json` to its end."""
        done = subprocess.run(
            [*self.maintain_command(*args), "--json"],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=MAINTAIN_TIMEOUT_S,
        )
        if check:
            assert done.returncode == 0, f"maintain failed:\n{done.stdout}\n{done.stderr[-4000:]}"
        return done

    def report(self, *args: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The JSON report of one successful run."""
        report: dict[str, Any] = json.loads(self.maintain(*args, env=env).stdout)
        return report

    def start_maintain(
        self, *args: str, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start `blobstore maintain ARGS --json` and return at once (its own process
        group, so a test can kill the driver and its JVM together)."""
        out = open(log or self.root / "maintain.log", "ab")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(
            [*self.maintain_command(*args), "--json"],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def ledger_dir_bytes(self) -> list[int]:
        """Bytes under each bookie's ledger directory (entry logs and index; not the
        journal)."""
        return [_tree_bytes(bookie.ledger_dir) for bookie in self.bookies]


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.fixture
def cluster(
    zk_connect: str, bookies: BookieFactory, reaper: ProcessReaper, tmp_path: Path
) -> Iterator[MaintenanceCluster]:
    yield MaintenanceCluster(zk=zk_connect, root=tmp_path, reaper=reaper, start_bookies=bookies)
