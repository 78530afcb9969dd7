"""Named points of the bookie's write path where a test may kill the bookie
(`blobstore/runtime/hook_points.py`: `kill`, `kill:N`, `pause:PATH`), from
`BLOBSTORE_BOOKIE_HOOKS`.

Points: `direct_writing` (the direct writer thread has taken a group of large entries
and not written it yet), `direct_written` (a group is in a direct entry log and
fdatasync'd, its journal records not yet queued: those adds were never acknowledged).
"""

from __future__ import annotations

from blobstore.runtime.hook_points import HookPoints

HOOKS_ENV = "BLOBSTORE_BOOKIE_HOOKS"
reached = HookPoints(HOOKS_ENV).reached
