"""The re-replication benchmark's report: every run in its row, the median run held
against the aim with the ratio (>= 1 meets it), and what the lost bookie held counted
from the ledgers' write sets."""

from __future__ import annotations

from bench import recovery_bench
from blobstore.ledger.ledger_metadata import LedgerMetadata

MB = 1_000_000


def _run(lost_mb: float, seconds: float, disk_mb_per_s: float) -> recovery_bench.Recovery:
    return recovery_bench.Recovery(
        payload_bytes=int(2 * lost_mb * MB),
        ledgers=24,
        lost_bytes=int(lost_mb * MB),
        copied_bytes=int(lost_mb * MB),
        seconds=seconds,
        disk_mb_per_s=disk_mb_per_s,
        ledgers_naming_lost=0,
        bad_copies=0,
    )


def test_report_rows_and_the_median_run_against_the_aim() -> None:
    runs = [_run(250, 1.0, 500), _run(250, 2.0, 500), _run(250, 0.5, 500)]
    assert recovery_bench.median_run(runs) is runs[0]
    text = recovery_bench.report(runs, (1.0, 2.0), "python -m bench.recovery_bench")
    assert "| 2 | 500 | 500 (24) | 250 | 250 | 2.00 | 125.0 | 25% | 0 | 0 |" in text, text
    aim = "| re-protection >= 50% of the disk's sequential bandwidth = 250 MB/s | 250.0 MB/s"
    assert f"{aim} (50%) | 1.00 |" in text, text
    assert text.startswith("# Re-replication benchmark\n"), text
    assert "## Reading the numbers" in text


def test_bytes_held_follow_the_write_sets() -> None:
    metadata = LedgerMetadata(
        ledger_id=7,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        password_hash="",
        ensembles=((0, ("a", "b", "c")), (3, ("a", "d", "c"))),
        state="CLOSED",
        last_entry_id=5,
    )
    # Entries 0-2 on (a,b) (b,c) (c,a); entries 3-5 on (a,d) (d,c) (c,a).
    assert recovery_bench.bytes_on(metadata, "b", 10) == 20
    assert recovery_bench.bytes_on(metadata, "a", 10) == 40
    assert recovery_bench.bytes_on(metadata, "d", 10) == 20
    assert recovery_bench.names(metadata, "d") and not recovery_bench.names(metadata, "e")
