"""What a maintenance run did: kept in ZooKeeper (`admin maintenance status` reads it),
printed, and exported the Prometheus way for batch jobs (a Pushgateway, or a text file
for node_exporter's textfile collector)."""

from __future__ import annotations

import datetime
import json
import logging
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway, write_to_textfile

from blobstore.runtime.errors import CommandError
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

MAINTENANCE_PATH = "/maintenance"
RUNS_PATH = f"{MAINTENANCE_PATH}/runs"
LOCK_PATH = f"{MAINTENANCE_PATH}/lock"
RUNS_KEPT = 50


def new_run_id(now: float) -> str:
    moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


@dataclass(slots=True)
class Report:
    run_id: str
    started: float
    dry_run: bool
    phases: list[str]
    finished: float = 0.0
    outcome: str = "running"  # running | ok | failed
    records_scanned: int = 0
    tasks: int = 0
    ledgers: int = 0
    ledger_bytes: int = 0
    live_bytes: int = 0
    condemned: int = 0
    absolved: int = 0
    ledgers_deleted: int = 0
    bytes_reclaimed: int = 0  # payload bytes of deleted ledgers
    disk_bytes_reclaimed: int = 0  # times each ledger's write quorum
    bookie_bytes_freed: int = 0  # what the bookies' GC passes reported freeing
    compacted_ledgers: int = 0
    compaction_bytes_copied: int = 0
    records_swapped: int = 0
    swaps_skipped: int = 0
    compactions_deferred: int = 0  # no writable bookies to copy into: a later run
    versions_expired: int = 0
    delete_markers_added: int = 0
    uploads_aborted: int = 0
    actions_skipped: int = 0
    versions_skipped_locked: int = 0  # expirations Object Lock refused (in actions_skipped too)
    orphans_recovered: int = 0  # OPEN ledgers of gone writers, closed by this run
    objects_tiered: int = 0  # versions moved to a cold tier
    tier_bytes_written: int = 0  # bytes of the segments written (and verified)
    segments_written: int = 0
    segments_removed: int = 0  # segments no record named (orphans, dead): deleted
    segments_rewritten: int = 0  # sparse segments whose live versions were moved
    objects_rewritten: int = 0  # tiered versions moved to a new segment of their tier
    restores_expired: int = 0  # restored copies of tiered versions dropped, their days over
    tier_bytes_freed: int = 0  # bytes of the segments removed
    transitions_skipped: int = 0  # changed since the scan, or no tier for the class
    waiting: int = 0  # condemned, waiting for the grace period or a later look
    scans: int = 0
    errors: list[str] = field(default_factory=list)
    would: dict[str, int] = field(default_factory=dict)  # a dry run's counts

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.finished or time.time()) - self.started)


# ------------------------------------------------------------------ ZooKeeper


class LockHeldError(Exception):
    def __init__(self, holder: dict[str, Any]) -> None:
        since = holder.get("started", 0.0)
        super().__init__(
            f"another maintenance run is in progress (host {holder.get('host', '?')}, "
            f"pid {holder.get('pid', '?')}, since "
            f"{datetime.datetime.fromtimestamp(since, datetime.UTC):%Y-%m-%d %H:%M:%SZ})"
        )


async def take_lock(zk: ZooKeeperClient, run_id: str) -> None:
    """The cluster's one maintenance run: an ephemeral znode, gone with the session of a
    killed driver."""
    await zk.ensure_path(MAINTENANCE_PATH)
    value = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
    value["run_id"] = run_id
    try:
        await zk.create(LOCK_PATH, json.dumps(value).encode(), ephemeral=True)
    except NodeExistsError:
        try:
            holder = json.loads((await zk.get(LOCK_PATH)).value)
        except NoNodeError:
            holder = {}
        raise LockHeldError(holder) from None


class LockLostError(CommandError):
    """The run's lock went with its ZooKeeper session (expired: the driver paused or cut
    off longer than --zk-session-timeout); another run may hold it now."""


async def _lock_holder(zk: ZooKeeperClient) -> tuple[dict[str, Any], int]:
    try:
        versioned = await zk.get(LOCK_PATH)
    except NoNodeError:
        return {}, -1
    return json.loads(versioned.value), versioned.version


async def check_lock(zk: ZooKeeperClient, run_id: str, before: str) -> None:
    """Raise LockLostError unless `run_id` still holds the lock: checked before each
    phase that changes the cluster, so that a run whose session expired stops there."""
    holder, _version = await _lock_holder(zk)
    if holder.get("run_id") != run_id:
        raise LockLostError(
            f"the maintenance lock was lost (the ZooKeeper session expired?): stopped before "
            f"{before}; the next run takes the work up"
        )


