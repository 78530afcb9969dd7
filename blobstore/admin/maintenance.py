"""The maintenance job's last runs, as saved in ZooKeeper, and the run going on now.

blobstore admin --zk Z maintenance status [--limit N]   # table; errors of the last run below
blobstore admin --zk Z maintenance status --json        # {"running": ..., "runs": [...]}

A run's state is its saved outcome, `ok` or `failed`, or, for a report still saying
`running`: `running` when the maintenance lock (/maintenance/lock) names its run id, and
`interrupted` when it does not (its driver was killed; the next run takes up its work).
The JSON gives the reports as saved, newest first, each with its `state` added, and
`running`: the lock's holder (host, pid, started, run_id), or null when no run holds it.
Below the table come the errors of the latest run that ended (not the one running now).
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from typing import Any

from kazoo.exceptions import NoNodeError

from blobstore.admin._output import (
    Output,
    add_common_arguments,
    admin_session,
    human_bytes,
    run_async,
)
from blobstore.maintenance import report
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient

LIMIT_DEFAULT = 10
COLUMNS = [
    "started (UTC)",
    "state",
    "duration",
    "records scanned",
    "ledgers deleted",
    "reclaimed (disk)",
    "compacted ledgers",
    "bytes copied",
    "versions expired",
    "uploads aborted",
    "errors",
]
RIGHT_ALIGNED = COLUMNS[2:]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "action", nargs="?", choices=["status"], default="status", help="status (the default)"
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=LIMIT_DEFAULT,
        metavar="N",
        help=f"how many of the latest runs (default {LIMIT_DEFAULT}; at most "
        f"{report.RUNS_KEPT} are kept)",
    )


async def lock_holder(zk: ZooKeeperClient) -> dict[str, Any] | None:
    """What the maintenance lock says of the run holding it; None when no run does."""
    try:
        raw = (await zk.get(report.LOCK_PATH)).value
    except NoNodeError:
        return None
    try:
        holder = json.loads(raw)
    except ValueError:
        holder = None
    return holder if isinstance(holder, dict) else {"error": "unreadable lock"}


def run_state(run: dict[str, Any], holder: dict[str, Any] | None) -> str:
    """ok, failed, running (it holds the lock) or interrupted (saved as running, and no
    longer holding the lock)."""
    outcome = str(run.get("outcome", "?"))
    if outcome != "running":
        return outcome
    if holder is not None and holder.get("run_id") == run.get("run_id"):
        return "running"
    return "interrupted"


def utc_text(timestamp: float) -> str:
    return f"{datetime.datetime.fromtimestamp(timestamp, datetime.UTC):%Y-%m-%d %H:%M:%SZ}"


def duration_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _duration(run: dict[str, Any], state: str, now: float) -> str:
    started = float(run.get("started", 0.0))
    if state == "running":
        return duration_text(max(0.0, now - started))
    if state == "interrupted":
        return ""  # the driver died at an unknown time
    return duration_text(max(0.0, float(run.get("finished", started)) - started))


def run_row(run: dict[str, Any], holder: dict[str, Any] | None, now: float) -> list[str]:
    """One table row of a saved report."""
    state = run_state(run, holder)

    def count(name: str) -> str:
        return f"{int(run.get(name, 0)):,}"

    def size(name: str) -> str:
        return human_bytes(int(run.get(name, 0)))

    return [
        utc_text(float(run.get("started", 0.0))),
        state,
        _duration(run, state, now),
        count("records_scanned"),
        count("ledgers_deleted"),
        size("disk_bytes_reclaimed"),
        count("compacted_ledgers"),
        size("compaction_bytes_copied"),
        count("versions_expired"),
        count("uploads_aborted"),
        f"{len(run.get('errors', [])):,}",
    ]


def holder_text(holder: dict[str, Any], now: float) -> str:
    """The line naming the run that holds the lock now."""
    if "error" in holder:
        return f"a maintenance run holds the lock ({holder['error']})"
    started = float(holder.get("started", now))
    return (
        f"running now: run {holder.get('run_id', '?')} on {holder.get('host', '?')} "
        f"(pid {holder.get('pid', '?')}), since {utc_text(started)} "
        f"({duration_text(max(0.0, now - started))})"
    )


async def _status(zk_hosts: str, limit: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    async with admin_session(zk_hosts) as zk:
        holder = await lock_holder(zk)
        return holder, await report.load_runs(zk, limit)


def run(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError(f"--limit {args.limit}: must be at least 1")
    output = Output(bool(args.json))
    holder, runs = run_async(lambda: _status(args.zk, args.limit))
    if output.json_mode:
        states = [{**r, "state": run_state(r, holder)} for r in runs]
        output.emit_json({"running": holder, "runs": states})
        return 0
    now = time.time()
    output.note(holder_text(holder, now) if holder is not None else "no maintenance run now")
    if not runs:
        output.note("no maintenance run saved yet (`blobstore maintain` saves each run)")
        return 0
    output.table(
        f"last {len(runs)} maintenance run(s), newest first",
        COLUMNS,
        [run_row(r, holder, now) for r in runs],
        right_align=RIGHT_ALIGNED,
    )
    latest = next((r for r in runs if run_state(r, holder) != "running"), None)
    if latest is not None and latest.get("errors"):
        output.note(f"errors of the latest run that ended ({latest.get('run_id', '?')}):")
        for error in latest["errors"]:
            output.note(f"  {error}")
    return 0
