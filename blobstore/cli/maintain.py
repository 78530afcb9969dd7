"""`blobstore maintain`: give back the space of deleted data, on Spark.

One run scans the catalog and the ledger metadata in parallel (Spark tasks reading
ZooKeeper), deletes the ledgers nothing references (in two looks, after --grace),
compacts ledgers whose live ratio is under --compact-threshold into new ones, and
applies the buckets' lifecycle expiration rules. Then the bookies free the disk space.
Spark runs in this process (`local[*]`) unless --master names a cluster;
`spark-submit blobstore/cli/__main__.py maintain --zk ...` runs the same entry point.
A run killed at any point loses nothing and is taken up by the next; one run at a time
per cluster (a lock in ZooKeeper). See docs/maintenance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from blobstore.maintenance import options as maintain_options
from blobstore.maintenance import scratch
from blobstore.maintenance.report import Report
from blobstore.runtime.errors import UsageError


def _flags() -> list[tuple[str, dict[str, Any]]]:
    o = maintain_options
    env = os.environ.get
    return [
        ("--zk", {"default": env("BLOBSTORE_ZK"), "help": "ZooKeeper host:port[/chroot] (env BLOBSTORE_ZK)"}),
        ("--master", {"default": "", "help": "Spark master URL: local[*] (default), local[N], spark://H:P, k8s://https://H:P, yarn"}),
        ("--dry-run", {"action": "store_true", "help": "scan and report what would be done; change nothing"}),
        ("--only", {"default": ",".join(o.PHASES), "help": "phases to run, comma-separated: gc, compact, lifecycle, tier (default: all)"}),
        ("--grace", {"type": float, "default": o.GRACE_S_DEFAULT, "metavar": "SECONDS", "help": "how long a ledger stays condemned (unreferenced) before it is deleted; 0: this run looks twice and deletes (default %(default)s)"}),
        ("--compact-threshold", {"type": float, "default": o.COMPACT_THRESHOLD_DEFAULT, "metavar": "RATIO", "help": "compact closed ledgers whose live bytes / length is under this (default %(default)s)"}),
        ("--compact-garbage-min", {"type": int, "default": o.COMPACT_GARBAGE_BYTES_MIN_DEFAULT, "metavar": "BYTES", "help": "only compact a ledger holding at least this much garbage (default %(default)s)"}),
        ("--compact-max", {"type": int, "default": o.COMPACT_BYTES_MAX_DEFAULT, "metavar": "BYTES", "help": "copy at most this many live bytes per run (default %(default)s)"}),
        ("--bandwidth", {"type": float, "default": o.BANDWIDTH_MB_S_DEFAULT, "metavar": "MB/S", "help": "bound on compaction copy bandwidth over all tasks (default %(default)s)"}),
        ("--now", {"default": None, "metavar": "ISO8601", "help": "the time lifecycle rules are evaluated at (default: now)"}),
        ("--pages-per-task", {"type": int, "default": o.PAGES_PER_TASK_DEFAULT, "metavar": "N", "help": "index pages per scan task (default %(default)s)"}),
        ("--zk-session-timeout", {"type": float, "default": o.ZK_SESSION_TIMEOUT_S_DEFAULT, "metavar": "SECONDS", "help": "the driver's ZooKeeper session timeout; the run's lock is held by that session, so after a killed run the next may start this much later (default %(default)s, range 4-40)"}),
        ("--scratch-dir", {"default": env(scratch.SCRATCH_DIR_ENV, ""), "metavar": "DIR", "help": "where the driver's Spark keeps its local files, a directory per run, removed at its end; a killed run's is removed by the next run (env BLOBSTORE_MAINTENANCE_SCRATCH_DIR; default: blobstore-spark-UID in the temporary directory)"}),
        ("--no-bookie-gc", {"action": "store_true", "help": "do not ask the bookies for a GC pass after deleting ledgers"}),
        ("--catalog-root", {"default": env("BLOBSTORE_CATALOG_ROOT", "/catalog"), "help": argparse.SUPPRESS}),
        ("--pushgateway", {"default": env("BLOBSTORE_PUSHGATEWAY", ""), "metavar": "URL", "help": "push the run's metrics to this Prometheus Pushgateway (env BLOBSTORE_PUSHGATEWAY)"}),
        ("--metrics-file", {"default": "", "metavar": "PATH", "help": "write the run's metrics in the text format (node_exporter textfile collector)"}),
        ("--json", {"action": "store_true", "help": "print the report as JSON"}),
    ]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, settings in _flags():
        parser.add_argument(flag, **settings)


def options_of(args: argparse.Namespace) -> maintain_options.MaintainOptions:
    if not args.zk:
        raise UsageError("--zk (or BLOBSTORE_ZK) is required")
    return maintain_options.MaintainOptions(
        zk=args.zk,
        master=args.master,
        dry_run=args.dry_run,
        phases=maintain_options.parse_phases(args.only),
        grace_s=args.grace,
        compact_threshold=args.compact_threshold,
        compact_garbage_bytes_min=args.compact_garbage_min,
        compact_bytes_max=args.compact_max,
        bandwidth_mb_s=args.bandwidth,
        now=maintain_options.parse_now(args.now) if args.now else None,
        pages_per_task=args.pages_per_task,
        zk_session_timeout_s=args.zk_session_timeout,
        bookie_gc=not args.no_bookie_gc,
        catalog_root=args.catalog_root,
        pushgateway=args.pushgateway,
        metrics_file=args.metrics_file,
        scratch_dir=args.scratch_dir,
        hooks={},
    )


def run(args: argparse.Namespace) -> int:
    from blobstore.maintenance import job

    options = options_of(args)
    if args.json or not sys.stderr.isatty():
        report = job.run(options)
    else:
        report = _with_progress(options)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print_report(report)
    return 0 if report.outcome == "ok" and not report.errors else 1


def _with_progress(options: maintain_options.MaintainOptions) -> Report:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from blobstore.maintenance import job

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total or None)
            bar.update(tasks[phase], completed=done, total=total or None)

        return job.run(options, progress)


ROWS = (
    ("records scanned", "records_scanned", False),
    ("ledgers", "ledgers", False),
    ("ledger bytes", "ledger_bytes", True),
    ("live bytes", "live_bytes", True),
    ("ledgers condemned", "condemned", False),
    ("ledgers absolved", "absolved", False),
    ("ledgers deleted", "ledgers_deleted", False),
    ("bytes reclaimed (x WQ on disk)", "disk_bytes_reclaimed", True),
    ("bytes freed by bookies", "bookie_bytes_freed", True),
    ("ledgers compacted", "compacted_ledgers", False),
    ("bytes copied", "compaction_bytes_copied", True),
    ("records moved", "records_swapped", False),
    ("swaps skipped (changed)", "swaps_skipped", False),
    ("versions expired", "versions_expired", False),
    ("delete markers added", "delete_markers_added", False),
    ("uploads aborted", "uploads_aborted", False),
    ("objects tiered", "objects_tiered", False),
    ("bytes written to tiers", "tier_bytes_written", True),
    ("tier segments removed", "segments_removed", False),
    ("tier bytes freed", "tier_bytes_freed", True),
    ("condemned, waiting", "waiting", False),
)


def print_report(report: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    from blobstore.admin._output import human_bytes

    title = f"maintenance run {report.run_id}: {report.outcome} in {report.duration_s:.1f} s"
    title += " (dry run)" if report.dry_run else ""
    table = Table(title=title, show_header=False, min_width=len(title) + 4)
    table.add_column("what")
    table.add_column("count", justify="right")
    for label, name, in_bytes in ROWS:
        value = getattr(report, name)
        table.add_row(label, human_bytes(value) if in_bytes else f"{value:,}")
    for name, value in sorted(report.would.items()):
        shown = human_bytes(value) if "bytes" in name else f"{value:,}"
        table.add_row(f"would: {name.replace('_', ' ')}", shown)
    console = Console()
    console.print(table)
    for error in report.errors:
        console.print(f"[red]error:[/red] {error}")
