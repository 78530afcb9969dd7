"""What one maintenance run is asked to do, checked before anything starts."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

from blobstore.runtime.errors import UsageError

PHASES = ("gc", "compact", "lifecycle", "tier")
GRACE_S_DEFAULT = 3600.0
COMPACT_THRESHOLD_DEFAULT = 0.8
COMPACT_GARBAGE_BYTES_MIN_DEFAULT = 64 << 10
COMPACT_BYTES_MAX_DEFAULT = 64 << 30
BANDWIDTH_MB_S_DEFAULT = 100.0
PAGES_PER_TASK_DEFAULT = 64
# ZooKeeper's own bounds with its default tickTime (2 s): 2 to 20 ticks.
ZK_SESSION_TIMEOUT_S_DEFAULT = 15.0
ZK_SESSION_TIMEOUT_S_MIN = 4.0
ZK_SESSION_TIMEOUT_S_MAX = 40.0
# Spark master URLs: local, local[N], local[*], local[N,F], spark://, k8s://, yarn, mesos://.
_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|yarn|(spark|k8s|mesos)://\S+)$")


@dataclass(frozen=True, slots=True)
class MaintainOptions:
    zk: str
    master: str = ""  # "": local[*], or the master spark-submit was given
    dry_run: bool = False
    phases: tuple[str, ...] = PHASES
    grace_s: float = GRACE_S_DEFAULT
    compact_threshold: float = COMPACT_THRESHOLD_DEFAULT
    compact_garbage_bytes_min: int = COMPACT_GARBAGE_BYTES_MIN_DEFAULT
    compact_bytes_max: int = COMPACT_BYTES_MAX_DEFAULT
    bandwidth_mb_s: float = BANDWIDTH_MB_S_DEFAULT
    now: float | None = None  # the time rules are evaluated at (None: the clock)
    pages_per_task: int = PAGES_PER_TASK_DEFAULT
    # The driver's ZooKeeper session: it holds the run's lock, so a killed run's lock
    # stands this long before the next run may start.
    zk_session_timeout_s: float = ZK_SESSION_TIMEOUT_S_DEFAULT
    bookie_gc: bool = True  # ask the bookies for a GC pass after deleting ledgers
    catalog_root: str = "/catalog"
    pushgateway: str = ""
    metrics_file: str = ""
    # Where the driver's Spark keeps its local files ("": `scratch.scratch_root`'s default).
    scratch_dir: str = ""
    # Test hooks: pause (or die) at named points of the run (`hooks.py`).
    hooks: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_options(self)

    def wants(self, phase: str) -> bool:
        return phase in self.phases


def check_options(options: MaintainOptions) -> None:
    """One clear UsageError for the first bad value."""
    if not options.zk or any(c.isspace() for c in options.zk):
        raise UsageError(f"bad --zk {options.zk!r}: HOST:PORT[,HOST:PORT...][/chroot]")
    if options.master and not _MASTER.match(options.master):
        raise UsageError(
            f"bad --master {options.master!r}: local[*], local[N], spark://HOST:PORT, "
            "k8s://https://HOST:PORT, yarn or mesos://HOST:PORT"
        )
    unknown = [p for p in options.phases if p not in PHASES]
    if unknown or not options.phases:
        raise UsageError(f"bad --only {','.join(options.phases)!r}: a list of {', '.join(PHASES)}")
    if not 0 <= options.grace_s < 10 * 365 * 86400:
        raise UsageError(f"bad --grace {options.grace_s!r}: seconds, 0 or more")
    if not 0 < options.compact_threshold <= 1:
        raise UsageError(
            f"bad --compact-threshold {options.compact_threshold!r}: a live ratio in (0, 1]"
        )
    if options.compact_garbage_bytes_min < 0 or options.compact_bytes_max < 0:
        raise UsageError("bad compaction byte bounds: 0 or more")
    if not 0 < options.bandwidth_mb_s <= 100_000:
        raise UsageError(f"bad --bandwidth {options.bandwidth_mb_s!r}: MB/s, more than 0")
    if not 1 <= options.pages_per_task <= 100_000:
        raise UsageError(f"bad --pages-per-task {options.pages_per_task!r}")
    if not ZK_SESSION_TIMEOUT_S_MIN <= options.zk_session_timeout_s <= ZK_SESSION_TIMEOUT_S_MAX:
        raise UsageError(
            f"bad --zk-session-timeout {options.zk_session_timeout_s!r}: seconds, "
            f"{ZK_SESSION_TIMEOUT_S_MIN:g} to {ZK_SESSION_TIMEOUT_S_MAX:g}"
        )


def parse_now(text: str) -> float:
    """--now: ISO 8601 (a time without a zone is UTC) -> epoch seconds."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"bad --now {text!r}: ISO 8601, e.g. 2026-12-01T00:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def parse_phases(text: str) -> tuple[str, ...]:
    phases = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        raise UsageError(f"bad --only {text!r}: a comma-separated list of {', '.join(PHASES)}")
    return phases
