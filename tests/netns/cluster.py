"""A blobstore cluster across hosts made of network namespaces: a ZooKeeper ensemble of
three, bookies and gateways, each process on a host of its own.

Processes run with `ip netns exec` (which execs the command, so the pid is the process's
own) in their own process group, registered with the test's ProcessReaper. Every host
has its own address, so the ports are fixed: a restart keeps a bookie's id
(`address:3181`).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from blobstore.cli.zookeeper_server import four_letter_word, server_command, write_ensemble_config
from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, entry_size_env
from tests.cluster.processes import ManagedProcess, ProcessReaper, blobstore_command
from tests.cluster.tls import zk_tls
from tests.netns.network import Host, Network
from tests.waiting import wait_until

ZK_PORT = 2181
BOOKIE_PORT = 3181
BOOKIE_HTTP_PORT = 8000
GATEWAY_PORT = 9000
SESSION_TIMEOUT_S = 4.0
READY_TIMEOUT_S = 90.0
ZK_HEAP_MB = 128
# Each bookie's journal and ledger directories are on a disk of their own (a tmpfs of
# this size) that the disk-full fault fills.
BOOKIE_DISK_BYTES = 512 * 1024 * 1024
ENTRY_SIZE_BYTES = 16 * 1024
ACK_QUORUM = 2
# E=3, WQ=3, AQ=2 over four bookies, as BookKeeper deployments run: one bad copy of an
# entry still leaves AQ good ones.
GATEWAY_ENV = {
    "BLOBSTORE_ACCESS_KEY": ACCESS_KEY,
    "BLOBSTORE_SECRET_KEY": SECRET_KEY,
    **entry_size_env(ENTRY_SIZE_BYTES),
    "BLOBSTORE_ENSEMBLE_SIZE": "3",
    "BLOBSTORE_WRITE_QUORUM": "3",
    "BLOBSTORE_ACK_QUORUM": str(ACK_QUORUM),
    "BLOBSTORE_SWEEP_INTERVAL_S": "1",
    "BLOBSTORE_ZK_SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S),
    "BLOBSTORE_LEDGER_ENSEMBLE_CHANGE_TIMEOUT_S": "10",
}
BOOKIE_ARGS: tuple[str, ...] = (
    "--checkpoint-interval-s",
    "0.5",
    "--journal-file-bytes-max",
    str(256 * 1024),
    "--entry-log-bytes-max",
    str(12 * 1024 * 1024),
    "--zk-session-timeout-s",
    str(SESSION_TIMEOUT_S),
    "--disk-check-interval-s",
    "0.5",
)

ZOOKEEPER, BOOKIE, GATEWAY = "zookeeper", "bookie", "gateway"


class NodeExitedError(RuntimeError):
    """A node's process exited while it was waited on to be ready."""


@dataclass
class Node:
    """One process on one host: a ZooKeeper member, a bookie or a gateway."""

    role: str
    host: Host
    root: Path
    managed: ManagedProcess
    is_ready: Callable[[Node], bool]

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def address(self) -> str:
        return self.host.address

    def launch(self) -> None:
        (self.root / "ready.json").unlink(missing_ok=True)
        self.managed.start()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        wait_until(
            lambda: self._ready_or_exited(),
            timeout_s,
            message=lambda: f"{self.name} ready:\n{self.managed.log_tail()}",
            interval_s=0.1,
        )

    def _ready_or_exited(self) -> bool:
        if not self.managed.alive():
            code = self.managed.process and self.managed.process.returncode
            raise NodeExitedError(f"{self.name} exited ({code}):\n{self.managed.log_tail()}")
        return self.is_ready(self)

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def kill(self) -> None:
        self.managed.kill()

    def suspend(self) -> None:
        self.managed.suspend()

    def resume(self) -> None:
        self.managed.resume()

    def alive(self) -> bool:
        return self.managed.alive()


def zk_mode(address: str) -> str | None:
    """`leader`, `follower` or `standalone` while the member serves in a quorum."""
    try:
        reply = four_letter_word(address, ZK_PORT, b"srvr", timeout_s=1.0, tls=zk_tls()).decode()
    except OSError:
        return None
    for line in reply.splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


def _zk_ready(node: Node) -> bool:
    return zk_mode(node.address) in ("leader", "follower")


def _ready_file_written(node: Node) -> bool:
    return (node.root / "ready.json").exists()


