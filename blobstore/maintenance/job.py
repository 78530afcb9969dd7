"""The maintenance run, as the driver conducts it (docs/maintenance.md).

1. Take the cluster's maintenance lock; make condemnations a killed run left pending
   take effect (bump the condemned set's generation).
2. Scan (Spark): extents, lifecycle actions, ledger metadata; join into per-ledger
   live bytes.
3. GC: delete the condemned ledgers this scan covers, found unreferenced again and past
   the grace period; absolve the condemned ones found referenced; condemn the
   unreferenced ones.
4. Lifecycle (Spark): carry out the actions, each conditional on the version judged.
5. Compaction (Spark): copy the live extents of sparse ledgers, swap the records.
5b. Tiering (Spark, blobstore/maintenance/tiering.py): remove the segments no record
   names; pack the versions due for a tier into segments, write, verify, swap.
6. Condemn the ledgers whose every holder this run released (deleted or moved).
7. With no grace period, look again (a second scan) and delete what step 6 condemned.
8. Ask the bookies for a GC pass; save the report.

Every step is safe to cut short by a kill -9 and to run again: condemnations,
deletions, swaps and lifecycle actions are each one conditional ZooKeeper write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from kazoo.exceptions import NoNodeError

from blobstore.catalog import Catalog
from blobstore.catalog.condemned import CondemnedLedgers
from blobstore.catalog.config import CatalogConfig
from blobstore.ledger import LedgerClient
from blobstore.ledger.errors import LedgerError
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.maintenance import (
    execute,
    gc,
    hooks,
    lifecycle,
    plan,
    report,
    scan,
    spark,
    tiering,
)
from blobstore.maintenance.options import MaintainOptions
from blobstore.recovery.sweeper import GATEWAYS_PATH, gateway_path
from blobstore.runtime.errors import CommandError, UsageError
from blobstore.runtime.sealing import load_cluster_key
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.tier.fs import TierFiles, TierUnavailableError
from blobstore.tier.tiers import TierSpec, TierStore, resolve_storage_class
from blobstore.wire import zk_layout

logger = logging.getLogger(__name__)

ZK_CONNECT_TIMEOUT_S = 15.0
BOOKIE_COMPACT_THRESHOLD = 0.95
# Phase, then (done, total) units of its work: what a progress display shows.
ProgressCallback = Callable[[str, int, int], None]


def _no_progress(_phase: str, _done: int, _total: int) -> None:
    pass


@dataclass(slots=True)
class ScanResult:
    stats: dict[int, plan.LedgerStat]
    referenced: frozenset[int]
    missing: list[int]  # referenced ledgers without metadata
    unresolved: int
    frames: spark.ScanFrames
    covered_zxid: int
    records: int = 0

    @property
    def extents(self) -> Any:
        return self.frames.extents

    @property
    def actions(self) -> Any:
        return self.frames.actions


@dataclass(slots=True)
class Run:
    options: MaintainOptions
    zk: ZooKeeperClient
    catalog: Catalog
    session: Any  # SparkSession
    report: report.Report
    progress: ProgressCallback
    now: float
    released: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    condemned_this_run: set[int] = field(default_factory=set)

    @property
    def condemned(self) -> CondemnedLedgers:
        return self.catalog.index.condemned

    @property
    def scan_session(self) -> scan.Session:
        return scan.Session(self.options.zk, self.options.catalog_root, self.now)

    async def spark(self, phase: str, work: Callable[[], Any]) -> Any:
        """Run blocking Spark work off the loop (the ZooKeeper session keeps beating),
        reporting its tasks' progress."""

        seen = [0]

        def report(done: int, total: int) -> None:
            seen[0] = max(seen[0], total)
            self.progress(phase, done, total)

        def tracked() -> Any:
            with spark.StageProgress(self.session, report):
                return work()

        try:
            result = await asyncio.to_thread(tracked)
        except Exception as e:
            if spark.is_spark_failure(e):  # one line for the user; the rest in the log
                logger.error("event=spark_failed phase=%s", phase, exc_info=e)
                raise CommandError(f"Spark failed in the {phase} phase: {spark.cause_of(e)}") from e
            raise
        self.progress(phase, seen[0] or 1, seen[0] or 1)  # done
        return result


