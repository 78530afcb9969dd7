"""The maintenance benchmark's report: `--quick` runs every measurement end to end on real
processes (ZooKeeper, bookies, a gateway, the job on local Spark) at small sizes, and the
report it writes is whole and well-formed; its pure helpers read Spark's event log and
time as they should."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import maintenance_bench
from blobstore.runtime.ledger_tls import LEDGER_TLS_DIR_ENV, ZK_TLS_DIR_ENV

ROOT = Path(__file__).resolve().parents[2]
QUICK_TIMEOUT_S = 420.0
STOP_TIMEOUT_S = 120.0
SECTIONS = (
    "## Machine limits (same run)",
    "## Scan",
    "### The scan phase's Spark jobs, 64 pages per task",
    "### Where a scan task's time goes",
    "## Compaction copy",
    "## Bytes on bookies",
    "## Tiering",
    "## Against the aims (ratio >= 1 meets it)",
    "## A 100 M-object catalog on a Spark cluster",
)


def tables(text: str) -> list[list[str]]:
    """The markdown tables of `text`, each as its lines."""
    found: list[list[str]] = []
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    return found


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    output = tmp_path_factory.mktemp("maintenance-bench") / "maintenance.md"
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench.maintenance_bench", "--quick", "--output", str(output)],
        cwd=ROOT,
        # The bench starts a plain cluster of its own, also under `make test-tls`.
        env={k: v for k, v in os.environ.items() if k not in (LEDGER_TLS_DIR_ENV, ZK_TLS_DIR_ENV)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        printed, _ = bench.communicate(timeout=QUICK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        bench.terminate()  # the benchmark stops its clusters on SIGTERM
        try:
            printed, _ = bench.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            bench.kill()
            printed, _ = bench.communicate()
        pytest.fail(f"--quick still running after {QUICK_TIMEOUT_S} s:\n{printed[-6000:]}")
    assert bench.returncode == 0, printed[-8000:]
    return output.read_text()


@pytest.mark.soak  # a whole quick bench run: 1-2 minutes, `make soak`
def test_quick_run_writes_every_section_with_well_formed_tables(quick_report: str) -> None:
    missing = [section for section in SECTIONS if section not in quick_report]
    assert not missing, missing
    positions = [quick_report.find(section) for section in SECTIONS]
    assert positions == sorted(positions), "sections out of order"
    found = tables(quick_report)
    assert len(found) >= len(SECTIONS), len(found)
    for lines in found:
        header, separator, *rows = lines
        assert re.fullmatch(r"\|(---\|)+", separator), lines
        assert rows, lines
        for row in rows:
            assert row.count("|") == header.count("|"), (header, row)
    assert not re.search(r"\b(nan|inf)\b", quick_report), "a figure was not measured"


@pytest.mark.soak  # a whole quick bench run: 1-2 minutes, `make soak`
def test_quick_run_scans_every_record_and_judges_the_five_aims(quick_report: str) -> None:
    records = f"{maintenance_bench.QUICK.records:,}"
    scan_table = next(t for t in tables(quick_report) if t[0].startswith("| pages per task"))
    assert "| 64 (default) | " in scan_table[2] and f"| {records} |" in scan_table[2], scan_table
    aims = next(t for t in tables(quick_report) if t[0] == "| aim | measured | ratio |")
    assert len(aims) == 2 + 5, aims
    for row in aims[2:]:
        assert re.fullmatch(r"\| .+ \| .+ \| \d+\.\d\d \|", row), row
    # The run deleted the workload's garbage: the bookies hold less than before.
    reclaim = next(t for t in tables(quick_report) if "ledger directories before" in t[2])
    assert "ledger directories after" in reclaim[4], reclaim
    assert size_bytes(reclaim[4]) < size_bytes(reclaim[2]), reclaim


def size_bytes(row: str) -> float:
    """The size in a `| what | 1,234.5 MiB |` row."""
    value, unit = row.rstrip(" |").rsplit("| ", 1)[1].split()
    return float(value.replace(",", "")) * {"KiB": 1 << 10, "MiB": 1 << 20}[unit]


@pytest.mark.parametrize(
    ("intervals", "covered"),
    [
        ([], 0.0),
        ([(0.0, 1.0)], 1.0),
        ([(0.0, 2.0), (1.0, 3.0)], 3.0),  # overlapping: counted once
        ([(0.0, 1.0), (2.0, 3.0)], 2.0),  # apart
        ([(0.0, 5.0), (1.0, 2.0)], 5.0),  # one inside another
    ],
)
def test_union_counts_overlapping_time_once(
    intervals: list[tuple[float, float]], covered: float
) -> None:
    assert maintenance_bench.union_s(intervals) == covered


def test_spark_jobs_of_the_job_sum_their_tasks_and_name_their_call_sites(tmp_path: Path) -> None:
    events = [
        {"Event": "SparkListenerApplicationStart", "App Name": "blobstore-maintain"},
        {
            "Event": "SparkListenerJobStart",
            "Job ID": 0,
            "Submission Time": 1_000,
            "Stage IDs": [0],
            "Properties": {"callSite.short": "sum at /x/spark.py:142"},
            "Stage Infos": [{"Details": ""}],
        },
        {
            "Event": "SparkListenerJobStart",
            "Job ID": 1,
            "Submission Time": 3_000,
            "Stage IDs": [1, 2],
            "Properties": {},
            "Stage Infos": [{"Details": "org.apache.spark.sql.Dataset.count(Dataset.scala:1)\n"}],
        },
        *[
            {
                "Event": "SparkListenerTaskEnd",
                "Stage ID": stage,
                "Task Info": {"Launch Time": launch, "Finish Time": finish},
            }
            for stage, launch, finish in ((0, 1_000, 1_500), (0, 1_000, 2_000), (2, 3_000, 3_250))
        ],
        {"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": 2_100},
        {"Event": "SparkListenerJobEnd", "Job ID": 1, "Completion Time": 3_300},
    ]
    (tmp_path / "app-1").write_text("\n".join(json.dumps(e) for e in events))
    other = [{"Event": "SparkListenerApplicationStart", "App Name": "another"}, events[1]]
    (tmp_path / "app-2").write_text("\n".join(json.dumps(e) for e in other))
    first, second = maintenance_bench.spark_jobs(tmp_path)
    assert (first.call_site, first.tasks, first.task_s) == ("sum at /x/spark.py:142", 2, 1.5)
    assert (first.started_s, first.ended_s) == (1.0, 2.1)
    assert (second.call_site, second.tasks, second.task_s) == ("Dataset.count", 1, 0.25)
    assert maintenance_bench.call_site_label("Dataset.count").startswith("`Dataset.count`")


def test_a_call_site_is_shown_as_its_function_and_statement(tmp_path: Path) -> None:
    source = tmp_path / "frames.py"
    source.write_text(
        "def ledger_stats(rows):\n"
        "    missing = (\n"
        "        rows.join(other)\n"
        '        .select("id")\n'
        "        .collect()\n"
        "    )\n"
    )
    label = maintenance_bench.call_site_label(f"collect at {source}:5")
    assert label == "`ledger_stats` (frames.py:5, collect): `rows.join(other) … .collect()`"
