"""`blobstore zookeeper`: a real server that answers, and stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from blobstore.cli.zookeeper_server import free_port, is_serving, start_zookeeper
from tests.cluster.processes import ManagedProcess, blobstore_command
from tests.waiting import wait_until


def _started_command(tmp_path: Path) -> tuple[ManagedProcess, int]:
    """`blobstore zookeeper` on a free port, once its server answers."""
    port = free_port()
    process = ManagedProcess(
        "zookeeper",
        blobstore_command("zookeeper", "--data-dir", str(tmp_path / "zk"), "--port", str(port)),
        tmp_path / "zk.log",
    )

    def serving() -> bool:
        assert process.alive(), process.log_tail()
        return is_serving("127.0.0.1", port)

    process.start()
    try:
        wait_until(serving, 60, message=process.log_tail, interval_s=0.1)
    except BaseException:
        process.kill()
        raise
    return process, port


def test_zookeeper_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    process, port = _started_command(tmp_path)
    try:
        # The server's own log says what it does (it once logged nothing: SLF4J took a
        # no-op binding from the classpath).
        server_log = (tmp_path / "zk" / "zookeeper.log").read_text()
        assert "Reading configuration from" in server_log, server_log[-2000:]
        process.signal(signal.SIGTERM)
        assert process.process is not None
        assert process.process.wait(timeout=30) == 0, process.log_tail()
        assert not is_serving("127.0.0.1", port)
    finally:
        process.kill()


def test_zookeeper_command_killed_takes_its_server_with_it(tmp_path: Path) -> None:
    """kill -9 of `blobstore zookeeper` stops the Java server too (parent-death signal):
    nothing keeps the port or the data directory."""
    process, port = _started_command(tmp_path)
    try:
        process.kill()
        wait_until(
            lambda: not is_serving("127.0.0.1", port),
            30,
            message="the server outlived its command",
            interval_s=0.1,
        )
    finally:
        process.kill()


def test_zookeeper_port_in_use_is_one_clear_line(tmp_path: Path, zk_server) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run(
        blobstore_command(
            "zookeeper", "--data-dir", str(tmp_path / "zk"), "--port", str(zk_server.port)
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("blobstore: error: port"), result.stderr
    assert "Traceback" not in result.stderr


def test_zookeeper_serves_without_socket_worker_threads(tmp_path: Path) -> None:
    """The launcher's JVM properties take effect: the selector thread does the socket I/O
    (no NIOWorkerThread), and the server still answers. A plain server of its own: the
    session's serves TLS, through Netty, when the test TLS switch is on."""
    port = free_port()
    server = start_zookeeper(tmp_path / "zk", port)
    try:
        assert is_serving("127.0.0.1", port)
        names = [
            (task / "comm").read_text().strip()
            for task in Path(f"/proc/{server.process.pid}/task").iterdir()
        ]
        assert any(name.startswith("NIOServerCxnFa") for name in names), names
        assert not [name for name in names if name.startswith("NIOWorker")], names
    finally:
        server.stop()
