"""The bookie process: its parts (journal, ledger storage, server, registration, garbage
collector, HTTP admin) started in order and stopped in reverse.

Startup: bind, check the cookie, replay the journal, serve, register in ZooKeeper, then
write the ready file. `stopping` set (SIGTERM/SIGINT): stop accepting, finish in-flight
requests, unregister (bounded), close the journal, checkpoint.

A failed checkpoint (the entry logs or the index cannot be written) turns the bookie
read-only until one succeeds; repeated failures other than a full disk stop it with
EXIT_STORAGE_FAILED (`ledger_dirs_monitor.storage_error_action`). A journal write or
fsync that fails turns it read-only at once (adds answered READ_ONLY, the registration
says read-only, /health answers 503): on a full disk it stays so until restarted, on any
other error it stops with EXIT_JOURNAL_FAILED (`ledger_dirs_monitor.journal_error_action`).
A SIGINT that was
ignored when the process started stays ignored (as a shell does for a background job):
a supervisor that runs the bookie in its own process group, as `blobstore standalone`
does, decides when a Ctrl-C stops it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import resource
import signal
import socket
import sys
import time
from typing import Any

from blobstore.runtime.errors import UsageError
from blobstore.runtime.gc_pauses import freeze_after_startup
from blobstore.runtime.heap import keep_freed_memory
from blobstore.runtime.ledger_tls import server_context_from_env
from blobstore.runtime.loop_lag import LoopLagMonitor
from blobstore.runtime.zk import ZooKeeperClient
from bookie import cookie, ledger_dirs_monitor
from bookie.bookie_server import BookieServer
from bookie.config import BookieConfig
from bookie.direct_adds import DirectAdds
from bookie.direct_entry_log import DirectEntryLog
from bookie.garbage_collector import GarbageCollector
from bookie.http_admin import HttpAdmin
from bookie.journal import Journal, JournalUnavailableError
from bookie.ledger_storage import LedgerStorage, StorageWriteError
from bookie.metrics import METRICS
from bookie.registration import Registration
from bookie.scrubber import Scrubber

logger = logging.getLogger(__name__)

ZK_CONNECT_TIMEOUT_S = 30.0
EXIT_STORAGE_FAILED = 5
EXIT_JOURNAL_FAILED = 6


def raise_open_files_limit() -> None:
    """Every entry log stays open for reads: lift the soft fd limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        logger.info("open files limit raised from=%d to=%d", soft, target)
    except (ValueError, OSError) as e:
        logger.warning("open files limit stays at %d: %s", soft, e)


