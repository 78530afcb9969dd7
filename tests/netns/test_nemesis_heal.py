"""The nemesis's heal of a disk-full cycle, on fake nodes: a bookie that stops on its
storage errors is awaited and started again, whether it exits before the heal looks,
just after, or while the cycle waits for the cluster to serve."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.netns.cluster import NodeExitedError
from tests.netns.nemesis import DISK_FULL, STOPPING_EVENT, Fault, Nemesis


@dataclass
class FakeManaged:
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        return self.log_path.read_text()


@dataclass
class FakeNode:
    name: str
    managed: FakeManaged
    running: bool = True
    starts: int = 0

    def alive(self) -> bool:
        return self.running

    def resume(self) -> None:
        pass

    def start(self) -> None:
        self.running = True
        self.starts += 1

    def wait_ready(self, timeout_s: float) -> None:
        if not self.running:
            raise NodeExitedError(f"{self.name} exited")

    def stop_after(self, delay_s: float) -> None:
        """Log the stop now and exit `delay_s` later, as a bookie does."""
        with self.managed.log_path.open("a") as log:
            log.write(f"{STOPPING_EVENT} bookie_id={self.name}\n")
        timer = threading.Timer(delay_s, lambda: setattr(self, "running", False))
        timer.start()


@dataclass
class FakeCluster:
    root: Path
    bookies: list[FakeNode] = field(default_factory=list)
    gateways: list[Any] = field(default_factory=list)

    def node(self, name: str) -> FakeNode:
        return next(node for node in self.bookies if node.name == name)

    def nodes(self) -> list[FakeNode]:
        return list(self.bookies)

    def disk(self, name: str) -> Path:
        return self.root


class FakeNetwork:
    def heal(self) -> None:
        pass


def _nemesis(tmp_path: Path) -> tuple[Nemesis, FakeNode]:
    bookie = FakeNode("bookie4", FakeManaged(tmp_path / "bookie4.log"))
    bookie.managed.log_path.write_text("bookie ready\n")
    cluster = FakeCluster(tmp_path, [bookie])
    return Nemesis(cluster, FakeNetwork(), random.Random(1)), bookie  # type: ignore[arg-type]


def test_a_bookie_still_stopping_when_the_heal_looks_is_awaited_and_started(
    tmp_path: Path,
) -> None:
    nemesis, bookie = _nemesis(tmp_path)
    bookie.stop_after(0.3)  # alive when the heal looks, gone a moment later
    nemesis.heal(Fault(DISK_FULL, ("bookie4",), 0.0), ("bookie4",), stops=0)
    assert bookie.running and bookie.starts == 1


def test_a_bookie_that_did_not_stop_is_left_running(tmp_path: Path) -> None:
    nemesis, bookie = _nemesis(tmp_path)
    nemesis.heal(Fault(DISK_FULL, ("bookie4",), 0.0), ("bookie4",), stops=0)
    assert bookie.running and bookie.starts == 0


def test_a_disk_full_target_that_exits_while_waited_on_is_started_again(
    tmp_path: Path,
) -> None:
    nemesis, bookie = _nemesis(tmp_path)
    bookie.running = False
    nemesis.wait_serving(("bookie4",))
    assert bookie.running and bookie.starts == 1
    bookie.running = False
    with pytest.raises(NodeExitedError):
        nemesis.wait_serving(())  # any other node that exits fails the cycle
