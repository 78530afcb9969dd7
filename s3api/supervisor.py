"""The gateway's worker supervisor: N uvicorn worker processes, one listening socket each.

Every worker binds its own socket to the gateway's port with SO_REUSEPORT, so the
kernel spreads incoming connections over the workers by a hash of the connection's
addresses. With one socket shared by all workers (uvicorn's own supervisor), whichever
worker wakes first accepts every connection waiting in the backlog: a client that opens
its connection pool at once lands mostly on one worker, which saturates its core while
the others idle.

A worker's socket joins the port's group only when the worker starts serving (uvicorn
calls listen() after the app's startup), so connections never wait on a worker that
is still connecting to ZooKeeper. The supervisor holds a bound, never listening socket
on the port for its whole life: the port stays reserved while workers restart.

A worker that dies is started again (at most once a second per slot); one that fails
its startup stops the gateway, since its replacement would fail the same way.
SIGTERM or SIGINT stops every worker gracefully and then the supervisor; a supervisor
killed with -9 takes its workers along (they get SIGTERM from the kernel).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from multiprocessing.context import SpawnProcess
from typing import TYPE_CHECKING

from blobstore.runtime.pdeathsig import die_with_parent

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger(__name__)

# uvicorn's exit status for a worker whose app failed to start.
STARTUP_FAILURE = 3
RESTART_INTERVAL_S = 1.0
CHECK_INTERVAL_S = 0.5


def bound_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening; with `reuse_port`, one of
    the group of SO_REUSEPORT sockets on that port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _worker(
    config: uvicorn.Config, host: str, port: int, log_level: int, supervisor_pid: int
) -> None:
    import uvicorn

    from blobstore.runtime.logs import configure_logging

    # SIGTERM (a graceful stop: requests finish, ledgers close) when the supervisor dies,
    # even by kill -9, so no worker keeps the port alone.
    die_with_parent(signal.SIGTERM, supervisor_pid)
    configure_logging(log_level)
    # uvicorn silences its own access log when its Config is built, in the supervisor;
    # a spawned worker starts with fresh logging, where uvicorn.access would reach the
    # root handler: a second, poorer line per request beside the gateway's access log.
    uvicorn_access = logging.getLogger("uvicorn.access")
    uvicorn_access.handlers = []
    uvicorn_access.propagate = False
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from s3api import deferred_metrics

        deferred_metrics.install()  # before the app creates any metric
    sock = bound_socket(host, port, reuse_port=True)
    uvicorn.Server(config).run(sockets=[sock])


class Supervisor:
    def __init__(self, config: uvicorn.Config, host: str, port: int, workers: int) -> None:
        self.config = config
        self.host = host
        self.port = port
        self.workers = workers
        self._context = multiprocessing.get_context("spawn")
        self._stop = threading.Event()
        self.stop_signal: int | None = None
        self.failed = False

    def _start(self) -> SpawnProcess:
        process = self._context.Process(
            target=_worker,
            args=(self.config, self.host, self.port, logging.getLogger().level, os.getpid()),
            daemon=False,
        )
        process.start()
        return process

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
        self._stop.set()

    def run(self) -> int:
        """Run until a stop signal or a startup failure; the exit status for the CLI."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        processes = [self._start() for _ in range(self.workers)]
        started = [time.monotonic()] * self.workers
        while not self._stop.wait(CHECK_INTERVAL_S):
            for slot, process in enumerate(processes):
                if process.is_alive():
                    continue
                process.join()
                if process.exitcode == STARTUP_FAILURE:
                    logger.error(
                        "event=gateway_worker_startup_failed pid=%d: stopping the gateway",
                        process.pid,
                    )
                    self.failed = True
                    self._stop.set()
                    break
                if time.monotonic() - started[slot] < RESTART_INTERVAL_S:
                    continue
                if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and process.pid is not None:
                    # Its requests in flight are no longer in flight.
                    from prometheus_client import multiprocess

                    multiprocess.mark_process_dead(process.pid)  # type: ignore[no-untyped-call]
                logger.warning(
                    "event=gateway_worker_died pid=%d exitcode=%s: starting a new one",
                    process.pid,
                    process.exitcode,
                )
                processes[slot] = self._start()
                started[slot] = time.monotonic()
        for process in processes:
            if process.is_alive() and process.pid is not None:
                process.terminate()
        # Each worker finishes its requests (uvicorn's graceful timeout) and closes its
        # ledgers; past that plus a margin it is killed.
        deadline = time.monotonic() + (self.config.timeout_graceful_shutdown or 0) + 30
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                logger.error("event=gateway_worker_killed pid=%d: did not stop", process.pid)
                process.kill()
                process.join()
        return 1 if self.failed else 0
