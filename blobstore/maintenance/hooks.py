"""Named points of a maintenance run where a test may pause it or kill its driver.

`BLOBSTORE_MAINTENANCE_HOOKS` holds `point=action` pairs, comma-separated:

- `kill` / `kill:N`: at the first (N-th) time this process reaches the point, SIGKILL
  the driver (`BLOBSTORE_MAINTENANCE_DRIVER_PID`, set by the driver for its executors;
  this process when unset);
- `pause:PATH`: create `PATH.reached`, then wait until `PATH` exists (at most
  `PAUSE_S_MAX`), so a test can act while the run stands at the point.

Unset (always, outside tests), `reached` costs a dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time
from functools import cache

HOOKS_ENV = "BLOBSTORE_MAINTENANCE_HOOKS"
DRIVER_PID_ENV = "BLOBSTORE_MAINTENANCE_DRIVER_PID"
PAUSE_S_MAX = 120.0
_counts: dict[str, int] = {}


@cache
def _hooks() -> dict[str, str]:
    text = os.environ.get(HOOKS_ENV, "")
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {point.strip(): action.strip() for point, action in pairs}


def reached(point: str) -> None:
    action = _hooks().get(point)
    if action is None:
        return
    _counts[point] = _counts.get(point, 0) + 1
    if action.startswith("kill"):
        nth = int(action.split(":", 1)[1]) if ":" in action else 1
        if _counts[point] == nth:
            os.kill(int(os.environ.get(DRIVER_PID_ENV, os.getpid())), signal.SIGKILL)
            time.sleep(PAUSE_S_MAX)  # the signal is on its way
    elif action.startswith("pause:"):
        _pause(action.split(":", 1)[1])


def _pause(path: str) -> None:
    with open(f"{path}.reached", "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_S_MAX
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
