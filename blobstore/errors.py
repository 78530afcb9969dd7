"""Errors shared across the blobstore package."""

from __future__ import annotations


class UsageError(Exception):
    """A user or environment mistake: the command line prints it as one line and exits 2."""
