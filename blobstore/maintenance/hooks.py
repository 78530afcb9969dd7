"""Named points of a maintenance run where a test may pause it or kill its driver.

`BLOBSTORE_MAINTENANCE_HOOKS` holds `point=action` pairs, comma-separated:

- `kill` / `kill:N`: at the first (N-th) time this process reaches the point, SIGKILL
  the driver (`BLOBSTORE_MAINTENANCE_DRIVER_PID`, set by the driver for its executors;
  this process when unset);
- `pause:PATH`: create `PATH.reached`, then wait until `PATH` exists, so a test can act
  while the run stands at the point (`blobstore/runtime/hook_points.py`).
"""

from __future__ import annotations

from blobstore.runtime.hook_points import HookPoints

HOOKS_ENV = "BLOBSTORE_MAINTENANCE_HOOKS"
DRIVER_PID_ENV = "BLOBSTORE_MAINTENANCE_DRIVER_PID"
reached = HookPoints(HOOKS_ENV, DRIVER_PID_ENV).reached
