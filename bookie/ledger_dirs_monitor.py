"""Disk usage of the bookie's directories, and the read-only decisions: on usage, and on
failed checkpoints.

Usage is the bytes of the files under the journal and ledger directories divided by the
capacity: `disk_capacity_bytes` when set (a quota; this is how tests fill a bookie), else
the size of the filesystem holding the ledger directory. Above `disk_usage_threshold` the
bookie turns read-only; it returns to writable only under `disk_usage_warn_threshold`
(hysteresis, so it does not flap at the boundary).

A checkpoint that fails to write the entry logs or the index turns the bookie read-only
too, until a checkpoint succeeds (`storage_error_action`): a full disk (ENOSPC, EDQUOT)
keeps it read-only for as long as it lasts, as BookKeeper does when every ledger
directory is full; any other error (EIO: a failing disk) stops the bookie once it has
failed `STORAGE_FAILURES_BEFORE_STOP` checkpoints in a row, as BookKeeper's fatal
storage error does. Nothing acknowledged is lost either way: the journal keeps it.

A journal write or fsync that fails stops the journal for good (bookie/journal.py): the
bookie turns read-only at once, so adds are answered READ_ONLY and writers replace it
(`journal_error_action`). A full disk (ENOSPC, EDQUOT) keeps it running read-only, serving
reads, until it is restarted once space is freed (the restart replays the journal and
starts a fresh file); any other error (EIO, a short write that cannot be finished, a bug
in applying a record) stops it with EXIT_JOURNAL_FAILED, for a supervisor to restart.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Literal

# Failed checkpoints in a row, for an error other than a full disk, that stop the bookie.
STORAGE_FAILURES_BEFORE_STOP = 3
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True, slots=True)
class DiskUsage:
    used_bytes: int
    total_bytes: int

    @property
    def free_bytes(self) -> int:
        return max(0, self.total_bytes - self.used_bytes)

    @property
    def ratio(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 1.0


def directory_bytes(directory: str) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


def measure(directories: tuple[str, ...], capacity_bytes: int) -> DiskUsage:
    """Blocking: walks the directories (run it in an executor)."""
    if capacity_bytes > 0:
        used = sum(directory_bytes(d) for d in directories)
        return DiskUsage(used, capacity_bytes)
    st = os.statvfs(directories[-1])
    total = st.f_blocks * st.f_frsize
    return DiskUsage(total - st.f_bavail * st.f_frsize, total)


def next_read_only(read_only: bool, ratio: float, threshold: float, warn_threshold: float) -> bool:
    if not read_only:
        return ratio >= threshold
    return ratio >= warn_threshold


def storage_error_action(
    error_number: int | None, failures_in_a_row: int
) -> Literal["read_only", "stop"]:
    """What a failed checkpoint makes of the bookie (module docstring): `error_number`
    is the failure's errno (None: not an OSError), `failures_in_a_row` counts it."""
    assert failures_in_a_row >= 1, failures_in_a_row
    if error_number in DISK_FULL_ERRNOS:
        return "read_only"
    return "stop" if failures_in_a_row >= STORAGE_FAILURES_BEFORE_STOP else "read_only"


def journal_error_action(error_number: int | None) -> Literal["read_only", "stop"]:
    """What a journal that stopped taking writes makes of the bookie (module docstring):
    `error_number` is the failure's errno (None: not an OSError)."""
    return "read_only" if error_number in DISK_FULL_ERRNOS else "stop"
