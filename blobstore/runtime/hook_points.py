"""Named points of a process where a test may kill it (or another process) or pause it,
from `point=action` pairs, comma-separated, in one environment variable:

- `kill` / `kill:N`: SIGKILL the target (this process, or the pid another variable
  names) the first (N-th) time this process reaches the point;
- `pause:PATH`: create `PATH.reached`, then wait until `PATH` exists (at most
  `PAUSE_S_MAX`), so a test can act while the process stands at the point.

Unset (always, outside tests), `reached` costs a dictionary lookup. The bookie
(`bookie/hooks.py`) and the maintenance job (`blobstore/maintenance/hooks.py`) each name
their variable and points.
"""

from __future__ import annotations

import os
import signal
import time

PAUSE_S_MAX = 120.0


class HookPoints:
    """The hooks of one variable; `target_pid_env` names the variable holding the pid a
    kill is for (this process when it is unset or not set)."""

    def __init__(self, env: str, target_pid_env: str | None = None) -> None:
        self.env = env
        self._target_pid_env = target_pid_env
        self._actions: dict[str, str] | None = None
        self._counts: dict[str, int] = {}

    def _hooks(self) -> dict[str, str]:
        if self._actions is None:
            text = os.environ.get(self.env, "")
            pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
            self._actions = {point.strip(): action.strip() for point, action in pairs}
        return self._actions

    def reached(self, point: str) -> None:
        action = self._hooks().get(point)
        if action is None:
            return
        self._counts[point] = self._counts.get(point, 0) + 1
        if action.startswith("kill"):
            nth = int(action.split(":", 1)[1]) if ":" in action else 1
            if self._counts[point] == nth:
                os.kill(self._target_pid(), signal.SIGKILL)
                time.sleep(PAUSE_S_MAX)  # the signal is on its way
        elif action.startswith("pause:"):
            _pause(action.split(":", 1)[1])

    def _target_pid(self) -> int:
        named = os.environ.get(self._target_pid_env) if self._target_pid_env else None
        return int(named) if named else os.getpid()


def _pause(path: str) -> None:
    with open(f"{path}.reached", "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_S_MAX
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
