"""Errors shared across the blobstore package."""

from __future__ import annotations

import os


class UsageError(Exception):
    """A user or environment mistake: the command line prints it as one line and exits 2."""


class CommandError(Exception):
    """Work a command could not do (a failure it reports, not a bug of its own): the
    command line prints it as one line and exits 1."""


def check_ready_file(path: str | os.PathLike[str] | None) -> None:
    """A --ready-file can be written: its directory exists and is writable (checked
    before a command starts anything it would then have to stop)."""
    if not path:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise UsageError(f"--ready-file {os.fspath(path)}: {directory} is not a writable directory")
