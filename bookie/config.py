"""The bookie's one configuration record, from the command line and BLOBSTORE_BOOKIE_* env.

Every setting has a default, a unit in its name, and an environment variable
`BLOBSTORE_BOOKIE_<NAME>` (upper case). A command-line flag wins over the environment.
`BookieConfig.validate()` runs at startup; an error names the key and the bad value.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
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
    # busy: at Python's 5 ms that wait sits in every acknowledgement's tail.
    thread_switch_interval_ms: float = 0.5
    entry_log_bytes_max: int = 1 * GIB
    # Adds whose payload has at least this many bytes are written once, to a direct
    # entry log (O_DIRECT, fdatasync'd), and journaled as a small record naming them
    # (bookie/direct_adds.py); smaller ones are journaled whole. 0 = never.
    direct_write_min_bytes: int = 256 * KIB
    # Write direct entry logs with O_DIRECT (false: through the page cache, fdatasync'd
    # all the same; reads of recent large entries then find them in memory).
    direct_write_o_direct: bool = True
    write_cache_bytes_max: int = 64 * MIB
    read_cache_bytes_max: int = 32 * MIB
    checkpoint_interval_s: float = 10.0
    # A checkpoint writes its entries to the entry log at about this rate (faster when the
    # write cache would fill first; not paced while adds arrive at half this rate or
    # more), each slice's disk writes started as it goes: written at once, its fsync would
    # put tens of MiB ahead of every journal fsync (0 = not paced).
    checkpoint_write_mb_s: float = 32.0
    gc_interval_s: float = 300.0
    minor_compaction_threshold: float = 0.2
    minor_compaction_interval_s: float = 3600.0
    major_compaction_threshold: float = 0.8
    major_compaction_interval_s: float = 86400.0
    # The scrubber (bookie/scrubber.py): a pass reading back and verifying every stored
    # entry this often (0: only on demand, POST /api/v1/bookie/scrub), at most this fast.
    scrub_interval_s: float = 604800.0
    scrub_rate_mb_s: float = 10.0
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
        """This config, or UsageError naming the first setting that breaks a rule."""
        broken = first_broken_rule(self)
        if broken is not None:
            key, why = broken
            raise UsageError(f"bad bookie setting {key}={getattr(self, key)!r}: {why}")
        return self


# A rule: (the setting it is about, whether a config keeps it, what the setting must be).
# Checked in order; an error names the first one broken.
Rule = tuple[str, Callable[[BookieConfig], bool], str]

_PROCESS_RULES: tuple[Rule, ...] = (
    ("zk", lambda c: bool(c.zk), "a ZooKeeper connect string HOST:PORT[/chroot] is required"),
    ("journal_dir", lambda c: bool(c.journal_dir), "required"),
    ("ledger_dir", lambda c: bool(c.ledger_dir), "required"),
    ("port", lambda c: 0 <= c.port <= 65535, "must be in [0, 65535]"),
    ("http_port", lambda c: 0 <= c.http_port <= 65535, "must be in [0, 65535]"),
)

_JOURNAL_RULES: tuple[Rule, ...] = (
    (
        "journal_max_group_wait_ms",
        lambda c: 0 <= c.journal_max_group_wait_ms <= 1000,
        "in [0, 1000]",
    ),
    (
        "journal_buffered_writes_threshold_bytes",
        lambda c: 4 * KIB <= c.journal_buffered_writes_threshold_bytes <= 64 * MIB,
        "in [4 KiB, 64 MiB]",
    ),
    ("journal_file_bytes_max", lambda c: c.journal_file_bytes_max >= 64 * KIB, ">= 64 KiB"),
    (
        "journal_zero_ahead_bytes",
        lambda c: (
            c.journal_zero_ahead_bytes == 0 or 64 * KIB <= c.journal_zero_ahead_bytes <= 1 * GIB
        ),
        "0 (off) or in [64 KiB, 1 GiB]",
    ),
    ("journal_zero_ahead_max_mb_s", lambda c: c.journal_zero_ahead_max_mb_s > 0, "> 0"),
    (
        "thread_switch_interval_ms",
        lambda c: 0.05 <= c.thread_switch_interval_ms <= 100,
        "in [0.05, 100]",
    ),
)

_STORAGE_RULES: tuple[Rule, ...] = (
    (
        "entry_log_bytes_max",
        lambda c: 12 * MIB <= c.entry_log_bytes_max <= 4 * GIB - 1,
        "in [12 MiB, 4 GiB) so a log holds two maximal entries and offsets fit 32 bits",
    ),
    (
        "direct_write_min_bytes",
        lambda c: (
            c.direct_write_min_bytes == 0
            or 4 * KIB <= c.direct_write_min_bytes <= protocol.ENTRY_PAYLOAD_BYTES_MAX
        ),
        f"0 (off) or in [4 KiB, {protocol.ENTRY_PAYLOAD_BYTES_MAX}] (the largest payload)",
    ),
    ("write_cache_bytes_max", lambda c: c.write_cache_bytes_max >= 8 * MIB, ">= 8 MiB"),
    ("read_cache_bytes_max", lambda c: c.read_cache_bytes_max >= 0, ">= 0"),
    ("checkpoint_interval_s", lambda c: c.checkpoint_interval_s > 0, "> 0"),
    ("checkpoint_write_mb_s", lambda c: c.checkpoint_write_mb_s >= 0, ">= 0"),
    ("gc_interval_s", lambda c: c.gc_interval_s > 0, "> 0"),
    (
        "minor_compaction_threshold",
        lambda c: 0 <= c.minor_compaction_threshold <= 1,
        "in [0, 1]",
    ),
    (
        "major_compaction_threshold",
        lambda c: 0 <= c.major_compaction_threshold <= 1,
        "in [0, 1]",
    ),
    (
        "minor_compaction_threshold",
        lambda c: c.minor_compaction_threshold <= c.major_compaction_threshold,
        "must not exceed major_compaction_threshold",
    ),
    ("minor_compaction_interval_s", lambda c: c.minor_compaction_interval_s > 0, "> 0"),
    ("major_compaction_interval_s", lambda c: c.major_compaction_interval_s > 0, "> 0"),
    ("scrub_interval_s", lambda c: c.scrub_interval_s >= 0, ">= 0 (0: only on demand)"),
    ("scrub_rate_mb_s", lambda c: c.scrub_rate_mb_s >= 0, ">= 0 (0: not limited)"),
    ("disk_usage_threshold", lambda c: 0 < c.disk_usage_threshold <= 1, "in (0, 1]"),
    (
        "disk_usage_warn_threshold",
        lambda c: 0 < c.disk_usage_warn_threshold < c.disk_usage_threshold,
        "in (0, disk_usage_threshold)",
    ),
    (
        "disk_capacity_bytes",
        lambda c: c.disk_capacity_bytes >= 0,
        ">= 0 (0 = filesystem size)",
    ),
    ("disk_check_interval_s", lambda c: c.disk_check_interval_s > 0, "> 0"),
    ("registration_refresh_s", lambda c: c.registration_refresh_s > 0, "> 0"),
)

_LIMIT_RULES: tuple[Rule, ...] = (
    ("connections_max", lambda c: 1 <= c.connections_max <= 65536, "in [1, 65536]"),
    (
        "connection_in_flight_max",
        lambda c: 1 <= c.connection_in_flight_max <= 65536,
        "in [1, 65536]",
    ),
    (
        "connection_reads_in_flight_max",
        lambda c: 1 <= c.connection_reads_in_flight_max <= c.connection_in_flight_max,
        "in [1, connection_in_flight_max]",
    ),
    (
        "in_flight_bytes_max",
        lambda c: c.in_flight_bytes_max >= 2 * protocol.FRAME_BYTES_MAX,
        ">= two maximal frames (10 MiB)",
    ),
    ("long_poll_waiters_max", lambda c: c.long_poll_waiters_max >= 1, ">= 1"),
    (
        "reads_in_flight_max",
        lambda c: c.connection_reads_in_flight_max <= c.reads_in_flight_max <= 1_000_000,
        "in [connection_reads_in_flight_max, 1000000]",
    ),
    ("shutdown_timeout_s", lambda c: c.shutdown_timeout_s > 0, "> 0"),
    (
        "frame_stall_timeout_s",
        lambda c: 0.1 <= c.frame_stall_timeout_s <= 3600,
        "in [0.1, 3600]",
    ),
    ("zk_session_timeout_s", lambda c: c.zk_session_timeout_s >= 2, ">= 2"),
)

RULES: tuple[Rule, ...] = _PROCESS_RULES + _JOURNAL_RULES + _STORAGE_RULES + _LIMIT_RULES


def first_broken_rule(config: BookieConfig) -> tuple[str, str] | None:
    """(setting, what it must be) of the first rule `config` breaks, or None."""
    for key, kept, why in RULES:
        if not kept(config):
            return key, why
    return None


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
