"""The bookie benchmark's report: each entry size is read against the way a bookie writes
it (journal, buffered with fdatasync; direct log, O_DIRECT)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import bookie_bench
from bench.disk_probes import DiskLimits


def _row(size: int, mb_per_s: float) -> dict[str, float]:
    return {
        "size": size,
        "window": 256,
        "adds_per_s": mb_per_s * 1e6 / size,
        "mb_per_s": mb_per_s,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "p999_ms": 3.0,
        "adds_per_fsync": 10.0,
        "fsync_ms": 1.5,
        "bookie_cpu_us_per_add": 50.0,
    }


def test_small_adds_against_buffered_large_against_o_direct(tmp_path: Path) -> None:
    report = tmp_path / "bookie.md"
    args = argparse.Namespace(connections=4, seconds=8.0)
    disk = DiskLimits(1_000.0, 300.0, 1_200.0)
    bookie_bench.write_report(report, args, disk, [_row(1024, 30.0), _row(1 << 20, 600.0)])
    text = report.read_text()
    assert "| sequential O_DIRECT, 1 MiB blocks, preallocated | 1,200 MB/s |" in text, text
    assert "| journal | 0.10 |" in text, text  # 30 MB/s over buffered 300
    assert "| direct log | 0.50 |" in text, text  # 600 MB/s over O_DIRECT 1,200
    refused = tmp_path / "refused.md"
    bookie_bench.write_report(
        refused, args, DiskLimits(1_000.0, 300.0, None), [_row(1 << 20, 600.0)]
    )
    assert "| refused |" in refused.read_text() and "| direct log | 2.00 |" in refused.read_text()
