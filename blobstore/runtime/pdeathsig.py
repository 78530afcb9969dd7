"""Linux's parent-death signal: a child asks the kernel for a signal when its parent
dies, even by kill -9, so supervised processes never outlive their supervisor."""

from __future__ import annotations

import ctypes
import os

PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int, parent_pid: int | None = None) -> bool:
    """Ask for `signum` when the parent dies; False where prctl is unavailable. With
    `parent_pid`, a parent already gone (before the request took effect) sends the
    signal now."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signum)
    except OSError:
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)
    return True
