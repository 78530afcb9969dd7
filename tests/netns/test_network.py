"""The hosts harness itself: hosts reach each other through the bridge, faults cut and
heal links, and nothing is left behind, not even by a run that died."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.netns.network import STATE_DIR, Network, free_subnet, ip, remove_stale_runs

PORT = 7070
SERVER = (
    "import socket, sys\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"s.bind((sys.argv[1], {PORT})); s.listen()\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(b'hello'); c.close()\n"
)


def test_free_subnet_skips_used_ones() -> None:
    run_id = "000005"  # starts at octet 6
    assert free_subnet(set(), run_id) == 6
    assert free_subnet({6, 7}, run_id) == 8
    assert free_subnet(set(range(1, 251)) - {3}, run_id) == 3
    with pytest.raises(RuntimeError):
        free_subnet(set(range(1, 251)), run_id)


def _names() -> str:
    return ip("netns", "list").stdout + ip("link", "show").stdout


def _reaches(source: list[str], address: str) -> bool:
    """Whether a connection from `source` (a command prefix) to address:PORT succeeds."""
    probe = (
        f"import socket; s = socket.create_connection(('{address}', {PORT}), timeout=1); "
        "print(s.recv(5).decode())"
    )
    result = subprocess.run(
        [*source, sys.executable, "-c", probe], capture_output=True, text=True, timeout=20
    )
    return result.stdout.strip() == "hello"


def test_hosts_links_split_heal_and_cleanup() -> None:
    network = Network().create()
    try:
        a, b = network.add_host("a"), network.add_host("b")
        server = subprocess.Popen(
            a.command([sys.executable, "-c", SERVER, a.address]),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "listening"
            assert _reaches(b.command([]), a.address)
            assert _reaches([], a.address)  # from the clients' host
            network.split(["b"])
            assert not _reaches(b.command([]), a.address)
            assert _reaches([], a.address)
            network.heal()
            assert _reaches(b.command([]), a.address)
            network.link_down("a")
            assert not _reaches([], a.address)
            network.heal()
            network.slow("a", rate_kbit=256, latency_ms=50)
            assert "tbf" in ip("tc", "qdisc", "show", "dev", a.outer).stdout
            network.heal()
            assert "tbf" not in ip("tc", "qdisc", "show", "dev", a.outer).stdout
            assert _reaches([], a.address)
        finally:
            server.kill()
            server.wait(timeout=20)
            assert server.stdout is not None
            server.stdout.close()
    finally:
        network.close()
    assert network.run_id not in _names()
    assert not network.state_file().exists()


def test_a_dead_runs_hosts_are_removed_by_the_next() -> None:
    network = Network().create()
    network.add_host("x")
    # As if the run had died: its state names a pid that is gone (a reaped child's).
    state = json.loads(network.state_file().read_text())
    child = subprocess.Popen(["true"])
    child.wait(timeout=20)
    state["pid"] = child.pid
    network.state_file().write_text(json.dumps(state))
    assert network.run_id in _names()
    remove_stale_runs()
    assert network.run_id not in _names()
    assert not (STATE_DIR / f"{network.run_id}.json").exists()
