"""Named points of the bookie's write path where a test may kill the bookie.

`BLOBSTORE_BOOKIE_HOOKS` holds `point=action` pairs, comma-separated. Actions:

- `kill` / `kill:N`: SIGKILL this process the first (N-th) time it reaches the point;
- `pause:PATH`: create `PATH.reached`, then wait until `PATH` exists (at most
  `PAUSE_S_MAX`), so a test can act while the bookie stands at the point.

Points: `direct_writing` (the direct writer thread has taken a group of large entries
and not written it yet), `direct_written` (a group is in a direct entry log and
fdatasync'd, its journal records not yet queued: those adds were never acknowledged).

Unset (always, outside tests), `reached` costs a dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time
from functools import cache

HOOKS_ENV = "BLOBSTORE_BOOKIE_HOOKS"
# After its SIGKILL the process waits this long for the signal (it never returns).
KILL_WAIT_S = 60.0
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
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(KILL_WAIT_S)  # the signal is on its way
    elif action.startswith("pause:"):
        _pause(action.split(":", 1)[1])


def _pause(path: str) -> None:
    with open(f"{path}.reached", "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_S_MAX
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