def run(options: MaintainOptions, progress: ProgressCallback = _no_progress) -> report.Report:
    """One maintenance run (raises UsageError for what the user can fix)."""
    return asyncio.run(_run(options, progress))


async def _run(options: MaintainOptions, progress: ProgressCallback) -> report.Report:
    zk = await _connect(options.zk, options.zk_session_timeout_s)
    now = options.now if options.now is not None else time.time()
    the_report = report.Report(
        report.new_run_id(time.time()), time.time(), options.dry_run, list(options.phases)
    )
    try:
        await _check_cluster(zk, options.zk)
        await _take_lock(zk, the_report.run_id)
        try:
            await _locked_run(options, zk, the_report, progress, now)
        finally:
            await report.release_lock(zk, the_report.run_id)
    finally:
        await zk.stop()
    return the_report


async def _connect(hosts: str, session_timeout_s: float) -> ZooKeeperClient:
    zk = ZooKeeperClient(hosts, session_timeout_s=session_timeout_s)
    try:
        await zk.start(timeout_s=ZK_CONNECT_TIMEOUT_S)
    except Exception as e:  # kazoo's timeout and resolution errors
        raise UsageError(f"cannot reach ZooKeeper at {hosts}: {type(e).__name__}") from e
    return zk


async def _check_cluster(zk: ZooKeeperClient, hosts: str) -> None:
    """A cluster's ledger root is there (a wrong chroot or an empty ZooKeeper is one
    clear error, not a failure to create the lock)."""
    if await zk.exists(zk_layout.LEDGERS_ROOT) is None:
        raise UsageError(
            f"no blobstore cluster at {hosts}: {zk_layout.LEDGERS_ROOT} does not exist "
            "(is the chroot right?)"
        )


async def _take_lock(zk: ZooKeeperClient, run_id: str) -> None:
    try:
        await report.take_lock(zk, run_id)
    except report.LockHeldError as e:
        raise UsageError(str(e)) from None


async def _locked_run(
    options: MaintainOptions,
    zk: ZooKeeperClient,
    the_report: report.Report,
    progress: ProgressCallback,
    now: float,
) -> None:
    catalog = Catalog(zk, CatalogConfig(root=options.catalog_root))
    await catalog.start()
    try:
        async with spark.spark_session(options) as session:
            state = Run(options, zk, catalog, session, the_report, progress, now)
            try:
                await _phases(state)
                the_report.outcome = "ok"
            except Exception as e:
                the_report.outcome = "failed"
                the_report.errors.append(f"{type(e).__name__}: {e}")
                raise
            finally:
                the_report.finished = time.time()
                await _save(state)
    finally:
        await catalog.close()


async def _save(state: Run) -> None:
    if not state.options.dry_run:
        await report.save(state.zk, state.report)
    if state.options.pushgateway or state.options.metrics_file:
        await asyncio.to_thread(
            report.export, state.report, state.options.pushgateway, state.options.metrics_file
        )


async def _phases(state: Run) -> None:
    options = state.options
    if not options.dry_run:
        await _make_pending_effective(state)
    hooks.reached("started")
    result = await _scan(state)
    hooks.reached("scanned")
    if options.wants("gc"):
        await _still_locked(state, "gc")
        await _collect(state, result)
    if options.wants("lifecycle"):
        await _still_locked(state, "lifecycle")
        await _lifecycle(state, result)
    if options.wants("compact"):
        await _still_locked(state, "compaction")
        await _compact(state, result)
    if options.wants("tier"):
        await _still_locked(state, "tiering")
        await _tier(state, result)
    if state.released and not options.dry_run:
        hooks.reached("released")
        await _still_locked(state, "condemning released ledgers")
        await _condemn_released(state, result)
    if options.wants("gc") and options.grace_s == 0 and state.condemned_this_run:
        if not options.dry_run:
            hooks.reached("second_look")
            second = await _scan(state)
            await _still_locked(state, "the second look's gc")
            await _collect(state, second)
            second.frames.unpersist()
    if state.report.ledgers_deleted and options.bookie_gc and not options.dry_run:
        hooks.reached("bookie_gc")
        await _bookie_gc(state)
    result.frames.unpersist()


