"""The scratch directory of a maintenance driver: where its Spark writes to local disk
(block manager and shuffle files, the cache's spills, the `spark-*` directories of files
and Python workers), where its JVM unpacks native libraries and keeps its temporary
files, and Hadoop's `hadoop.tmp.dir`; never the machine's temporary directory.

On disk, under the scratch root (`--scratch-dir` or `BLOBSTORE_MAINTENANCE_SCRATCH_DIR`,
by default `<tempdir>/blobstore-spark-<uid>`; a directory of the driver's user, 0700):

    run-<UTC start>-<driver pid>-<random>/   one per driver run (`open_run`)
        lock                                 flock'ed (exclusive) by the driver for its life
        blockmgr-*/ spark-*/ liblz4-java-*   Spark's and its JVM's
        hadoop/                              hadoop.tmp.dir

Faults: a driver killed with -9 runs no cleanup (nor does its JVM, killed with it), so
its directory stays behind. The next driver on the machine removes it: at its start it
sweeps the root, and a run directory whose lock it can take belongs to a dead driver
(the kernel drops a dead process's flocks), while a live driver's lock refuses; so
drivers of several clusters may share one root. A driver locks its lock file before the
file takes its name (`lock.new`, then renamed), so a sweeper never finds a `lock` that a
live driver does not hold. A run directory without `lock` is being made (for
microseconds) or was made by a driver killed meanwhile: it goes once older than
MAKING_S_MAX.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from blobstore.runtime.errors import UsageError

logger = logging.getLogger(__name__)

SCRATCH_DIR_ENV = "BLOBSTORE_MAINTENANCE_SCRATCH_DIR"
RUN_PREFIX = "run-"
LOCK_NAME = "lock"
LOCK_STAGED_NAME = "lock.new"
# A run directory without its lock yet: its driver made it and locks it at once.
MAKING_S_MAX = 60.0
SWEEP_DIRS_MAX = 10_000  # run directories one sweep looks at


class RunScratch:
    """A driver run's directory, locked until `remove`."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self.lock_fd = lock_fd

    def remove(self) -> None:
        """Remove the directory, then let go of its lock (a sweeper meanwhile sees the
        lock held, or no lock file in a directory being removed)."""
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self.lock_fd)


def scratch_root(configured: str = "") -> Path:
    """Where drivers keep their run directories: `configured` (`--scratch-dir`), else
    BLOBSTORE_MAINTENANCE_SCRATCH_DIR, else a directory of this user's in the machine's
    temporary directory."""
    configured = configured or os.environ.get(SCRATCH_DIR_ENV, "")
    if configured:
        return Path(configured).absolute()
    return Path(tempfile.gettempdir()) / f"blobstore-spark-{os.getuid()}"


def open_run(root: Path, now: float) -> RunScratch:
    """Sweep `root` of dead drivers' directories, then make and lock this run's."""
    _make_root(root)
    removed = sweep(root, now)
    if removed:
        logger.info("event=scratch_swept root=%s run_dirs=%d", root, len(removed))
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    path = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{started}-{os.getpid()}-", dir=root))
    return RunScratch(path, _lock(path))


def sweep(root: Path, now: float) -> list[Path]:
    """Remove the run directories under `root` of drivers that are gone (their lock is
    free, or they never took one and are older than MAKING_S_MAX); returns them."""
    removed: list[Path] = []
    for run_dir in _run_dirs(root):
        try:
            if _remove_if_dead(run_dir, now):
                removed.append(run_dir)
        except OSError as e:  # another user's, or a disk error: the run goes on
            logger.warning("event=scratch_sweep_failed run_dir=%s error=%r", run_dir, e)
    return removed


def _make_root(root: Path) -> None:
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = root.lstat()
    except OSError as e:
        raise UsageError(
            f"bad --scratch-dir ({SCRATCH_DIR_ENV}) {str(root)!r}: {e.strerror}"
        ) from None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise UsageError(
            f"bad --scratch-dir ({SCRATCH_DIR_ENV}) {str(root)!r}: not a directory owned by uid "
            f"{os.getuid()} (a symbolic link is refused)"
        )


def _run_dirs(root: Path) -> list[Path]:
    found: list[Path] = []
    with os.scandir(root) as entries:
        for entry in entries:
            if len(found) == SWEEP_DIRS_MAX:
                break
            if entry.name.startswith(RUN_PREFIX) and entry.is_dir(follow_symlinks=False):
                found.append(Path(entry.path))
    return found


def _remove_if_dead(run_dir: Path, now: float) -> bool:
    try:
        fd = os.open(run_dir / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return _remove_if_stale(run_dir, now)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False  # a live driver's
    try:
        shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        os.close(fd)
    return True


def _remove_if_stale(run_dir: Path, now: float) -> bool:
    """A run directory without its lock: being made, or its driver died making it."""
    try:
        age_s = now - run_dir.lstat().st_mtime
    except FileNotFoundError:
        return False  # removed meanwhile, by its driver or another sweeper
    if age_s <= MAKING_S_MAX:
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


def _lock(run_dir: Path) -> int:
    """Lock the run's lock file, then give it its name: a `lock` is always held."""
    staged = run_dir / LOCK_STAGED_NAME
    fd = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(staged, run_dir / LOCK_NAME)
    except BaseException:
        os.close(fd)
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return fd
