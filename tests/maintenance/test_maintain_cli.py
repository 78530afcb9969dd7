"""`blobstore maintain` as a user meets it: `--help` explains every flag, bad input is
one line on stderr and a non-zero exit that touches nothing, `--dry-run` reports what a
run would do and changes nothing, and a second run refuses while one is in progress."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from blobstore.cli import maintain
from blobstore.cli.zookeeper_server import free_port
from blobstore.maintenance.hooks import HOOKS_ENV
from blobstore.maintenance.report import LOCK_PATH, MAINTENANCE_PATH, RUNS_PATH
from tests.cluster.processes import BookieProcess
from tests.maintenance.conftest import ROOT, MaintenanceCluster
from tests.maintenance.workload import delete_heavy
from tests.waiting import wait_until

COMMAND_TIMEOUT_S = 120.0
# The driver gives up on an unreachable ZooKeeper after its 15 s connect timeout.
UNREACHABLE_TIMEOUT_S = 60.0
PAUSE_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 300.0
CHECKPOINT_TIMEOUT_S = 60.0
WORKLOAD_OBJECTS = 48
LOCK_HELD = "another maintenance run is in progress"
# Bookies checkpoint often, so their entry logs settle soon after the last write.
BOOKIE_ARGS = ("--checkpoint-interval-s", "0.3")
# What the catalog and the ledger metadata are: every znode under these, with its data.
SNAPSHOT_ROOTS = ("/catalog", "/ledgers/meta")


def blobstore(
    *args: str, env: Mapping[str, str] | None = None, timeout_s: float = COMMAND_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "BLOBSTORE_ZK"}
    return subprocess.run(
        [sys.executable, "-m", "blobstore.cli", *args],
        cwd=ROOT,
        env={**environment, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The refusal's lines on stderr (log lines and usage aside), after checking there is
    no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if "error:" in line]


# ------------------------------------------------------------------ --help


def help_entries(text: str) -> dict[str, str]:
    """Flag -> its explanation, from argparse's `options:` section."""
    entries: dict[str, str] = {}
    flag = ""
    for line in text.split("\noptions:\n", 1)[1].splitlines():
        if line.startswith("  -"):
            head, _, explanation = line.strip().partition("  ")
            flag = head.split(",")[-1].split()[0]
            entries[flag] = explanation.strip()
        elif flag and line.startswith("    "):
            entries[flag] = f"{entries[flag]} {line.strip()}".strip()
    return entries


def documented_flags() -> list[str]:
    """The flags `maintain` takes, hidden ones aside, as its own parser declares them."""
    parser = argparse.ArgumentParser()
    maintain.add_arguments(parser)
    return [
        action.option_strings[-1]
        for action in parser._actions
        if action.option_strings and action.help != argparse.SUPPRESS and action.dest != "help"
    ]


def test_help_lists_every_flag_with_an_explanation() -> None:
    done = blobstore("maintain", "--help")

    assert done.returncode == 0 and not done.stderr, done
    entries = help_entries(done.stdout)
    flags = documented_flags()
    assert {"--zk", "--master", "--dry-run", "--only", "--grace", "--now", "--json"} <= set(flags)
    assert sorted(entries) == sorted([*flags, "--help"]), done.stdout
    for flag in flags:
        assert len(entries[flag].split()) >= 3, (flag, entries[flag])
    assert "give back the space of deleted data" in done.stdout


# ------------------------------------------------------------------ bad input


