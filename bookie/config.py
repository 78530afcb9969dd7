"""The bookie's one configuration record, from the command line and BLOBSTORE_BOOKIE_* env.

Every setting has a default, a unit in its name, and an environment variable
`BLOBSTORE_BOOKIE_<NAME>` (upper case). A command-line flag wins over the environment.
`BookieConfig.validate()` runs at startup; an error names the key and the bad value.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass

from blobstore.runtime.errors import UsageError
from blobstore.wire import protocol

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


@dataclass(frozen=True, slots=True)
class BookieConfig:
    zk: str = ""
    host: str = "127.0.0.1"
    port: int = 3181
    http_port: int = 8000
    journal_dir: str = ""
    ledger_dir: str = ""
    ready_file: str = ""
    rack: str = "/default-rack"

    # Write and fsync a batch as soon as nothing else is queued: adds arriving during that
    # fsync form the next batch. False: gather for up to journal_max_group_wait_ms first
    # (fewer fsyncs per add at low rates, more latency), BookKeeper's default.
    journal_flush_when_queue_empty: bool = True
    journal_max_group_wait_ms: float = 2.0
    journal_buffered_writes_threshold_bytes: int = 512 * KIB
    journal_file_bytes_max: int = 256 * MIB
    # Drop synced journal pages from the page cache (BookKeeper's journalRemoveFromPageCache).
    journal_remove_from_page_cache: bool = True
    # Keep this much of the journal file ahead of the writer written with zeros and fsync'd,
    # so a batch's fdatasync has no file system metadata to commit (0 = off); only while
    # the journal writes slower than journal_zero_ahead_max_mb_s (bookie/journal.py).
    journal_zero_ahead_bytes: int = 4 * MIB
    journal_zero_ahead_max_mb_s: float = 32.0
    # How long a thread may hold the GIL while another waits for it (sys.setswitchinterval).
    # The journal writer needs the GIL back after every fsync while the loop thread is
    # busy: at Python's 5 ms that wait sat in every acknowledgement's tail.
    thread_switch_interval_ms: float = 0.5
    entry_log_bytes_max: int = 1 * GIB
    write_cache_bytes_max: int = 64 * MIB
    read_cache_bytes_max: int = 32 * MIB
    checkpoint_interval_s: float = 10.0
    # A checkpoint writes its entries to the entry log at about this rate (faster when the
    # write cache would fill first; not paced while adds arrive at half this rate or
    # more), each slice's disk writes started as it goes: written at once, its fsync put
    # tens of MiB ahead of every journal fsync (0 = not paced).
    checkpoint_write_mb_s: float = 32.0
    gc_interval_s: float = 300.0
    minor_compaction_threshold: float = 0.2
    minor_compaction_interval_s: float = 3600.0
    major_compaction_threshold: float = 0.8
    major_compaction_interval_s: float = 86400.0
    disk_usage_threshold: float = 0.95
    disk_usage_warn_threshold: float = 0.90
    disk_capacity_bytes: int = 0
    disk_check_interval_s: float = 5.0
    registration_refresh_s: float = 10.0
    connections_max: int = 1024
    connection_in_flight_max: int = 512
    connection_reads_in_flight_max: int = 64
    in_flight_bytes_max: int = 256 * MIB
    # Reads (and other non-add requests) in flight over all connections.
    reads_in_flight_max: int = 1024
    long_poll_waiters_max: int = 10_000
    # A connection holding part of a frame that gets no more bytes for this long is closed
    # (a stalled or malicious client must not keep a connection slot and its buffer).
    frame_stall_timeout_s: float = 30.0
    shutdown_timeout_s: float = 10.0
    zk_session_timeout_s: float = 10.0

    @property
    def journal_queue_entries_max(self) -> int:
        """Every request in flight may sit in the journal queue: this bounds its count
        (its bytes are bounded by in_flight_bytes_max)."""
        return self.connections_max * self.connection_in_flight_max + 1024

    def validate(self) -> BookieConfig:
        def need(ok: bool, key: str, why: str) -> None:
            if not ok:
                raise UsageError(f"bad bookie setting {key}={getattr(self, key)!r}: {why}")

        need(bool(self.zk), "zk", "a ZooKeeper connect string HOST:PORT[/chroot] is required")
        need(bool(self.journal_dir), "journal_dir", "required")
        need(bool(self.ledger_dir), "ledger_dir", "required")
        need(0 <= self.port <= 65535, "port", "must be in [0, 65535]")
        need(0 <= self.http_port <= 65535, "http_port", "must be in [0, 65535]")
        need(
            0 <= self.journal_max_group_wait_ms <= 1000, "journal_max_group_wait_ms", "in [0, 1000]"
        )
        need(
            4 * KIB <= self.journal_buffered_writes_threshold_bytes <= 64 * MIB,
            "journal_buffered_writes_threshold_bytes",
            "in [4 KiB, 64 MiB]",
        )
        need(self.journal_file_bytes_max >= 64 * KIB, "journal_file_bytes_max", ">= 64 KiB")
        need(
            self.journal_zero_ahead_bytes == 0
            or 64 * KIB <= self.journal_zero_ahead_bytes <= 1 * GIB,
            "journal_zero_ahead_bytes",
            "0 (off) or in [64 KiB, 1 GiB]",
        )
        need(self.journal_zero_ahead_max_mb_s > 0, "journal_zero_ahead_max_mb_s", "> 0")
        need(
            0.05 <= self.thread_switch_interval_ms <= 100,
            "thread_switch_interval_ms",
            "in [0.05, 100]",
        )
        need(
            12 * MIB <= self.entry_log_bytes_max <= 4 * GIB - 1,
            "entry_log_bytes_max",
            "in [12 MiB, 4 GiB) so a log holds two maximal entries and offsets fit 32 bits",
        )
        need(self.write_cache_bytes_max >= 8 * MIB, "write_cache_bytes_max", ">= 8 MiB")
        need(self.read_cache_bytes_max >= 0, "read_cache_bytes_max", ">= 0")
        need(self.checkpoint_interval_s > 0, "checkpoint_interval_s", "> 0")
        need(self.checkpoint_write_mb_s >= 0, "checkpoint_write_mb_s", ">= 0")
        need(self.gc_interval_s > 0, "gc_interval_s", "> 0")
        need(0 <= self.minor_compaction_threshold <= 1, "minor_compaction_threshold", "in [0, 1]")
        need(0 <= self.major_compaction_threshold <= 1, "major_compaction_threshold", "in [0, 1]")
        need(
            self.minor_compaction_threshold <= self.major_compaction_threshold,
            "minor_compaction_threshold",
            "must not exceed major_compaction_threshold",
        )
        need(self.minor_compaction_interval_s > 0, "minor_compaction_interval_s", "> 0")
        need(self.major_compaction_interval_s > 0, "major_compaction_interval_s", "> 0")
        need(0 < self.disk_usage_threshold <= 1, "disk_usage_threshold", "in (0, 1]")
        need(
            0 < self.disk_usage_warn_threshold < self.disk_usage_threshold,
            "disk_usage_warn_threshold",
            "in (0, disk_usage_threshold)",
        )
        need(self.disk_capacity_bytes >= 0, "disk_capacity_bytes", ">= 0 (0 = filesystem size)")
        need(self.disk_check_interval_s > 0, "disk_check_interval_s", "> 0")
        need(self.registration_refresh_s > 0, "registration_refresh_s", "> 0")
        need(1 <= self.connections_max <= 65536, "connections_max", "in [1, 65536]")
        need(
            1 <= self.connection_in_flight_max <= 65536,
            "connection_in_flight_max",
            "in [1, 65536]",
        )
        need(
            1 <= self.connection_reads_in_flight_max <= self.connection_in_flight_max,
            "connection_reads_in_flight_max",
            "in [1, connection_in_flight_max]",
        )
        need(
            self.in_flight_bytes_max >= 2 * protocol.FRAME_BYTES_MAX,
            "in_flight_bytes_max",
            ">= two maximal frames (10 MiB)",
        )
        need(self.long_poll_waiters_max >= 1, "long_poll_waiters_max", ">= 1")
        need(
            self.connection_reads_in_flight_max <= self.reads_in_flight_max <= 1_000_000,
            "reads_in_flight_max",
            "in [connection_reads_in_flight_max, 1000000]",
        )
        need(self.shutdown_timeout_s > 0, "shutdown_timeout_s", "> 0")
        need(
            0.1 <= self.frame_stall_timeout_s <= 3600,
            "frame_stall_timeout_s",
            "in [0.1, 3600]",
        )
        need(self.zk_session_timeout_s >= 2, "zk_session_timeout_s", ">= 2")
        return self


# Settings that are not tunables: each has its own flag.
IDENTITY_FIELDS = (
    "zk",
    "host",
    "port",
    "http_port",
    "journal_dir",
    "ledger_dir",
    "ready_file",
    "rack",
)


def tunables() -> list[dataclasses.Field[object]]:
    return [f for f in dataclasses.fields(BookieConfig) if f.name not in IDENTITY_FIELDS]


def env_name(name: str) -> str:
    return f"BLOBSTORE_BOOKIE_{name.upper()}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = BookieConfig()
    parser.add_argument(
        "--zk", default=os.environ.get("BLOBSTORE_ZK"), help="HOST:PORT[/chroot] (env BLOBSTORE_ZK)"
    )
    parser.add_argument(
        "--host", default=None, help=f"address to bind and advertise (default {defaults.host})"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"TCP port, 0 = any free port (default {defaults.port})",
    )
    parser.add_argument(
        "--http-port",
        type=int,
        default=None,
        help=f"admin HTTP port (/metrics, /health), 0 = any free port (default {defaults.http_port})",
    )
    parser.add_argument(
        "--journal-dir",
        default=None,
        help="write-ahead journal directory, required; best on its own fast disk",
    )
    parser.add_argument(
        "--ledger-dir",
        default=None,
        help="entry logs and the RocksDB index directory, required",
    )
    parser.add_argument(
        "--ready-file", default=None, help="JSON written once serving and registered"
    )
    parser.add_argument("--rack", default=None, help=f"network location (default {defaults.rack})")
    for f in tunables():
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(
            flag, dest=f.name, default=None, help=f"default {f.default} (env {env_name(f.name)})"
        )


def _convert(name: str, kind: object, raw: object) -> object:
    try:
        if kind in (bool, "bool"):
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind in (int, "int"):
            return int(str(raw).replace("_", ""))
        if kind in (float, "float"):
            return float(str(raw))
        return str(raw)
    except ValueError:
        raise UsageError(f"bad bookie setting {name}={raw!r}: expected {kind}") from None


def from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> BookieConfig:
    """Flags first, then BLOBSTORE_BOOKIE_<NAME>, then the default; validated."""
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, object] = {}
    for f in dataclasses.fields(BookieConfig):
        raw = getattr(args, f.name, None)
        if raw is None:
            raw = environ.get(env_name(f.name))
        if raw is None:
            continue
        values[f.name] = _convert(f.name, f.type, raw)
    return BookieConfig(**values).validate()  # type: ignore[arg-type]
