"""The ledger benchmark's aims table: each row shows what was measured, in its unit, and
the ratio to the aim (>= 1 meets it)."""

from __future__ import annotations

import math
import os

from bench import ledger_bench
from bench.disk_probes import DiskLimits

KIB, MIB = 1024, 1024 * 1024
# Buffered write+fdatasync 320 MB/s, O_DIRECT 160 MB/s (a slow one, to tell them apart).
LIMITS = ledger_bench.Limits(DiskLimits(1_000.0, 320.0, 160.0), 2_000.0, [])


def _result(label: str, entry_bytes: int, adds: int, latency_s: float) -> ledger_bench.Result:
    return ledger_bench.Result(
        label=label,
        ensemble="E3/WQ2/AQ2",
        entry_bytes=entry_bytes,
        window=16,
        adds=adds,
        seconds=2.0,
        latencies_s=[latency_s] * 100,
        read_mb_per_s=0.0,
        client_cpu_s=0.0,
    )


def test_aims_show_measurements_in_their_units_and_ratios() -> None:
    rows = ledger_bench.aims_table(
        [
            _result("256", KIB, 30_000, 0.020),
            _result("paced 5,000/s", KIB, 10_000, 0.004),
            _result("16", MIB, 200, 0.1),
        ],
        LIMITS,
    )
    table = "\n".join(rows)
    assert "| 1 KiB adds/s >= 10,000 | 15,000 /s | 1.50 |" in table, table
    assert "| 1 KiB p99 <= 10 ms at paced 5,000/s (ratio = aim / measured) | 4.00 ms | 2.50 |" in (
        table
    ), table
    # 1 MiB adds go to the direct logs: the aim is 70 % of O_DIRECT's 160 MB/s / WQ 2.
    assert "= 56 MB/s | 105 MB/s | 1.87 |" in table, table


def test_each_row_is_bounded_by_how_its_adds_are_written() -> None:
    """Small adds are journaled (buffered write+fdatasync), large ones written once with
    O_DIRECT; where O_DIRECT is refused, the bookies write large adds buffered too."""
    rows = [_result("256", KIB, 30_000, 0.02), _result("16", MIB, 200, 0.1)]
    rows += [ledger_bench.Result(**{**vars(r), "label": "single bookie"}) for r in rows]
    table = "\n".join(ledger_bench.appends_table(rows, LIMITS))
    # 15,000 adds/s of 1 KiB (15 x the fsync rate) x WQ 2 over 320 MB/s; 100 MiB/s x 2
    # over 160 MB/s.
    assert "| 15.0x | journals x2 | 0.10 |" in table, table
    assert "| direct logs x2 | 1.31 |" in table, table
    refused = ledger_bench.Limits(DiskLimits(1_000.0, 320.0, None), 2_000.0, [])
    assert refused.bound_mb_per_s(MIB) == 320.0 and LIMITS.bound_mb_per_s(MIB) == 160.0
    assert LIMITS.bound_mb_per_s(ledger_bench.DIRECT_WRITE_MIN_BYTES - 1) == 320.0


def test_rows_at_the_aims_rate_are_marked_and_repeated_below_saturation() -> None:
    rows = ledger_bench.aims_table([_result("paced 10,000/s", KIB, 20_000, 0.008)], LIMITS)
    assert (
        "| 1 KiB p99 <= 10 ms at paced 10,000/s (the aim's rate) (ratio = aim / measured) "
        "| 8.00 ms | 1.25 |"
    ) in "\n".join(rows)
    assert ledger_bench.paced_rates(22_311) == [5_600, 10_000, 10_000, 10_000, 11_200, 16_700]
    # The aim is judged on the median of the repeated rows at its rate.
    repeats = [_result("paced 10,000/s", KIB, 20_000, s) for s in (0.012, 0.007, 0.005)]
    table = "\n".join(ledger_bench.aims_table(repeats, LIMITS))
    assert (
        "| 1 KiB p99 <= 10 ms at paced 10,000/s, median of the 3 rows (12.00, 7.00, 5.00 ms) "
        "(ratio = aim / measured) | 7.00 ms | 1.43 |"
    ) in table, table
    # A fraction of saturation that rounds to the aim's rate is one more such row.
    assert ledger_bench.paced_rates(20_000).count(10_000) == 4
    repeats.append(_result("paced 10,000/s", KIB, 20_000, 0.100))
    table = "\n".join(ledger_bench.aims_table(repeats, LIMITS))
    assert "median of the 4 rows (12.00, 7.00, 5.00, 100.00 ms)" in table, table
    assert "| 9.50 ms | 1.05 |" in table, table
    # At or past saturation the aim's rate would measure a backlog, not a latency.
    assert ledger_bench.paced_rates(9_000) == [2_200, 4_500, 6_800]


def test_round_trip_probe_counts_both_processes_and_restores_affinity() -> None:
    """The machine-limits probe between two processes: turns are counted, both sides'
    CPU is charged, and pinning for the one-CPU variant does not outlive the probe."""
    affinity = os.sched_getaffinity(0)
    for same_cpu in (False, True):
        probe = ledger_bench.process_round_trip(0.3, same_cpu=same_cpu)
        assert probe.per_s > 100
        # A turn is at least a send and a receive on each side: never free; two
        # processes spend at most twice its time (the child's CPU is read in 10 ms ticks).
        turns = probe.per_s * 0.3
        assert 0 < probe.cpu_us < 2e6 / probe.per_s + 0.01e6 / turns
        assert os.sched_getaffinity(0) == affinity


def test_paced_rows_show_the_journals_floor_and_the_machines_cpus() -> None:
    row = _result("paced 5,000/s + 1 MiB adds, 100/s: 105 MB/s", KIB, 10_000, 0.004)
    row.journal_fsync_p99_s = 0.005
    row.machine_busy_pct = 151.4
    idle = _result("paced 5,000/s (direct writes off)", KIB, 10_000, 0.002)
    table = "\n".join(ledger_bench.paced_section([row, idle]))
    assert "| paced 5,000/s + 1 MiB adds, 100/s: 105 MB/s | 4.00 | 4.00 | 5 | 151 % |" in table
    assert "| paced 5,000/s (direct writes off) | 2.00 | 2.00 | - | - |" in table, table
    cpus = os.cpu_count() or 1
    # Half the ticks idle: half of every CPU busy.
    assert ledger_bench.busy_between((0, 0), (1000, 500)) == 50.0 * cpus
    assert math.isnan(ledger_bench.busy_between((5, 5), (5, 5)))  # no tick between
    ticks, idle_ticks = ledger_bench.machine_cpu_ticks()
    assert ticks > idle_ticks > 0