def chroot_tree(zk: KazooClient) -> list[str]:
    """Every znode path of the test's chroot."""
    paths = []
    stack = ["/"]
    while stack:
        path = stack.pop()
        for child in zk.get_children(path):
            child_path = f"{path.rstrip('/')}/{child}"
            paths.append(child_path)
            stack.append(child_path)
    return sorted(paths)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--master", "nonsense"), "bad --master 'nonsense'"),
        (("--compact-threshold", "0"), "bad --compact-threshold 0.0: a live ratio in (0, 1]"),
        (("--compact-threshold", "1.5"), "bad --compact-threshold 1.5"),
        (("--compact-threshold", "abc"), "argument --compact-threshold: invalid float value"),
        (("--grace", "-1"), "bad --grace -1.0: seconds, 0 or more"),
        (("--grace", "nan"), "bad --grace nan"),
        (("--now", "yesterday"), "bad --now 'yesterday': ISO 8601"),
        (("--now", "2026-13-01T00:00:00Z"), "bad --now"),
        (("--only", "gc,foo"), "bad --only 'gc,foo'"),
        (("--only", ","), "bad --only ','"),
        (("--zk-session-timeout", "1"), "bad --zk-session-timeout 1.0: seconds, 4 to 40"),
        (("--zk-session-timeout", "nan"), "bad --zk-session-timeout nan"),
    ],
)
def test_bad_flags_are_one_line_and_a_non_zero_exit_and_change_nothing(
    zk_connect: str, zk_client: KazooClient, args: tuple[str, ...], expected: str
) -> None:
    before = chroot_tree(zk_client)

    done = blobstore("maintain", "--zk", zk_connect, *args)

    assert done.returncode == 2, done
    errors = error_lines(done)
    assert len(errors) == 1 and expected in errors[0], done.stderr
    assert done.stdout == ""
    assert chroot_tree(zk_client) == before == []


def test_missing_zookeeper_flag_is_one_line_and_exit_two() -> None:
    done = blobstore("maintain", "--grace", "0")

    assert done.returncode == 2, done
    assert error_lines(done) == ["blobstore: error: --zk (or BLOBSTORE_ZK) is required"], done
    assert done.stdout == ""


def test_zookeeper_from_the_environment_needs_no_flag(zk_connect: str) -> None:
    done = blobstore("maintain", "--only", "gc,bogus", env={"BLOBSTORE_ZK": zk_connect})

    assert done.returncode == 2, done
    assert error_lines(done) == [
        "blobstore: error: bad --only 'gc,bogus': a comma-separated list of gc, compact, lifecycle, tier"
    ]


def test_unreachable_zookeeper_is_one_line_and_a_non_zero_exit() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there

    done = blobstore("maintain", "--zk", address, "--json", timeout_s=UNREACHABLE_TIMEOUT_S)

    assert done.returncode == 2, done
    errors = error_lines(done)
    assert len(errors) == 1 and f"cannot reach ZooKeeper at {address}" in errors[0], done.stderr
    assert done.stdout == ""


def test_a_zookeeper_without_a_cluster_is_one_line_and_changes_nothing(
    zk_connect: str, zk_client: KazooClient
) -> None:
    done = blobstore("maintain", "--zk", zk_connect, "--grace", "0")

    assert done.returncode == 2, done
    errors = error_lines(done)
    assert len(errors) == 1 and f"no blobstore cluster at {zk_connect}" in errors[0], done.stderr
    assert chroot_tree(zk_client) == []


@pytest.mark.soak  # Spark itself gives up on an unreachable master after about a minute
def test_an_unreachable_spark_master_is_one_line_and_releases_the_lock(
    zk_connect: str, zk_client: KazooClient
) -> None:
    zk_client.ensure_path("/ledgers")  # a cluster's root: the run gets as far as Spark
    master = f"spark://127.0.0.1:{free_port()}"  # nothing listens there

    done = blobstore("maintain", "--zk", zk_connect, "--master", master, timeout_s=300.0)

    assert done.returncode == 2, done
    errors = error_lines(done)
    assert len(errors) == 1 and f"cannot start Spark with --master {master}" in errors[0], done
    assert "Traceback" not in done.stderr
    assert zk_client.exists(f"{MAINTENANCE_PATH}/lock") is None


# ------------------------------------------------------------------ --dry-run