@dataclass
class NetnsCluster:
    network: Network
    root: Path
    reaper: ProcessReaper
    zookeepers: list[Node] = field(default_factory=list)
    bookies: list[Node] = field(default_factory=list)
    gateways: list[Node] = field(default_factory=list)

    @property
    def zk_connect(self) -> str:
        return ",".join(f"{node.address}:{ZK_PORT}" for node in self.zookeepers)

    def nodes(self) -> list[Node]:
        return [*self.zookeepers, *self.bookies, *self.gateways]

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes() if node.name == name)

    def start(self, bookie_count: int = 4, gateway_count: int = 3) -> NetnsCluster:
        hosts = [self.network.add_host(f"zk{index}") for index in (1, 2, 3)]
        addresses = [host.address for host in hosts]
        self.zookeepers = [self._zookeeper(host, addresses) for host in hosts]
        self._start_all(self.zookeepers)
        self.bookies = [
            self._bookie(self.network.add_host(f"bookie{index}"))
            for index in range(1, bookie_count + 1)
        ]
        self._start_all(self.bookies)
        self.gateways = [
            self._gateway(self.network.add_host(f"gw{index}"))
            for index in range(1, gateway_count + 1)
        ]
        self._start_all(self.gateways)
        return self

    def _start_all(self, nodes: list[Node]) -> None:
        for node in nodes:
            node.launch()
        for node in nodes:
            node.wait_ready()

    def _add(self, role: str, host: Host, command: list[str], env: dict[str, str]) -> Node:
        root = self.root / host.name
        root.mkdir(parents=True, exist_ok=True)
        managed = ManagedProcess(host.name, host.command(command), root / f"{role}.log", env=env)
        self.reaper.add(managed)
        ready = _zk_ready if role == ZOOKEEPER else _ready_file_written
        return Node(role, host, root, managed, ready)

    def _zookeeper(self, host: Host, addresses: list[str]) -> Node:
        data_dir = (self.root / host.name / "zookeeper").resolve()
        server_id = addresses.index(host.address) + 1
        tls = zk_tls()  # the ensemble serves TLS when the test session's switch is on
        config = write_ensemble_config(data_dir, server_id, addresses, ZK_PORT, tls)
        command = server_command(data_dir, config, ZK_HEAP_MB, tls is not None)
        return self._add(ZOOKEEPER, host, command, {})

    def _bookie(self, host: Host) -> Node:
        disk = self.network.mount_disk(self.disk(host.name), BOOKIE_DISK_BYTES)
        root = self.root / host.name
        command = blobstore_command(
            "bookie",
            *("--zk", self.zk_connect, "--host", host.address),
            *("--port", str(BOOKIE_PORT), "--http-port", str(BOOKIE_HTTP_PORT)),
            *("--journal-dir", str(disk / "journal"), "--ledger-dir", str(disk / "ledgers")),
            *("--ready-file", str(root / "ready.json")),
            *BOOKIE_ARGS,
        )
        return self._add(BOOKIE, host, command, {})

    def _gateway(self, host: Host) -> Node:
        command = blobstore_command(
            "gateway",
            *("--zk", self.zk_connect, "--host", host.address, "--port", str(GATEWAY_PORT)),
            *("--ready-file", str(self.root / host.name / "ready.json")),
        )
        return self._add(GATEWAY, host, command, dict(GATEWAY_ENV))

    def zk_leader(self) -> Node | None:
        return next((n for n in self.zookeepers if zk_mode(n.address) == "leader"), None)

    def endpoint(self, gateway: Node) -> str:
        return f"http://{gateway.address}:{GATEWAY_PORT}"

    def s3(self, gateway: Node, **config: Any) -> Any:
        """A boto3 client of one gateway: one attempt, short timeouts (the workload records
        an operation without an answer as of unknown outcome, never retries it)."""
        settings: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "signature_version": "s3v4",
            "retries": {"total_max_attempts": 1, "mode": "standard"},
            "connect_timeout": 3,
            "read_timeout": 15,
        }
        settings.update(config)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint(gateway),
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(**settings),
        )

    def admin(self, *args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
        """`blobstore admin --zk <ensemble> --json ARGS` from the clients' host."""
        return subprocess.run(
            blobstore_command("admin", "--zk", self.zk_connect, "--json", *args),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(os.environ),
        )

    def repair(self) -> subprocess.CompletedProcess[str]:
        """Queue what fsck finds under-replicated, then have the replication worker
        copy a good replica back (`admin underreplicated --repair`)."""
        queued = self.admin("fsck", "--queue-repairs")
        assert queued.stdout.strip(), f"fsck printed nothing: {queued.stderr[-2000:]}"
        return self.admin("underreplicated", "--repair")

    def fsck(self) -> dict[str, Any]:
        result = self.admin("fsck")
        assert result.stdout.strip(), f"fsck printed nothing: {result.stderr[-2000:]}"
        report: dict[str, Any] = json.loads(result.stdout)
        return report

    def disk(self, name: str) -> Path:
        """Where a bookie's disk (journal and ledger directories) is mounted."""
        return self.root / name / "disk"

    def entry_logs(self, bookie: Node) -> list[Path]:
        return sorted((self.disk(bookie.name) / "ledgers" / "current").glob("*.log"))

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(
            f"----- {node.name} ({node.managed.log_path}) -----\n{node.managed.log_tail(lines)}"
            for node in self.nodes()
        )
