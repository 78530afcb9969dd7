"""A maintenance run is kill-safe: its driver killed with SIGKILL at seeded points of
every phase (tests/maintenance/killing.py), each kill followed by a run to its end,
never loses or changes an acknowledged object, and a last run leaves nothing due.

The kill points come from BLOBSTORE_TEST_SEED (printed; set it to replay a run). The
default run kills once in each of the 7 phases; `make soak` kills 20 times.
"""

from __future__ import annotations

import datetime
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.admin.workload import admin
from tests.maintenance.conftest import MaintenanceCluster
from tests.maintenance.killing import (
    BUCKET,
    NTH_MAX,
    POINT_PHASES,
    Acknowledged,
    KillPoint,
    choose_kill_points,
    churn,
    expired_leftovers,
    lock_holder_run,
    read_back_problems,
    rerun,
    run_killed,
    run_outcomes,
    set_lifecycle,
)
from tests.maintenance.workload import delete_heavy

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "4242"))
KILLS = len(set(POINT_PHASES.values()))  # make test: each phase once; the soak: KILLS_SOAK
KILLS_SOAK = 20
# The killed driver's lock stands until its ZooKeeper session expires: shorter than the
# default 15 s, the loop waits less after each kill.
DRIVER_SESSION_S = 8
# A kill, the wait for the killed driver's lock and a rerun take under a minute on two
# idle cores; a busy machine takes up to three.
KILL_S_MAX = 180
KILLS_TIMEOUT_S = KILLS * KILL_S_MAX
WORKLOAD_OBJECTS = 64
# Lifecycle rules are judged this far ahead, so that every tmp/ object and open upload
# of the churn is due (Days=1 rounds up to the second midnight at most).
NOW_AHEAD_S = 3 * 86400.0


@pytest.mark.parametrize("seed", [SEED, 1, 2, 3])
@pytest.mark.parametrize("count", [KILLS, KILLS_SOAK])
def test_kill_points_cover_every_phase_with_an_nth_that_is_reached(seed: int, count: int) -> None:
    kills = choose_kill_points(random.Random(seed), count)
    assert len(kills) == count
    assert {POINT_PHASES[k.point] for k in kills} == set(POINT_PHASES.values())
    assert all(1 <= k.nth <= NTH_MAX[k.point] for k in kills)
    assert len(set(kills)) == count  # fewer than every (point, N) pair: no repeats
    assert kills == choose_kill_points(random.Random(seed), count)


def test_a_kill_point_names_its_hook() -> None:
    assert KillPoint("compact_swapped", 3).hook == "compact_swapped=kill:3"
    with pytest.raises(AssertionError):
        KillPoint("compact_swapped", NTH_MAX["compact_swapped"] + 1)
    with pytest.raises(AssertionError):
        KillPoint("nowhere", 1)


@pytest.mark.timeout(KILLS_TIMEOUT_S)
def test_driver_killed_at_seeded_points_loses_nothing(
    cluster: MaintenanceCluster, zk_client: KazooClient
) -> None:
    _kill_loop(cluster, zk_client, KILLS)


@pytest.mark.soak
@pytest.mark.timeout(KILLS_SOAK * KILL_S_MAX)
def test_driver_killed_at_many_seeded_points_loses_nothing(
    cluster: MaintenanceCluster, zk_client: KazooClient
) -> None:
    _kill_loop(cluster, zk_client, KILLS_SOAK)


def _kill_loop(cluster: MaintenanceCluster, zk: KazooClient, count: int) -> None:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    rng = random.Random(SEED)
    kills = choose_kill_points(rng, count)
    print("kill points:", " ".join(k.hook for k in kills))
    cluster.start()
    s3 = cluster.s3()
    acked = Acknowledged(delete_heavy(s3, BUCKET, rng, WORKLOAD_OBJECTS))
    set_lifecycle(s3)
    now = _iso(time.time() + NOW_AHEAD_S)
    args = ("--grace", "0", "--now", now, "--zk-session-timeout", str(DRIVER_SESSION_S))
    for index, kill in enumerate(kills):
        churn(s3, acked, rng, index)
        log = cluster.root / f"maintain-{index:02d}-{kill.point}.log"
        _kill_then_rerun(cluster, zk, s3, acked, kill, args, log)
    _assert_nothing_due_left(cluster, s3, acked, args)


def _kill_then_rerun(
    cluster: MaintenanceCluster,
    zk: KazooClient,
    s3: Any,
    acked: Acknowledged,
    kill: KillPoint,
    args: tuple[str, ...],
    log: Path,
) -> None:
    ok_before = _ok_runs(zk)
    started = time.monotonic()
    status = run_killed(cluster, kill.hook, args, log)
    assert status == -signal.SIGKILL, f"{kill.hook}: the driver exited {status}, not killed"
    killed_run = lock_holder_run(zk)
    assert killed_run is not None, f"{kill.hook}: the lock went with the driver's session?"
    assert run_outcomes(zk).get(killed_run, "unsaved") != "ok", (kill.hook, killed_run)
    assert _ok_runs(zk) <= ok_before, kill.hook
    assert read_back_problems(s3, acked) == [], f"after the kill at {kill.hook}"
    killed_s = time.monotonic() - started
    report = rerun(cluster, args)
    print(
        f"{kill.hook}: killed after {killed_s:.1f} s, rerun done after "
        f"{time.monotonic() - started:.1f} s: deleted {report['ledgers_deleted']}, "
        f"condemned {report['condemned']}, swapped {report['records_swapped']}, "
        f"expired {report['versions_expired']}, aborted {report['uploads_aborted']}"
    )
    assert report["outcome"] == "ok" and not report["errors"], (kill.hook, report)
    assert expired_leftovers(s3, acked) == [], f"after the rerun of {kill.hook}"
    acked.expiring.clear()
    assert read_back_problems(s3, acked) == [], f"after the rerun of {kill.hook}"


def _assert_nothing_due_left(
    cluster: MaintenanceCluster, s3: Any, acked: Acknowledged, args: tuple[str, ...]
) -> None:
    """A last run: then no closed ledger without a reference, no reference without its
    ledger, and every object byte-identical."""
    report = rerun(cluster, args)
    assert report["outcome"] == "ok" and not report["errors"], report
    code, fsck = admin(cluster.zk, "fsck")
    assert code == 0 and fsck["healthy"], fsck
    assert fsck["summary"]["dangling_references"] == 0, fsck["dangling"]
    assert fsck["unreferenced_ledgers"] == [], (fsck["unreferenced_ledgers"], report)
    assert read_back_problems(s3, acked) == []


def _ok_runs(zk: KazooClient) -> set[str]:
    return {run_id for run_id, outcome in run_outcomes(zk).items() if outcome == "ok"}


def _iso(epoch_s: float) -> str:
    return f"{datetime.datetime.fromtimestamp(epoch_s, datetime.UTC):%Y-%m-%dT%H:%M:%SZ}"