def znodes(zk: KazooClient, roots: tuple[str, ...] = SNAPSHOT_ROOTS) -> dict[str, bytes]:
    """Path -> data of every znode under `roots`."""
    found: dict[str, bytes] = {}
    stack = list(roots)
    while stack:
        path = stack.pop()
        try:
            data, _stat = zk.get(path)
            children = zk.get_children(path)
        except NoNodeError:
            continue
        found[path] = data
        stack.extend(f"{path}/{child}" for child in children)
    return found


def condemned(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children("/catalog/condemned"))
    except NoNodeError:
        return []


def ledger_count(zk: KazooClient) -> int:
    return sum(1 for path in znodes(zk, ("/ledgers/meta",)) if path.rsplit("/", 1)[1][0] == "L")


def bookie_info(bookie: BookieProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{bookie.http_port}/info", timeout=10) as r:
        info: dict[str, Any] = json.loads(r.read())
    return info


def entry_logs(cluster: MaintenanceCluster) -> dict[str, int]:
    """Entry log file -> size, over every bookie, once their write caches are empty (so
    nothing but a GC or compaction changes them)."""
    wait_until(
        lambda: all(bookie_info(b)["write_cache_bytes"] == 0 for b in cluster.bookies),
        CHECKPOINT_TIMEOUT_S,
        message="bookies never checkpointed their write caches",
        interval_s=0.2,
    )
    return {
        str(path.relative_to(cluster.root)): path.stat().st_size
        for bookie in cluster.bookies
        for path in sorted((bookie.ledger_dir / "current").glob("*.log"))
    }


def bookie_gc_passes(cluster: MaintenanceCluster) -> int:
    """Forced GC passes the bookies logged (one `gc_forced` line each)."""
    return sum(
        (bookie.root / "bookie.log").read_text(errors="replace").count("gc_forced ")
        for bookie in cluster.bookies
    )


def object_listing(s3: Any, bucket: str) -> list[tuple[str, str, int]]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [(o["Key"], o["ETag"], o["Size"]) for page in pages for o in page.get("Contents", [])]


def test_dry_run_reports_what_it_would_do_and_changes_nothing(
    cluster: MaintenanceCluster, zk_client: KazooClient
) -> None:
    cluster.start(bookie_args=BOOKIE_ARGS)
    s3 = cluster.s3()
    expected = delete_heavy(s3, "dry", random.Random(7), WORKLOAD_OBJECTS)
    listed = object_listing(s3, "dry")
    cluster.gateway.stop()  # its writer ledgers closed; nothing else writes
    catalog_and_ledgers = znodes(zk_client)
    logs = entry_logs(cluster)
    passes = bookie_gc_passes(cluster)

    dry = cluster.report("--dry-run", "--grace", "0")

    assert dry["outcome"] == "ok" and dry["dry_run"] and not dry["errors"], dry
    would = dry["would"]
    assert would["condemned"] > 0 and would["compacted_ledgers"] > 0, dry
    assert would["compaction_bytes_copied"] > 0, dry
    assert dry["ledgers_deleted"] == dry["condemned"] == dry["records_swapped"] == 0, dry
    assert znodes(zk_client) == catalog_and_ledgers
    assert condemned(zk_client) == []
    assert entry_logs(cluster) == logs
    assert bookie_gc_passes(cluster) == passes
    assert zk_client.exists(RUNS_PATH) is None  # a dry run leaves no report either
    cluster.gateway.start()
    assert object_listing(s3, "dry") == listed

    ledgers_before = ledger_count(zk_client)
    real = cluster.report("--grace", "0")

    assert real["outcome"] == "ok" and not real["dry_run"] and not real["errors"], real
    assert real["condemned"] >= would["condemned"] and real["ledgers_deleted"] > 0, real
    assert real["records_swapped"] > 0, real
    assert ledger_count(zk_client) < ledgers_before
    assert condemned(zk_client) != []  # the deleted ledgers' tombstones
    assert bookie_gc_passes(cluster) > passes
    assert expected.mismatches(s3) == []


# ------------------------------------------------------------------ one run at a time


def start_run(
    cluster: MaintenanceCluster, env: Mapping[str, str], out: Path
) -> subprocess.Popen[bytes]:
    """`blobstore maintain --json` in the background, its stdout in `out` and its stderr
    beside it."""
    with open(out, "wb") as stdout, open(out.with_suffix(".err"), "wb") as stderr:
        return subprocess.Popen(
            [*cluster.maintain_command(), "--json"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )


def test_a_second_run_refuses_while_one_is_in_progress(
    cluster: MaintenanceCluster, zk_client: KazooClient, tmp_path: Path
) -> None:
    cluster.start()
    s3 = cluster.s3()
    s3.create_bucket(Bucket="lock")
    s3.put_object(Bucket="lock", Key="a", Body=b"a" * 1000)
    gate = tmp_path / "scanned"
    out = tmp_path / "first.json"
    first = start_run(cluster, {HOOKS_ENV: f"scanned=pause:{gate}"}, out)
    try:
        wait_until(
            lambda: Path(f"{gate}.reached").exists() or first.poll() is not None,
            PAUSE_TIMEOUT_S,
            message="the first run never reached its pause",
        )
        assert first.poll() is None, out.with_suffix(".err").read_text()[-4000:]

        second = cluster.maintain(check=False)

        assert second.returncode == 2, second
        errors = error_lines(second)
        assert len(errors) == 1 and LOCK_HELD in errors[0], second.stderr
        assert f"pid {first.pid}" in errors[0], errors
        assert second.stdout == ""
        gate.touch()
        assert first.wait(timeout=RUN_TIMEOUT_S) == 0, out.with_suffix(".err").read_text()
    finally:
        gate.touch()
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    report = json.loads(out.read_text())
    assert report["outcome"] == "ok" and not report["errors"], report
    # The refused run left no report of its own, and the lock is free again.
    assert zk_client.get_children(RUNS_PATH) == [report["run_id"]]
    assert zk_client.get_children(MAINTENANCE_PATH) == ["runs"]
    assert s3.get_object(Bucket="lock", Key="a")["Body"].read() == b"a" * 1000


def test_a_run_that_lost_its_lock_stops_and_leaves_the_new_holders_lock(
    cluster: MaintenanceCluster, zk_client: KazooClient, tmp_path: Path
) -> None:
    """A run whose session expired (here: its lock replaced by another run's while it is
    paused) stops before its next phase that changes anything, with one line, and does
    not release the other run's lock."""
    cluster.start()
    s3 = cluster.s3()
    delete_heavy(s3, "lost", random.Random(7), 8)  # garbage for a gc phase to delete
    gate = tmp_path / "scanned"
    out = tmp_path / "first.json"
    first = start_run(cluster, {HOOKS_ENV: f"scanned=pause:{gate}"}, out)
    other = json.dumps({"host": "elsewhere", "pid": 1, "started": 0, "run_id": "other"})
    try:
        wait_until(
            lambda: Path(f"{gate}.reached").exists() or first.poll() is not None,
            PAUSE_TIMEOUT_S,
            message="the run never reached its pause",
        )
        assert first.poll() is None, out.with_suffix(".err").read_text()[-4000:]
        zk_client.delete(LOCK_PATH)
        zk_client.create(LOCK_PATH, other.encode())
        gate.touch()
        assert first.wait(timeout=RUN_TIMEOUT_S) == 1
    finally:
        gate.touch()
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    stderr = out.with_suffix(".err").read_text()
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "the maintenance lock was lost" in errors[0], errors
    assert "before gc" in errors[0], errors
    assert json.loads(zk_client.get(LOCK_PATH)[0])["run_id"] == "other"
    (run_id,) = zk_client.get_children(RUNS_PATH)
    saved = json.loads(zk_client.get(f"{RUNS_PATH}/{run_id}")[0])
    assert saved["outcome"] == "failed" and saved["ledgers_deleted"] == 0, saved
