"""A bookie stopped while its ZooKeeper is gone: the stop does not wait out a ZooKeeper
operation timeout to delete a registration the session's end removes anyway."""

from __future__ import annotations

import time
from pathlib import Path

from blobstore.cli.zookeeper_server import free_port, start_zookeeper
from tests.cluster.processes import BookieProcess, ProcessReaper
from tests.cluster.tls import zk_tls


def test_a_bookie_stops_cleanly_while_zookeeper_is_unreachable(
    tmp_path: Path, reaper: ProcessReaper
) -> None:
    server = start_zookeeper(tmp_path / "zk", free_port(), heap_mb=256, tls=zk_tls())
    try:
        bookie = BookieProcess(
            index=0, zk=server.connect_string, root=tmp_path / "bookie", reaper=reaper
        ).start()
    finally:
        server.stop()
    assert bookie.managed is not None
    started = time.monotonic()
    # Within the bookie's ZooKeeper operation timeout (15 s), which it used to wait out.
    code = bookie.managed.stop(timeout_s=12.0)
    elapsed = time.monotonic() - started
    log = bookie.managed.log_path.read_text(errors="replace")
    assert code == 0, (code, elapsed, log[-2000:])
    assert "unregister failed" in log and "bookie stopped" in log, log[-2000:]