async def _still_locked(state: Run, before: str) -> None:
    if not state.options.dry_run:
        await report.check_lock(state.zk, state.report.run_id, before)


async def _make_pending_effective(state: Run) -> None:
    """Condemnations a killed run created but never announced: bump the generation, so
    that this run's scan covers them."""
    covered = await state.condemned.covered_zxid()
    pending = await state.condemned.read_all()
    if any(c.deleted is None and c.czxid > covered for c in pending.values()):
        await state.condemned.absolve(())


# ------------------------------------------------------------------ scan


async def _scan(state: Run) -> ScanResult:
    state.progress("scan", 0, 0)
    covered = await state.condemned.covered_zxid()
    tasks = await scan.plan_tasks(state.zk, state.catalog, state.options.pages_per_task)
    tasks = _with_valid_rules(tasks, state.report)
    run_session = state.scan_session

    def collect() -> tuple[spark.ScanFrames, list[Any], list[int]]:
        frames = spark.ScanFrames(state.session, spark.scan_rows(state.session, run_session, tasks))
        joined, missing = spark.ledger_stats(frames)
        return frames, joined, missing

    frames, joined, missing = await state.spark("scan", collect)
    missing = await _really_missing(state.zk, missing)
    stats = {int(r.ledger_id): _stat(r) for r in joined}
    referenced = frozenset(i for i, s in stats.items() if s.referenced) | frozenset(missing)
    unresolved, scanned = frames.unresolved, frames.records
    the_report = state.report
    the_report.scans += 1
    the_report.tasks += len(tasks)
    the_report.records_scanned = scanned
    the_report.ledgers = len(stats)
    the_report.ledger_bytes = sum(s.length for s in stats.values())
    the_report.live_bytes = sum(s.live_bytes for s in stats.values())
    for ledger_id in missing:
        the_report.errors.append(f"ledger {ledger_id} is referenced but has no metadata")
    if unresolved:
        the_report.errors.append(f"{unresolved} manifests could not be read: nothing deleted")
    return ScanResult(stats, referenced, missing, unresolved, frames, covered, scanned)


async def _really_missing(zk: ZooKeeperClient, ledger_ids: list[int]) -> list[int]:
    """Referenced ledgers the metadata scan did not list and that have no metadata now
    either (one created after its directory was listed is not missing)."""
    return [i for i in ledger_ids if await zk.exists(zk_layout.ledger_path(i)) is None]


def _stat(row: Any) -> plan.LedgerStat:
    """A ledger's row of the join: its metadata (in `detail`) and its references."""
    meta = orjson.loads(row.detail)
    return plan.LedgerStat(
        int(row.ledger_id),
        meta["state"],
        meta["purpose"],
        int(row.length),
        int(meta["write_quorum"]),
        int(row.live_bytes or 0),
        row.live_bytes is not None,
        bool(row.pinned),
        meta["writer"] or "",
    )


def _with_valid_rules(tasks: list[scan.Task], the_report: report.Report) -> list[scan.Task]:
    """Tasks of a bucket whose stored rules do not parse get none (and the report says)."""
    bad: dict[str, str] = {}
    for task in tasks:
        if isinstance(task, scan.RangeTask | scan.UploadsTask) and task.rules:
            if task.bucket not in bad:
                try:
                    lifecycle.parse_rules(list(task.rules))
                except ValueError as e:
                    bad[task.bucket] = str(e)
    for bucket, error in sorted(bad.items()):
        the_report.errors.append(f"bucket {bucket}: lifecycle rules not applied: {error}")
    return [_without_rules(t) if getattr(t, "bucket", None) in bad else t for t in tasks]


