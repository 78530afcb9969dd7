"""Small files holding secrets (the cluster key, the ZooKeeper credential, TLS keys):
read with a bound, written once and never replaced."""

from __future__ import annotations

import os

from blobstore.runtime.errors import UsageError


def read_small_file(path: str | os.PathLike[str], bytes_max: int, source: str) -> bytes:
    """The bytes of a file of at most `bytes_max`; UsageError naming `source` (never the
    content) when it is missing, unreadable or longer."""
    try:
        with open(path, "rb") as f:
            raw = f.read(bytes_max + 1)
    except OSError as e:
        raise UsageError(f"{source}: {e.strerror or e}") from None
    if len(raw) > bytes_max:
        raise UsageError(f"{source}: longer than {bytes_max} bytes")
    return raw


def write_new_file(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """Create `path` holding `data` (`mode`, fsync'd with its directory); FileExistsError
    when it exists: a secret is never replaced by accident."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
