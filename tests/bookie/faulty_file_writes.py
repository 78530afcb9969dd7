"""A fault-injecting stand-in for the entry logger's system calls (no LD_PRELOAD).

`FaultyWrites` is a `bookie.entry_logger.FileWrites` whose `pwritev`, `fdatasync` and
`start_writeback` obey a list of `Fault`s: fail with an errno at chosen calls, write at
most some bytes per call (short writes, the rest left to the caller), or let a byte
budget run out (a disk that fills: the write that crosses it is short, the next fails
with ENOSPC). In a test it is passed to `LedgerStorage(file_writes=...)` or
`Journal(file_writes=...)` (the journal writes its records and fsyncs through the same
calls).

For a bookie process, `python -m tests.bookie.faulty_file_writes bookie ARGS` runs the
`blobstore` command with one `FaultyWrites` installed as `entry_logger.FILE_WRITES`, its
faults read from `<root>/entry-log-faults.json` (`<root>` is the parent of
`--ledger-dir`) whenever that file changes, and another as `journal.FILE_WRITES`, read
from `<root>/journal-faults.json`: a test turns faults on and off while the bookie runs,
and a restart with the file emptied runs clean.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from bookie import entry_logger, journal
from bookie.disk_io import Buffer

CONTROL_FILE_NAME = "entry-log-faults.json"
JOURNAL_CONTROL_FILE_NAME = "journal-faults.json"
CALLS = ("pwritev", "fdatasync", "start_writeback")


@dataclass(frozen=True, slots=True)
class Fault:
    """Calls of kind `call` after the first `skip` of them: fail with `error` (an errno
    name), or write at most `short_bytes` each, or draw on `budget_bytes` (then fail with
    `error`). `times` bounds how many calls it hits (-1: every one)."""

    call: str
    error: str | None = None
    skip: int = 0
    times: int = -1
    short_bytes: int = 0
    budget_bytes: int = -1

    def __post_init__(self) -> None:
        assert self.call in CALLS, self.call
        assert self.error is None or hasattr(errno, self.error), self.error
        assert self.error or self.short_bytes > 0 or self.budget_bytes >= 0, self


def _first_bytes(buffers: list[Buffer], count: int) -> list[Buffer]:
    kept: list[Buffer] = []
    for buffer in buffers:
        if count <= 0:
            break
        kept.append(memoryview(buffer)[:count])
        count -= len(kept[-1])
    return kept


class FaultyWrites(entry_logger.FileWrites):
    def __init__(self, faults: list[Fault] | None = None) -> None:
        self._lock = threading.Lock()
        self.faults: list[Fault] = []
        self.calls: dict[str, int] = {}
        self.hits: dict[str, int] = {}
        self.budget_left: dict[int, int] = {}
        self.set_faults(faults or [])

    def set_faults(self, faults: list[Fault]) -> None:
        """Replace the faults; call counts start again from zero."""
        with self._lock:
            self.faults = list(faults)
            self.calls = dict.fromkeys(CALLS, 0)
            self.hits = {}
            self.budget_left = {
                index: fault.budget_bytes
                for index, fault in enumerate(self.faults)
                if fault.budget_bytes >= 0
            }

    def _active(self, call: str) -> tuple[int, Fault] | None:
        """The first fault that applies to this call (counted), or None."""
        self.calls[call] += 1
        for index, fault in enumerate(self.faults):
            if fault.call != call or self.calls[call] <= fault.skip:
                continue
            hits = self.hits.get(f"{index}", 0)
            if fault.times >= 0 and hits >= fault.times:
                continue
            self.hits[f"{index}"] = hits + 1
            return index, fault
        return None

    @staticmethod
    def _raise(fault: Fault) -> None:
        code = getattr(errno, fault.error or "ENOSPC")
        raise OSError(code, f"injected: {os.strerror(code)}")

    def pwritev(self, fd: int, buffers: list[Buffer], offset: int) -> int:
        with self._lock:
            active = self._active("pwritev")
            if active is None:
                return os.pwritev(fd, buffers, offset)
            index, fault = active
            total = sum(len(buffer) for buffer in buffers)
            allowed = total
            if fault.short_bytes > 0:
                allowed = min(allowed, fault.short_bytes)
            if index in self.budget_left:
                allowed = min(allowed, self.budget_left[index])
                if allowed <= 0 and fault.error is None:
                    return 0  # a write that makes no progress
                if allowed <= 0:
                    self._raise(fault)
                self.budget_left[index] -= allowed
            elif fault.error is not None:
                self._raise(fault)
            return os.pwritev(fd, _first_bytes(buffers, allowed), offset)

    def fdatasync(self, fd: int) -> None:
        with self._lock:
            active = self._active("fdatasync")
        if active is not None and active[1].error is not None:
            self._raise(active[1])
        os.fdatasync(fd)

    def start_writeback(self, fd: int, offset: int, length: int) -> bool:
        with self._lock:
            active = self._active("start_writeback")
        if active is not None and active[1].error is not None:
            self._raise(active[1])
        return entry_logger.start_writeback(fd, offset, length)


class ControlledWrites(FaultyWrites):
    """FaultyWrites whose faults come from a JSON file (a list of `Fault` fields), read
    again whenever the file's modification time or size changes."""

    def __init__(self, control_file: Path) -> None:
        super().__init__()
        self.control_file = control_file
        self._seen: tuple[int, int] | None = None

    def _reload(self) -> None:
        try:
            stat = self.control_file.stat()
        except FileNotFoundError:
            seen = None
        else:
            seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        self._seen = seen
        raw = json.loads(self.control_file.read_text() or "[]") if seen else []
        self.set_faults([Fault(**fields) for fields in raw])

    def pwritev(self, fd: int, buffers: list[Buffer], offset: int) -> int:
        self._reload()
        return super().pwritev(fd, buffers, offset)

    def fdatasync(self, fd: int) -> None:
        self._reload()
        super().fdatasync(fd)

    def start_writeback(self, fd: int, offset: int, length: int) -> bool:
        self._reload()
        return super().start_writeback(fd, offset, length)


def write_control_file(root: Path, faults: list[Fault], name: str = CONTROL_FILE_NAME) -> None:
    """Set a faulty bookie's faults (atomically: a reader never sees half a file): its
    entry logs' by default, its journal's with `name=JOURNAL_CONTROL_FILE_NAME`."""
    tmp = root / f"{name}.tmp"
    tmp.write_text(json.dumps([asdict(fault) for fault in faults]))
    os.replace(tmp, root / name)


def main(argv: list[str]) -> int:
    ledger_dir = Path(argv[argv.index("--ledger-dir") + 1])
    entry_logger.FILE_WRITES = ControlledWrites(ledger_dir.parent / CONTROL_FILE_NAME)
    journal.FILE_WRITES = ControlledWrites(ledger_dir.parent / JOURNAL_CONTROL_FILE_NAME)
    from blobstore.cli.main import main as blobstore_main

    return blobstore_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
