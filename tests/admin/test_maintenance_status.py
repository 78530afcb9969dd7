"""`blobstore admin maintenance status`: the reports `blobstore maintain` saves in a real
ZooKeeper, newest first, and the run holding the maintenance lock."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from blobstore.admin.maintenance import duration_text, run_state
from blobstore.maintenance import report
from blobstore.maintenance.report import Report
from blobstore.runtime.zk import started_client

ADMIN_TIMEOUT_S = 60.0
ZK_TIMEOUT_S = 15.0
# 2026-11-20 10:00:00 UTC, and runs an hour apart.
T0 = 1_795_168_800.0
HOUR_S = 3600.0


def _admin(zk: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", zk, "maintenance", *args],
        capture_output=True,
        text=True,
        timeout=ADMIN_TIMEOUT_S,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _status_json(zk: str, *args: str) -> dict[str, Any]:
    done = _admin(zk, "status", "--json", *args)
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def _report(started: float, outcome: str, **counts: Any) -> Report:
    finished = started + counts.pop("duration_s", 0.0) if outcome != "running" else 0.0
    return Report(
        run_id=report.new_run_id(started),
        started=started,
        dry_run=False,
        phases=["gc", "compact", "lifecycle"],
        finished=finished,
        outcome=outcome,
        **counts,
    )


OK_RUN = _report(
    T0,
    "ok",
    duration_s=42.0,
    records_scanned=1234,
    ledgers_deleted=3,
    disk_bytes_reclaimed=6 << 20,
    compacted_ledgers=1,
    compaction_bytes_copied=512 << 10,
    versions_expired=2,
    uploads_aborted=1,
)
KILLED_RUN = _report(T0 + HOUR_S, "running", records_scanned=99)  # saved mid-run, never ended
FAILED_RUN = _report(
    T0 + 2 * HOUR_S,
    "failed",
    duration_s=3725.0,
    errors=["NotEnoughBookiesError: 1 writable bookie, 2 needed", "compaction of ledger 17"],
)
RUNNING_RUN = _report(T0 + 3 * HOUR_S, "running")


def test_status_shows_saved_runs_newest_first_and_the_run_holding_the_lock(
    zk_connect: str,
) -> None:
    asyncio.run(_scenario(zk_connect))


async def _scenario(zk_connect: str) -> None:
    empty = await asyncio.to_thread(_status_json, zk_connect)
    assert empty == {"running": None, "runs": []}
    shown = await asyncio.to_thread(_admin, zk_connect, "status")
    assert shown.returncode == 0 and "no maintenance run saved yet" in shown.stdout, shown

    zk = await started_client(zk_connect, ZK_TIMEOUT_S)
    try:
        for saved in (OK_RUN, KILLED_RUN, FAILED_RUN, RUNNING_RUN):
            await report.save(zk, saved)
        await report.take_lock(zk, RUNNING_RUN.run_id)  # held while the commands below run
        await _check_json(zk_connect)
        await _check_table(zk_connect)
        await report.release_lock(zk, RUNNING_RUN.run_id)
        after = await asyncio.to_thread(_status_json, zk_connect, "--limit", "1")
        assert after["running"] is None
        assert [r["state"] for r in after["runs"]] == ["interrupted"]  # its driver is gone
    finally:
        await zk.stop()


async def _check_json(zk_connect: str) -> None:
    document = await asyncio.to_thread(_status_json, zk_connect)
    runs = document["runs"]
    assert [r["run_id"] for r in runs] == [
        r.run_id for r in (RUNNING_RUN, FAILED_RUN, KILLED_RUN, OK_RUN)
    ]
    assert [r["state"] for r in runs] == ["running", "failed", "interrupted", "ok"]
    assert runs[3] == {**OK_RUN.to_json(), "state": "ok"}  # the report as saved
    running = document["running"]
    assert running["run_id"] == RUNNING_RUN.run_id and running["host"] and running["pid"]
    limited = await asyncio.to_thread(_status_json, zk_connect, "--limit", "2")
    assert [r["run_id"] for r in limited["runs"]] == [RUNNING_RUN.run_id, FAILED_RUN.run_id]


async def _check_table(zk_connect: str) -> None:
    shown = await asyncio.to_thread(_admin, zk_connect, "status")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"running now: run {RUNNING_RUN.run_id}" in out, out
    rows = {cells[0]: cells[1:] for cells in _table_rows(out)}
    assert rows["2026-11-20 10:00:00Z"] == [
        "ok", "42.0 s", "1,234", "3", "6.0 MiB", "1", "512.0 KiB", "2", "1", "0"
    ]  # fmt: skip
    assert rows["2026-11-20 11:00:00Z"][:3] == ["interrupted", "", "99"]
    assert rows["2026-11-20 12:00:00Z"][:2] == ["failed", "1 h 02 min"]
    assert rows["2026-11-20 12:00:00Z"][-1] == "2"
    assert rows["2026-11-20 13:00:00Z"][0] == "running"
    # The errors of the latest run that ended (the running one has none yet).
    assert f"errors of the latest run that ended ({FAILED_RUN.run_id})" in out, out
    for error in FAILED_RUN.errors:
        assert error in out, out


def _table_rows(out: str) -> list[list[str]]:
    """The cells of each body row of a rich table."""
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    ]


def test_a_limit_below_one_is_one_line_and_exit_2(zk_connect: str) -> None:
    done = _admin(zk_connect, "status", "--limit", "0")
    assert done.returncode == 2, done
    assert done.stderr.strip() == "blobstore: error: --limit 0: must be at least 1", done.stderr


@pytest.mark.parametrize(
    ("outcome", "run_id", "holder", "state"),
    [
        ("ok", "r1", None, "ok"),
        ("failed", "r1", {"run_id": "r1"}, "failed"),
        ("running", "r1", {"run_id": "r1"}, "running"),
        ("running", "r1", {"run_id": "r2"}, "interrupted"),  # another run holds the lock
        ("running", "r1", None, "interrupted"),  # its driver died with the lock
    ],
)
def test_a_run_saved_as_running_runs_only_while_it_holds_the_lock(
    outcome: str, run_id: str, holder: dict[str, Any] | None, state: str
) -> None:
    assert run_state({"outcome": outcome, "run_id": run_id}, holder) == state


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0.0 s"), (59.94, "59.9 s"), (60.0, "1 min 00 s"), (3599.0, "59 min 59 s"),
     (3600.0, "1 h 00 min"), (90061.0, "25 h 01 min")],
)  # fmt: skip
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text