async def release_lock(zk: ZooKeeperClient, run_id: str) -> None:
    """Delete the lock if this run still holds it (after an expired session it may be
    another run's); a session already lost took its ephemeral lock with it (and must
    not hide the error that ends the run)."""
    try:
        holder, version = await _lock_holder(zk)
        if holder.get("run_id") == run_id:
            await zk.delete(LOCK_PATH, version)
    except (NoNodeError, BadVersionError):
        pass
    except KazooException as e:
        logger.warning("event=lock_release_failed error=%r (it goes with the session)", e)


async def save(zk: ZooKeeperClient, report: Report) -> None:
    """Store the report (written again as the run goes on) and drop the oldest beyond
    RUNS_KEPT."""
    await zk.ensure_path(RUNS_PATH)
    path = f"{RUNS_PATH}/{report.run_id}"
    data = json.dumps(report.to_json(), sort_keys=True).encode()
    try:
        await zk.set(path, data)
    except NoNodeError:
        await zk.create(path, data)
    runs = sorted(await zk.get_children(RUNS_PATH))
    for old in runs[: max(0, len(runs) - RUNS_KEPT)]:
        try:
            await zk.delete(f"{RUNS_PATH}/{old}")
        except NoNodeError:
            pass


async def load_runs(zk: ZooKeeperClient, limit: int) -> list[dict[str, Any]]:
    """The latest `limit` reports, newest first."""
    try:
        runs = sorted(await zk.get_children(RUNS_PATH), reverse=True)[:limit]
    except NoNodeError:
        return []
    found = []
    for run_id in runs:
        try:
            found.append(json.loads((await zk.get(f"{RUNS_PATH}/{run_id}")).value))
        except NoNodeError:
            continue
    return found


# ------------------------------------------------------------------ Prometheus

GAUGES = {
    "records_scanned": "Catalog records the last run scanned",
    "ledgers_deleted": "Ledgers the last run deleted",
    "bytes_reclaimed": "Payload bytes of the ledgers the last run deleted",
    "disk_bytes_reclaimed": "Bytes on bookies (payload x write quorum) the last run deleted",
    "compaction_bytes_copied": "Bytes the last run's compaction copied",
    "records_swapped": "Records the last run's compaction moved to new ledgers",
    "versions_expired": "Versions the last run's lifecycle rules removed",
    "objects_tiered": "Versions the last run moved to a cold tier",
    "tier_bytes_written": "Bytes of the segments the last run wrote to cold tiers",
    "tier_bytes_freed": "Bytes of the segments the last run removed from cold tiers",
    "uploads_aborted": "Multipart uploads the last run's lifecycle rules aborted",
    "versions_skipped_locked": "Versions the last run's lifecycle rules kept: Object Lock",
    "condemned": "Ledgers the last run condemned",
    "duration_s": "Duration of the last run in seconds",
}


LAST_SUCCESS = "blobstore_maintenance_last_success_time_seconds"


def previous_success(text: str) -> float | None:
    """The last-success time an earlier export wrote in a text file, if any."""
    for line in text.splitlines():
        if line.startswith(LAST_SUCCESS + " "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def registry_of(report: Report, last_success: float | None = None) -> CollectorRegistry:
    """The run's gauges. The last success is this run's end when it succeeded, else the
    one given (kept from before), else absent: an alert on its age keeps counting from
    the last good run, not from a failed one."""
    registry = CollectorRegistry()
    for name, help_text in GAUGES.items():
        Gauge(f"blobstore_maintenance_{name}", help_text, registry=registry).set(
            float(getattr(report, name))
        )
    Gauge("blobstore_maintenance_errors", "Errors of the last run", registry=registry).set(
        len(report.errors)
    )
    succeeded = report.finished if report.outcome == "ok" else last_success
    if succeeded is not None:
        Gauge(LAST_SUCCESS, "When the last successful run finished", registry=registry).set(
            succeeded
        )
    return registry


def export(report: Report, pushgateway: str, metrics_file: str) -> None:
    if metrics_file:
        try:
            with open(metrics_file) as f:
                kept = previous_success(f.read())
        except FileNotFoundError:
            kept = None
        write_to_textfile(metrics_file, registry_of(report, kept))
    if pushgateway:
        # pushadd: a failed run's push leaves the gateway's last-success value alone.
        pushadd_to_gateway(pushgateway, job="blobstore_maintain", registry=registry_of(report))