def write_ready_file(path: str, content: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(content, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Bookie:
    def __init__(self, config: BookieConfig) -> None:
        self.config = config
        self.bookie_id = ""
        self.port = 0
        self.read_only = False
        self._disk_read_only = False
        # Failed checkpoints in a row (0: the last one succeeded); any turns it read-only.
        self._checkpoint_failures = 0
        # The journal stopped taking writes (for good: read-only until restarted).
        self._journal_failed = False
        self.exit_code = 0
        self.usage = ledger_dirs_monitor.DiskUsage(0, 1)
        self.stopping = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self._checkpoint_task: asyncio.Task[None] | None = None
        self.storage: LedgerStorage | None = None
        self.server: BookieServer | None = None
        self.registration: Registration | None = None
        self.journal: Journal | None = None
        self.direct_adds: DirectAdds | None = None
        self.scrubber: Scrubber | None = None

    # ------------------------------------------------------------------ state shown to others

    def info(self) -> dict[str, Any]:
        storage = self.storage
        return {
            "bookie_id": self.bookie_id,
            "free_bytes": self.usage.free_bytes,
            "total_bytes": self.usage.total_bytes,
            "read_only": self.read_only,
            "ledger_count": len(storage.states) if storage else 0,
        }

    def registration_payload(self) -> dict[str, Any]:
        info = self.info()
        return {
            "host": self.config.host,
            "port": self.port,
            "http_port": self.http.port,
            "rack": self.config.rack,
            "free_bytes": info["free_bytes"],
            "total_bytes": info["total_bytes"],
            "read_only": info["read_only"],
            "ledger_count": info["ledger_count"],
        }

    def admin_info(self) -> dict[str, Any]:
        storage = self.storage
        info = self.registration_payload()
        info["bookie_id"] = self.bookie_id
        info["disk_usage_ratio"] = self.usage.ratio
        if storage is not None:
            info["entry_logs"] = len(storage.entry_logger.list_logs())
            info["write_cache_bytes"] = storage.active_bytes + storage.flushing_bytes
            info["last_log_mark"] = list(storage.mark)
        return info

    # ------------------------------------------------------------------ lifecycle

    def spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def main(self) -> int:
        config = self.config
        loop = asyncio.get_running_loop()
        raise_open_files_limit()
        for directory in (config.journal_dir, config.ledger_dir):
            os.makedirs(directory, exist_ok=True)
        try:
            sock = socket.create_server((config.host, config.port), reuse_port=False)
        except OSError as e:
            raise UsageError(f"cannot bind {config.host}:{config.port}: {e.strerror}") from None
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.bookie_id = f"{config.host}:{self.port}"
        logger.info("bookie starting bookie_id=%s", self.bookie_id)

        zk = ZooKeeperClient(config.zk, session_timeout_s=config.zk_session_timeout_s)
        try:
            await zk.start(ZK_CONNECT_TIMEOUT_S)
        except Exception as e:
            raise UsageError(f"cannot connect to ZooKeeper {config.zk}: {e!r}") from None
        try:
            if await zk.exists("/") is None:
                raise UsageError(
                    f"the ZooKeeper path of --zk {config.zk} does not exist: create it first "
                    "(blobstore standalone and the Helm chart do), or drop the /chroot"
                )
            return await self._serve(zk, sock, loop)
        finally:
            await zk.stop()

    async def _serve(
        self, zk: ZooKeeperClient, sock: socket.socket, loop: asyncio.AbstractEventLoop
    ) -> int:
        """Start in order (cookie, journal replay, serve, register, ready file), run until
        `stopping`, then stop in reverse (`_shut_down`)."""
        config = self.config
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                loop.add_signal_handler(signum, self.stopping.set)
        await cookie.verify_or_create(zk, self.bookie_id, config.journal_dir, config.ledger_dir)
        storage = await self._open_storage()
        journal = await self._open_journal(storage)
        server = self._make_server(storage, journal)
        await self.check_disk()
        tcp_server = await loop.create_server(
            server.new_connection, sock=sock, ssl=server_context_from_env()
        )
        gc = GarbageCollector(zk, storage, config, lambda: self.read_only)
        scrubber = Scrubber(
            zk,
            storage,
            lambda: self.bookie_id,
            interval_s=config.scrub_interval_s,
            rate_bytes_per_s=config.scrub_rate_mb_s * 1e6,
        )
        self.scrubber = scrubber
        await self._start_http(journal, gc)
        registration = Registration(
            zk, self.bookie_id, self.registration_payload, config.registration_refresh_s
        )
        self.registration = registration
        await registration.register()
        self._spawn_background(gc, registration)
        loop_lag = LoopLagMonitor(METRICS.event_loop_lag_seconds, f"bookie {self.bookie_id}")
        loop_lag.start()
        freeze_after_startup(METRICS.registry)
        keep_freed_memory()
        failure = self._announce_ready()

        await self.stopping.wait()
        logger.info("bookie stopping bookie_id=%s", self.bookie_id)
        loop_lag.stop()
        tcp_server.close()
        await self._shut_down(server, registration, journal, storage)
        logger.info("bookie stopped bookie_id=%s", self.bookie_id)
        if failure is not None:
            raise failure
        return self.exit_code

    async def _open_storage(self) -> LedgerStorage:
        """Open the ledger storage and replay the journal from its LastLogMark."""
        config = self.config
        try:
            storage = await asyncio.to_thread(
                LedgerStorage,
                config.ledger_dir,
                entry_log_bytes_max=config.entry_log_bytes_max,
                write_cache_bytes_max=config.write_cache_bytes_max,
                read_cache_bytes_max=config.read_cache_bytes_max,
                checkpoint_write_bytes_per_s=config.checkpoint_write_mb_s * 1e6,
            )
        except OSError as e:
            raise StorageWriteError(
                f"a new entry log cannot be written in {config.ledger_dir}: {e}"
            ) from e
        self.storage = storage
        await asyncio.to_thread(storage.replay_journal, config.journal_dir)
        return storage

    async def _open_journal(self, storage: LedgerStorage) -> Journal:
        """A fresh journal file (after the replayed ones), files before the mark deleted,
        and the writer started."""
        config = self.config
        journal = Journal(
            config.journal_dir,
            max_group_wait_ms=config.journal_max_group_wait_ms,
            flush_when_queue_empty=config.journal_flush_when_queue_empty,
            buffered_writes_threshold_bytes=config.journal_buffered_writes_threshold_bytes,
            file_bytes_max=config.journal_file_bytes_max,
            queue_entries_max=config.journal_queue_entries_max,
            remove_from_page_cache=config.journal_remove_from_page_cache,
            zero_ahead_bytes=config.journal_zero_ahead_bytes,
            zero_ahead_max_write_bytes_per_s=config.journal_zero_ahead_max_mb_s * 1e6,
        )
        try:
            await asyncio.to_thread(journal.open_new_file)
        except OSError as e:
            raise JournalUnavailableError(
                f"a new journal file cannot be written in {config.journal_dir}: {e}"
            ) from e
        await asyncio.to_thread(journal.delete_files_before, storage.mark[0])
        journal.needs_room = storage.needs_room
        journal.wait_for_room = storage.wait_for_room
        journal.write_failed = self.journal_failed
        self.journal = journal
        storage.journal = journal
        journal.start()
        if config.direct_write_min_bytes > 0:
            self.direct_adds = DirectAdds(
                DirectEntryLog(storage.entry_logger, o_direct=config.direct_write_o_direct),
                storage,
                journal,
                min_bytes=config.direct_write_min_bytes,
                queue_items_max=config.journal_queue_entries_max,
            )
            self.direct_adds.start()
        METRICS.ledgers.set(len(storage.states))
        return journal

    def _make_server(self, storage: LedgerStorage, journal: Journal) -> BookieServer:
        config = self.config
        self.server = BookieServer(
            bookie_id=self.bookie_id,
            storage=storage,
            journal=journal,
            connections_max=config.connections_max,
            connection_in_flight_max=config.connection_in_flight_max,
            connection_reads_in_flight_max=config.connection_reads_in_flight_max,
            in_flight_bytes_max=config.in_flight_bytes_max,
            reads_in_flight_max=config.reads_in_flight_max,
            long_poll_waiters_max=config.long_poll_waiters_max,
            frame_stall_timeout_s=config.frame_stall_timeout_s,
            info=self.info,
            checkpoint_soon=self.checkpoint_soon,
            direct_adds=self.direct_adds,
        )
        return self.server

    async def _start_http(self, journal: Journal, gc: GarbageCollector) -> None:
        config = self.config
        self.http = HttpAdmin(
            self.admin_info,
            lambda: journal.failure is None,
            force_gc=gc.force,
            gc_threshold_default=config.major_compaction_threshold,
            scrubber=self.scrubber,
        )
        try:
            await self.http.start(config.host, config.http_port)
        except OSError as e:
            raise UsageError(
                f"cannot bind http port {config.host}:{config.http_port}: {e.strerror}"
            ) from None

    def _spawn_background(self, gc: GarbageCollector, registration: Registration) -> None:
        self.spawn(registration.run(), "registration")
        self.spawn(self.checkpoint_loop(), "checkpoint")
        self.spawn(self.disk_loop(), "disk-check")
        self.spawn(self.stall_loop(), "stalled-connections")
        self.spawn(gc.run(), "gc")
        if self.scrubber is not None:
            self.spawn(self.scrubber.run(), "scrubber")

    def _announce_ready(self) -> UsageError | None:
        """Write the ready file (when configured). A failure to write it stops the bookie
        as any other stop (the journal, registration and tasks all run), and is returned
        to be raised once stopped."""
        config = self.config
        try:
            if config.ready_file:
                write_ready_file(
                    config.ready_file,
                    {"bookie_id": self.bookie_id, "port": self.port, "http_port": self.http.port},
                )
        except OSError as e:
            self.stopping.set()
            return UsageError(f"--ready-file {config.ready_file}: {e.strerror or e}")
        logger.info(
            "bookie ready bookie_id=%s http_port=%d thread_switch_interval_ms=%g",
            self.bookie_id,
            self.http.port,
            sys.getswitchinterval() * 1000,
        )
        return None

    async def _shut_down(
        self,
        server: BookieServer,
        registration: Registration,
        journal: Journal,
        storage: LedgerStorage,
    ) -> None:
        """Stop in the reverse order of startup: finish in-flight requests (bounded),
        unregister (bounded), stop background tasks, close the journal, checkpoint
        (unless the journal failed), close the HTTP admin, then storage. The direct
        write path closes before the journal: its last groups' records go there."""
        await server.drain(self.config.shutdown_timeout_s)
        await registration.unregister()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.scrubber is not None:
            await self.scrubber.close()  # no scrub read left when storage closes
        if self.direct_adds is not None:
            await self.direct_adds.close()  # its last records go to the journal first
        await journal.close()
        if journal.failure is None:
            try:
                await storage.checkpoint(paced=False)
            except Exception as e:
                logger.error(
                    "checkpoint at stop failed bookie_id=%s error=%r: the journal keeps the "
                    "entries, replayed at the next start",
                    self.bookie_id,
                    e,
                )
                self.exit_code = EXIT_STORAGE_FAILED
        await self.http.close()
        await storage.close()

    # ------------------------------------------------------------------ background work

    def checkpoint_soon(self) -> None:
        if self._checkpoint_task is None or self._checkpoint_task.done():
            self._checkpoint_task = self.spawn(self._checkpoint_logged(), "checkpoint-now")

    async def _checkpoint_logged(self) -> None:
        assert self.storage is not None
        try:
            await self.storage.checkpoint()
        except Exception as e:
            self._checkpoint_failed(e)
        else:
            if self._checkpoint_failures:
                logger.warning(
                    "checkpoint_recovered bookie_id=%s failed_before=%d",
                    self.bookie_id,
                    self._checkpoint_failures,
                )
                self._checkpoint_failures = 0
                self._update_read_only()

    def _checkpoint_failed(self, error: Exception) -> None:
        """Read-only at once (adds refused, reads served from the write cache and the
        logs); a stop when the errors persist (`storage_error_action`)."""
        self._checkpoint_failures += 1
        error_number = error.errno if isinstance(error, OSError) else None
        action = ledger_dirs_monitor.storage_error_action(error_number, self._checkpoint_failures)
        logger.error(
            "checkpoint_failed bookie_id=%s failures_in_a_row=%d action=%s error=%r",
            self.bookie_id,
            self._checkpoint_failures,
            action,
            error,
            exc_info=not isinstance(error, OSError),
        )
        self._update_read_only()
        if action == "stop" and not self.stopping.is_set():
            logger.error(
                "bookie_stopping_on_storage_errors bookie_id=%s: the journal keeps every "
                "entry not checkpointed; replace the disk and restart",
                self.bookie_id,
            )
            self.exit_code = EXIT_STORAGE_FAILED
            self.stopping.set()

    def journal_failed(self, error: BaseException) -> None:
        """The journal takes no more writes (bookie/journal.py): read-only at once, so
        adds are answered READ_ONLY and the registration says so; a stop unless the disk
        is only full (`journal_error_action`). Runs before the journal answers the adds
        it held, so none is answered before the bookie is read-only."""
        error_number = error.errno if isinstance(error, OSError) else None
        action = ledger_dirs_monitor.journal_error_action(error_number)
        logger.error(
            "journal_failed bookie_id=%s action=%s error=%r: %s",
            self.bookie_id,
            action,
            error,
            "read-only until restarted once space is freed"
            if action == "read_only"
            else "stopping; the journal keeps every acknowledged entry",
        )
        self._journal_failed = True
        self._update_read_only()
        if action == "stop" and not self.stopping.is_set():
            self.exit_code = EXIT_JOURNAL_FAILED
            self.stopping.set()

    async def checkpoint_loop(self) -> None:
        # The first wait is drawn at random, so bookies started together (a cluster after
        # a restart, the standalone) do not checkpoint together every interval after.
        await asyncio.sleep(self.config.checkpoint_interval_s * random.uniform(0.5, 1.0))
        while True:
            await self._checkpoint_logged()
            METRICS.ledgers.set(len(self.storage.states) if self.storage else 0)
            await asyncio.sleep(self.config.checkpoint_interval_s)

    async def check_disk(self) -> None:
        config = self.config
        usage = await asyncio.to_thread(
            ledger_dirs_monitor.measure,
            (config.journal_dir, config.ledger_dir),
            config.disk_capacity_bytes,
        )
        self.usage = usage
        METRICS.disk_usage_ratio.set(usage.ratio)
        self._disk_read_only = ledger_dirs_monitor.next_read_only(
            self._disk_read_only,
            usage.ratio,
            config.disk_usage_threshold,
            config.disk_usage_warn_threshold,
        )
        self._update_read_only()

    def _update_read_only(self) -> None:
        """Read-only while the disk is (nearly) full, the last checkpoint failed, or the
        journal failed."""
        read_only = self._disk_read_only or self._checkpoint_failures > 0 or self._journal_failed
        if read_only == self.read_only:
            return
        self.read_only = read_only
        if self.server is not None:
            self.server.read_only = read_only
        METRICS.read_only.set(1 if read_only else 0)
        logger.warning(
            "bookie_%s bookie_id=%s usage_ratio=%.3f checkpoint_failures=%d journal_failed=%s",
            "read_only" if read_only else "writable",
            self.bookie_id,
            self.usage.ratio,
            self._checkpoint_failures,
            self._journal_failed,
        )
        if self.registration is not None:
            self.registration.trigger()

    async def stall_loop(self) -> None:
        interval_s = min(5.0, self.config.frame_stall_timeout_s / 2)
        while True:
            await asyncio.sleep(interval_s)
            assert self.server is not None
            self.server.close_stalled_connections()

    async def disk_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.disk_check_interval_s)
            started = time.monotonic()
            try:
                await self.check_disk()
            except Exception:
                logger.exception("disk check failed")
            logger.debug("disk check took_s=%.3f", time.monotonic() - started)