def _without_rules(task: scan.Task) -> scan.Task:
    if isinstance(task, scan.RangeTask):
        return scan.RangeTask(task.bucket, task.lo, task.hi, task.versioning, ())
    if isinstance(task, scan.UploadsTask):
        return scan.UploadsTask(task.bucket, task.upload_ids, ())
    return task


# ------------------------------------------------------------------ GC


async def _collect(state: Run, result: ScanResult) -> None:
    if not state.options.dry_run:
        await _recover_orphans(state, result)
    condemned = await state.condemned.read_all()
    gc_plan = plan.plan_gc(
        plan.GcInputs(
            result.stats,
            result.referenced,
            condemned,
            result.covered_zxid,
            time.time(),
            state.options.grace_s,
            blocked=bool(result.unresolved or result.missing),
        )
    )
    the_report = state.report
    the_report.waiting = len(gc_plan.waiting)
    if state.options.dry_run:
        would = the_report.would
        would["ledgers_deleted"] = would.get("ledgers_deleted", 0) + len(gc_plan.delete)
        would["condemned"] = would.get("condemned", 0) + len(gc_plan.condemn)
        would["bytes_reclaimed"] = sum(result.stats[c.ledger_id].length for c in gc_plan.delete)
        return
    state.progress("gc", 0, len(gc_plan.delete))
    outcome = await gc.delete_condemned(state.zk, state.condemned, gc_plan)
    hooks.reached("gc_done")
    if gc_plan.absolve:
        await state.condemned.absolve(gc_plan.absolve)
    if gc_plan.forget:
        await state.condemned.forget(gc_plan.forget)
    await _condemn(state, gc_plan.condemn)
    the_report.ledgers_deleted += len(outcome.deleted)
    the_report.bytes_reclaimed += outcome.deleted_bytes
    the_report.disk_bytes_reclaimed += outcome.deleted_disk_bytes
    the_report.absolved += len(gc_plan.absolve)
    await report.save(state.zk, the_report)


async def _recover_orphans(state: Run, result: ScanResult) -> None:
    """Close the object ledgers whose writer is gone (the sweeper's work, done here too
    so that a cluster without a gateway still gets them back)."""
    try:
        live = set(await state.zk.get_children(GATEWAYS_PATH))
    except NoNodeError:
        live = set()
    orphaned = plan.orphans(result.stats.values(), live)
    if not orphaned:
        return
    client = LedgerClient(state.zk)
    passwords = LedgerPasswords.from_env()
    await client.start()
    try:
        for ledger_id in orphaned:
            if await state.zk.exists(gateway_path(result.stats[ledger_id].writer)) is not None:
                continue  # its writer just came back
            try:
                await client.open_ledger(ledger_id, passwords, recovery=True)
            except LedgerError as e:
                state.report.errors.append(f"recovery of orphaned ledger {ledger_id}: {e}")
                continue
            state.report.orphans_recovered += 1
            logger.info("event=orphan_ledger_recovered ledger_id=%d", ledger_id)
    finally:
        await client.close()


async def _condemn(state: Run, ledger_ids: list[int]) -> None:
    if not ledger_ids:
        return
    await state.condemned.condemn(ledger_ids, time.time())
    hooks.reached("condemned")
    state.condemned_this_run.update(ledger_ids)
    state.report.condemned += len(ledger_ids)
    logger.info("event=ledgers_condemned count=%d", len(ledger_ids))


async def _bookie_gc(state: Run) -> None:
    state.progress("bookie gc", 0, 0)
    for answer in await gc.request_bookie_gc(state.zk, BOOKIE_COMPACT_THRESHOLD):
        if "error" in answer.answer:
            state.report.errors.append(f"bookie {answer.bookie_id} GC: {answer.answer['error']}")
        else:
            state.report.bookie_bytes_freed += int(answer.answer.get("bytes_freed", 0))


