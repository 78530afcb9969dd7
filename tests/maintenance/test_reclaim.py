"""One `blobstore maintain` gives back the space of deleted, overwritten and aborted data:
after it and the bookies' GC, the bookies' ledger directories hold about the live bytes
times the write quorum, and every object reads back byte-identical."""

from __future__ import annotations

import json
import random

from tests.maintenance.conftest import MaintenanceCluster
from tests.maintenance.workload import delete_heavy, shared_copies_bytes

WRITE_QUORUM = 2
SLACK_BYTES_PER_BOOKIE = 64 * 1024 * 1024
# The bound the issue sets: 1.1 x live x WQ, plus 64 MiB per bookie. The test also checks
# a much tighter bound (most garbage really went), so a run that frees nothing fails.


def test_one_run_reclaims_deleted_overwritten_and_aborted_bytes(
    cluster: MaintenanceCluster,
) -> None:
    cluster.start()
    s3 = cluster.s3()
    expected = delete_heavy(s3, "reclaim", random.Random(33), 160)
    live = expected.live_bytes() - shared_copies_bytes(expected)

    report = cluster.report("--grace", "0")

    assert report["outcome"] == "ok" and not report["errors"], report
    assert report["ledgers_deleted"] > 0 and report["records_swapped"] > 0, report
    assert report["bytes_reclaimed"] >= 15 * 1024 * 1024, report  # at least the aborted parts
    after = sum(cluster.ledger_dir_bytes())
    bound = 1.1 * live * WRITE_QUORUM + SLACK_BYTES_PER_BOOKIE * len(cluster.bookies)
    assert after <= bound, (after, bound)
    assert after <= 1.35 * live * WRITE_QUORUM, (
        after,
        live,
        cluster.ledger_dir_bytes(),
        json.dumps(report),
    )
    assert expected.mismatches(s3) == []
