"""Hosts made of Linux network namespaces, joined by veth pairs to a bridge.

Each host is a namespace with one interface (`eth0`, the inner end of a veth pair whose
outer end is a port of the run's bridge) and an address in a private /24 of
10.77.0.0/16 that no interface of this machine uses yet. The test process stays in the
root namespace and reaches every host through the bridge, which holds the /24's `.1`
address: it plays the S3 clients' host.

Faults on the network:
- a host's link down (`ip link set <outer> down`): the host reaches no one;
- a split: the outer ends of some hosts move to a second bridge, so the two sides each
  reach only themselves (and the clients only the first side);
- a slow, lossy link: a token bucket (`tc qdisc ... tbf`) on both ends of a host's veth,
  whose small queue delays and drops (this kernel has no netem).

A host may get a disk of its own: a size-limited tmpfs (`mount_disk`), which a fault can
fill to ENOSPC.

Names hold a run id (`bs<hex>`), so runs never collide. Everything is removed by
`close()`, pass or fail; a run that died without it (kill -9) leaves a state file in
STATE_DIR, and the next run removes what it names (processes included, found with
`ip netns pids`) once the pid it records is gone.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import secrets
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

STATE_DIR = Path("/tmp/blobstore-netns")
SUPERNET = ipaddress.ip_network("10.77.0.0/16")
HOST_ADDRESS_FIRST = 10
COMMAND_TIMEOUT_S = 20.0
INNER_DEVICE = "eth0"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `ip ARGS` (or another iproute2 tool when args[0] is a path or `tc`)."""
    command = list(args) if args[0] in ("tc",) else ["ip", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
    return result


def subnets_in_use() -> set[int]:
    """Third octets of the 10.77.x.0/24 networks this machine's root namespace uses."""
    used = set()
    for line in ip("-4", "-o", "addr", "show").stdout.splitlines():
        address = ipaddress.ip_interface(line.split()[3])
        if address.ip in SUPERNET:
            used.add(int(str(address.ip).split(".")[2]))
    return used


def free_subnet(used: set[int], run_id: str) -> int:
    """A third octet for this run's /24: the first one free from a point the run id picks,
    so two runs starting at once rarely try the same."""
    start = int(run_id, 16) % 250 + 1
    for step in range(250):
        octet = (start + step - 1) % 250 + 1
        if octet not in used:
            return octet
    raise RuntimeError("no free /24 left in 10.77.0.0/16")


@dataclass
class Host:
    name: str
    netns: str
    address: str
    outer: str  # the veth end in the root namespace, a port of a bridge

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass
class Network:
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: dict[str, Host] = field(default_factory=dict)
    octet: int = 0
    split_hosts: list[str] = field(default_factory=list)
    slow_hosts: set[str] = field(default_factory=set)
    down_hosts: set[str] = field(default_factory=set)
    mounts: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"bs{self.run_id}a"

    @property
    def split_bridge(self) -> str:
        return f"bs{self.run_id}b"

    @property
    def client_address(self) -> str:
        return f"10.77.{self.octet}.1"

    def state_file(self) -> Path:
        return STATE_DIR / f"{self.run_id}.json"

    def create(self) -> Network:
        remove_stale_runs()
        self.octet = free_subnet(subnets_in_use(), self.run_id)
        self._save_state()
        for bridge in (self.bridge, self.split_bridge):
            ip("link", "add", bridge, "type", "bridge")
            ip("link", "set", bridge, "up")
        ip("addr", "add", f"{self.client_address}/24", "dev", self.bridge)
        return self

    def add_host(self, name: str) -> Host:
        index = len(self.hosts)
        host = Host(
            name=name,
            netns=f"bs{self.run_id}-{name}",
            address=f"10.77.{self.octet}.{HOST_ADDRESS_FIRST + index}",
            outer=f"bs{self.run_id}v{index}",
        )
        self.hosts[name] = host
        self._save_state()
        ip("netns", "add", host.netns)
        ip(
            "link",
            "add",
            host.outer,
            "type",
            "veth",
            "peer",
            "name",
            INNER_DEVICE,
            "netns",
            host.netns,
        )
        ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", INNER_DEVICE)
        ip("-n", host.netns, "link", "set", INNER_DEVICE, "up")
        ip("-n", host.netns, "link", "set", "lo", "up")
        ip("link", "set", host.outer, "master", self.bridge)
        ip("link", "set", host.outer, "up")
        return host

    # Faults and their heals.
    def link_down(self, name: str) -> None:
        self.down_hosts.add(name)
        ip("link", "set", self.hosts[name].outer, "down")

    def link_up(self, name: str) -> None:
        ip("link", "set", self.hosts[name].outer, "up")
        self.down_hosts.discard(name)

    def split(self, names: list[str]) -> None:
        """`names` on one side (reachable from each other only), the rest on the other."""
        for name in names:
            self.split_hosts.append(name)
            ip("link", "set", self.hosts[name].outer, "master", self.split_bridge)

    def join(self) -> None:
        while self.split_hosts:
            ip("link", "set", self.hosts[self.split_hosts.pop()].outer, "master", self.bridge)

    def slow(self, name: str, rate_kbit: int, latency_ms: int) -> None:
        """At most `rate_kbit` each way, packets queued longer than `latency_ms` dropped."""
        host = self.hosts[name]
        self.slow_hosts.add(name)
        tbf = [
            "root",
            "tbf",
            "rate",
            f"{rate_kbit}kbit",
            "burst",
            "4kb",
            "latency",
            f"{latency_ms}ms",
        ]
        ip("tc", "qdisc", "replace", "dev", host.outer, *tbf)
        ip("netns", "exec", host.netns, "tc", "qdisc", "replace", "dev", INNER_DEVICE, *tbf)

    def fast(self, name: str) -> None:
        host = self.hosts[name]
        ip("tc", "qdisc", "del", "dev", host.outer, "root", check=False)
        ip(
            "netns",
            "exec",
            host.netns,
            "tc",
            "qdisc",
            "del",
            "dev",
            INNER_DEVICE,
            "root",
            check=False,
        )
        self.slow_hosts.discard(name)

    def heal(self) -> None:
        """Every link up, one side, no rate limit."""
        self.join()
        for name in sorted(self.down_hosts):
            self.link_up(name)
        for name in sorted(self.slow_hosts):
            self.fast(name)

    def mount_disk(self, path: Path, size_bytes: int) -> Path:
        """A disk of `size_bytes` at `path` (a tmpfs), unmounted by `close()`."""
        path.mkdir(parents=True, exist_ok=True)
        self.mounts.append(str(path))
        self._save_state()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
            check=True,
            capture_output=True,
        )
        return path

    def close(self) -> None:
        """Kill whatever still runs in the hosts, delete them and the bridges, unmount
        the disks."""
        remove_run(self.run_id, [h.netns for h in self.hosts.values()], self.mounts)
        self.state_file().unlink(missing_ok=True)

    def _save_state(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        state = {
            "pid": os.getpid(),
            "netns": [h.netns for h in self.hosts.values()],
            "mounts": self.mounts,
        }
        temporary = self.state_file().with_suffix(".tmp")
        temporary.write_text(json.dumps(state))
        temporary.rename(self.state_file())


def remove_run(run_id: str, netns_names: list[str], mounts: list[str]) -> None:
    for netns in netns_names:
        pids = ip("netns", "pids", netns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    for netns in netns_names:
        # The namespace goes with its last process; a killed one may take a moment to
        # be reaped by its parent, so deletion is retried by the next run if it fails.
        ip("netns", "del", netns, check=False)
    for suffix in ("a", "b"):
        ip("link", "del", f"bs{run_id}{suffix}", check=False)
    for mount in mounts:
        # Lazy: a process of the run that is not reaped yet may still hold a file open.
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


def remove_stale_runs() -> None:
    """Remove what runs that died without cleaning up left (their pid is gone)."""
    if not STATE_DIR.exists():
        return
    for state_file in STATE_DIR.glob("*.json"):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if _alive(int(state["pid"])):
            continue
        logger.warning("removing the hosts of a dead run: %s", state_file.stem)
        remove_run(state_file.stem, list(state["netns"]), list(state.get("mounts", [])))
        state_file.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