# ------------------------------------------------------------------ lifecycle


async def _lifecycle(state: Run, result: ScanResult) -> None:
    actions = result.actions
    if state.options.dry_run:
        counts = await state.spark("lifecycle", lambda: actions.groupBy("action").count().collect())
        for row in counts:
            state.report.would[f"lifecycle_{row['action']}"] = int(row["count"])
        return
    run_session = state.scan_session

    def act() -> list[Any]:
        rdd = actions.rdd.map(tuple)
        done: list[Any] = rdd.mapPartitions(
            lambda part: execute.lifecycle_partition(run_session, part)
        ).collect()
        return done

    rows = await state.spark("lifecycle", act)
    _count_lifecycle(state, rows)


def _count_lifecycle(state: Run, rows: list[tuple[Any, ...]]) -> None:
    the_report = state.report
    for result, _ledger, bucket, key, version_id, _bytes, detail in rows:
        if result != execute.RESULT_DONE:
            the_report.actions_skipped += 1
            the_report.versions_skipped_locked += detail == execute.LOCKED
            continue
        kind = detail.split(" ", 1)[0]
        if kind == lifecycle.ActionKind.DELETE_VERSION:
            the_report.versions_expired += 1
            state.released.append((-1, bucket, key, version_id, ""))
        elif kind == lifecycle.ActionKind.ADD_DELETE_MARKER:
            the_report.delete_markers_added += 1
        elif kind == scan.ABORT_UPLOAD:
            the_report.uploads_aborted += 1
            state.released.append((-1, bucket, key, "", version_id))
        elif kind == scan.RESTORE_EXPIRED:
            the_report.restores_expired += 1
            state.released.append((-1, bucket, key, version_id, ""))


# ------------------------------------------------------------------ compaction


async def _compact(state: Run, result: ScanResult) -> None:
    options = state.options
    condemned = await state.condemned.read_all()
    choice = plan.plan_compaction(
        result.stats.values(),
        condemned,
        options.compact_threshold,
        options.compact_garbage_bytes_min,
        options.compact_bytes_max,
    )
    if options.dry_run or not choice.ledger_ids:
        if options.dry_run:
            state.report.would["compacted_ledgers"] = len(choice.ledger_ids)
            state.report.would["compaction_bytes_copied"] = choice.live_bytes
        return
    rows = await state.spark("compact", lambda: _run_compaction(state, result, choice))
    for row in rows:
        _count_compaction(state, row)


def _run_compaction(state: Run, result: ScanResult, choice: plan.CompactionChoice) -> list[Any]:

    chosen = result.frames.object_extents(choice.ledger_ids)
    groups = chosen.rdd.map(lambda r: (int(r.ledger_id), _holder(r))).groupByKey()
    tasks = groups.map(lambda kv: execute.CompactTask(kv[0], tuple(kv[1])))
    parallelism = max(1, state.session.sparkContext.defaultParallelism)
    bytes_per_s = state.options.bandwidth_mb_s * 1e6 / parallelism
    run_session = state.scan_session
    partitions = tasks.repartition(min(parallelism, len(choice.ledger_ids)))
    done: list[Any] = partitions.mapPartitions(
        lambda part: execute.compact_partition(run_session, part, bytes_per_s)
    ).collect()
    return done


def _holder(row: Any) -> execute.Holder:
    from blobstore.catalog.records import Extent

    extent = Extent(row.ledger_id, row.first_entry, row.last_entry, row.length, row.entry_size)
    return execute.Holder(row.bucket, row.key, row.version_id, extent)


def _count_compaction(state: Run, row: tuple[Any, ...]) -> None:
    result, ledger_id, bucket, key, version_id, size, _detail = row
    the_report = state.report
    if result == execute.RESULT_COPIED:
        the_report.compacted_ledgers += 1
        the_report.compaction_bytes_copied += int(size)
    elif result == execute.RESULT_SWAPPED:
        the_report.records_swapped += 1
        state.released.append((int(ledger_id), bucket, key, version_id, ""))
    elif result == execute.RESULT_DEFERRED:
        the_report.compactions_deferred += 1
    elif result == execute.RESULT_FAILED:
        the_report.errors.append(f"compaction of ledger {ledger_id}: {_detail}")
    else:
        the_report.swaps_skipped += 1


