"""Restarting the children of `blobstore standalone` when they die.

A child (ZooKeeper, a bookie, the gateway) that exits on its own is started again after
a backoff: `RestartPolicy.backoff_s_min` after its first exit, doubling with each exit
within `window_s`, at most `backoff_s_max`. A child that exits more than
`restarts_max` times within `window_s` is given up on, and the supervisor stops the
whole cluster (a crash loop is a fault to look at, not to hide). Each exit, restart and
return to service is one line on the console; the child's own log gets a marker line
before each restart.

The decision (`restart_delay_s`) is apart from the process handling (`Supervisor.poll`),
which never blocks longer than a child's `restart()` does (ZooKeeper's waits for it to
serve; a bookie's and the gateway's return at once and their readiness is polled).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    backoff_s_min: float = 1.0
    backoff_s_max: float = 30.0
    restarts_max: int = 5
    window_s: float = 300.0

    def __post_init__(self) -> None:
        assert 0 < self.backoff_s_min <= self.backoff_s_max, (
            self.backoff_s_min,
            self.backoff_s_max,
        )
        assert self.restarts_max >= 1, self.restarts_max
        assert self.window_s >= self.backoff_s_max, (self.window_s, self.backoff_s_max)


def restart_delay_s(policy: RestartPolicy, exits_in_window: int) -> float | None:
    """Seconds to wait before restarting a child that has exited `exits_in_window` times
    within the policy's window (this exit included); None: give up on it."""
    assert exits_in_window >= 1, exits_in_window
    if exits_in_window > policy.restarts_max:
        return None
    return min(policy.backoff_s_max, policy.backoff_s_min * (1 << (exits_in_window - 1)))


class SupervisedProcess(Protocol):
    """What the supervisor needs of a child."""

    @property
    def name(self) -> str: ...

    @property
    def log_path(self) -> Path: ...

    def alive(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def last_error_line(self) -> str: ...

    def restart(self) -> None:
        """Start it again (returns once started; ZooKeeper's once it serves)."""

    def ready(self) -> bool:
        """Whether a restarted child serves again."""


@dataclass
class _Watch:
    process: SupervisedProcess
    exits: list[float] = field(default_factory=list)  # monotonic times within the window
    restart_at: float | None = None
    awaiting_ready: bool = False
    restarts: int = 0


def _say(line: str, *, error: bool = False) -> None:
    print(line, file=sys.stderr if error else sys.stdout, flush=True)


class Supervisor:
    """Polled by the standalone's main loop: restarts children that exited."""

    def __init__(
        self,
        processes: list[SupervisedProcess],
        policy: RestartPolicy = RestartPolicy(),
        clock: Callable[[], float] = time.monotonic,
        say: Callable[..., None] = _say,
    ) -> None:
        self.policy = policy
        self._watches = [_Watch(process) for process in processes]
        self._clock = clock
        self._say = say

    def poll(self) -> str | None:
        """One look at every child; None while the cluster goes on, else why it must
        stop (a child given up on)."""
        for watch in self._watches:
            reason = self._poll_one(watch, self._clock())
            if reason is not None:
                return reason
        return None

    def _poll_one(self, watch: _Watch, now: float) -> str | None:
        process = watch.process
        if watch.restart_at is not None:
            if now >= watch.restart_at:
                watch.restart_at = None
                watch.restarts += 1
                self._say(f"{process.name}: restarting (restart {watch.restarts})")
                process.restart()
                watch.awaiting_ready = True
            return None
        if process.alive():
            if watch.awaiting_ready and process.ready():
                watch.awaiting_ready = False
                self._say(f"{process.name}: serving again after restart {watch.restarts}")
            return None
        watch.awaiting_ready = False
        watch.exits = [t for t in watch.exits if now - t < self.policy.window_s] + [now]
        delay_s = restart_delay_s(self.policy, len(watch.exits))
        exited = (
            f"{process.name} exited with code {process.exit_code()}: "
            f"{process.last_error_line()} (log: {process.log_path})"
        )
        if delay_s is None:
            return (
                f"{exited}; it exited {len(watch.exits)} times within "
                f"{self.policy.window_s:.0f}s: not restarted again"
            )
        self._say(f"blobstore: warning: {exited}; restarting in {delay_s:g}s", error=True)
        watch.restart_at = now + delay_s
        return None