# ------------------------------------------------------------------ tiering


async def _tier(state: Run, result: ScanResult) -> None:
    tiers = await TierStore(state.zk).list()
    if not tiers:
        return
    cluster_key = load_cluster_key(required=False)
    live = await state.spark("tier", lambda: _live_segments(result))
    sparse: list[tiering.TierTask] = []
    for spec in tiers:
        files = TierFiles(spec, cluster_key)
        listed = await _listed_segments(state, files)
        await _remove_orphans(state, files, listed, live)
        sparse += _rewrites(state, spec, listed, live)
    due = await state.spark("tier", lambda: result.frames.transitions.collect())
    tasks = _tier_tasks(state, tiers, due)
    if sparse:
        tasks += await state.spark("tier", lambda: _rewrite_tasks(state, result, sparse))
    if state.options.dry_run:
        state.report.would["objects_tiered"] = sum(len(t.moves) for t in tasks)
        return
    if not tasks:
        return
    rows = await state.spark("tier", lambda: _run_tiering(state, tasks))
    for row in rows:
        _count_tiering(state, row)


def _live_segments(result: ScanResult) -> dict[str, int]:
    """`tier/segment id` -> the bytes of the versions records name in it."""
    from pyspark.sql import functions as f

    rows = result.frames.tiered.groupBy("segment").agg(f.sum("length").alias("live")).collect()
    return {row.segment: int(row.live or 0) for row in rows}


async def _listed_segments(state: Run, files: TierFiles) -> dict[str, int]:
    """`tier/segment id` -> size, of every segment on the tier ({} when unreachable:
    the error is reported, and nothing is removed or rewritten there)."""
    try:
        found = await asyncio.to_thread(lambda: list(files.segments()))
    except TierUnavailableError as e:
        state.report.errors.append(str(e))
        return {}
    return {f"{files.name}/{segment_id}": size for segment_id, size in found}


async def _remove_orphans(
    state: Run, files: TierFiles, listed: dict[str, int], live: dict[str, int]
) -> None:
    """Delete the tier's segments no record names: a killed run's, or those whose every
    object was deleted or overwritten since (a segment is only ever named by the swaps
    of a locked run, so none can gain a reference behind this run's scan)."""
    for name, size in sorted(listed.items()):
        if name in live:
            continue
        if state.options.dry_run:
            would = state.report.would
            would["segments_removed"] = would.get("segments_removed", 0) + 1
            continue
        segment_id = name.split("/", 1)[1]
        try:
            await asyncio.to_thread(files.delete_segment, segment_id)
        except TierUnavailableError as e:
            state.report.errors.append(str(e))
            return
        state.report.segments_removed += 1
        state.report.tier_bytes_freed += size
        logger.info(
            "event=segment_removed tier=%s segment=%s bytes=%d", files.name, segment_id, size
        )


def _rewrites(
    state: Run, spec: TierSpec, listed: dict[str, int], live: dict[str, int]
) -> list[tiering.TierTask]:
    """The tier's segments to rewrite (`tiering.sparse_segments`), as empty tasks the
    live versions are added to."""
    chosen = tiering.sparse_segments(
        {name: (size, live[name]) for name, size in listed.items() if name in live},
        state.options.compact_threshold,
        state.options.compact_garbage_bytes_min,
    )
    return [tiering.TierTask(spec, "", name, (), rewrite=True) for name in chosen]


def _rewrite_tasks(
    state: Run, result: ScanResult, sparse: list[tiering.TierTask]
) -> list[tiering.TierTask]:
    """Tasks writing the live versions of the sparse segments into new segments."""
    from pyspark.sql import functions as f

    chosen = {task.segment_id: task.tier for task in sparse}
    rows = result.frames.tiered.where(f.col("segment").isin(*chosen)).collect()
    by_tier: dict[str, list[tiering.Move]] = {}
    for row in rows:
        move = tiering.Move(
            row.bucket, row.key, row.version_id, float(row.mtime), int(row.length), row.location
        )
        by_tier.setdefault(row.segment.split("/", 1)[0], []).append(move)
    tasks: list[tiering.TierTask] = []
    specs = {spec.name: spec for spec in chosen.values()}
    for tier, moves in sorted(by_tier.items()):
        for group in tiering.pack(moves, tiering.SEGMENT_BYTES_MAX, tiering.SEGMENT_OBJECTS_MAX):
            segment_id = f"{state.report.run_id}-r{len(tasks):05d}"
            tasks.append(tiering.TierTask(specs[tier], "", segment_id, tuple(group), rewrite=True))
    state.report.segments_rewritten += len(chosen)
    return tasks


def _tier_tasks(state: Run, tiers: list[TierSpec], due: list[Any]) -> list[tiering.TierTask]:
    """The versions due, by target tier, packed into segments of at most
    SEGMENT_BYTES_MAX (one object larger than that has a segment of its own)."""
    by_class: dict[str, list[tiering.Move]] = {}
    for row in due:
        move = tiering.Move(
            row.bucket, row.key, row.version_id, float(row.mtime), int(row.length or 0)
        )
        by_class.setdefault(row.storage_class, []).append(move)
    tasks: list[tiering.TierTask] = []
    for storage_class, moves in sorted(by_class.items()):
        spec = resolve_storage_class(tiers, storage_class)
        if spec is None:
            state.report.transitions_skipped += len(moves)
            state.report.errors.append(
                f"{len(moves)} versions due for storage class {storage_class}: no tier "
                "answers to it (blobstore admin tier add ... --storage-class)"
            )
            continue
        for group in tiering.pack(moves, tiering.SEGMENT_BYTES_MAX, tiering.SEGMENT_OBJECTS_MAX):
            segment_id = f"{state.report.run_id}-{len(tasks):05d}"
            tasks.append(tiering.TierTask(spec, storage_class, segment_id, tuple(group)))
    return tasks


def _run_tiering(state: Run, tasks: list[tiering.TierTask]) -> list[Any]:
    parallelism = max(1, state.session.sparkContext.defaultParallelism)
    run_session = state.scan_session
    rdd = state.session.sparkContext.parallelize(tasks, min(parallelism, len(tasks)))
    done: list[Any] = rdd.mapPartitions(
        lambda part: tiering.tier_partition(run_session, part)
    ).collect()
    return done


def _count_tiering(state: Run, row: tuple[Any, ...]) -> None:
    result, _ledger, bucket, key, version_id, size, detail = row
    the_report = state.report
    if result == execute.RESULT_COPIED:
        the_report.segments_written += 1
        the_report.tier_bytes_written += int(size)
    elif result == execute.RESULT_SWAPPED:
        the_report.objects_tiered += 1
        state.released.append((-1, bucket, key, version_id, ""))
    elif result == tiering.RESULT_REWRITTEN:
        the_report.objects_rewritten += 1
    elif result == execute.RESULT_FAILED:
        the_report.errors.append(f"tiering segment {version_id}: {detail}")
    else:
        the_report.transitions_skipped += 1


async def _condemn_released(state: Run, result: ScanResult) -> None:
    """Condemn the ledgers whose every holder this run deleted or moved (without waiting
    for the next scan to find them unreferenced)."""
    released_rows = list(state.released)

    def count() -> dict[int, tuple[int, int]]:
        return spark.fully_released(state.session, result.extents, released_rows)

    holders = await state.spark("release", count)
    ledger_ids = [
        i for i in plan.fully_released(holders) if i in result.stats and result.stats[i].collectable
    ]
    if not (result.unresolved or result.missing):
        await _condemn(state, ledger_ids)
