"""Races between a maintenance run and S3 requests, made deterministic: the run is paused
at a named point (tests/maintenance/races.py), the requests are made while it stands
there, then it goes on. Whatever the requests did, every object S3 acknowledged reads
back byte-identical after the run (and after a further run that deletes what the first
left), and a request that was refused left nothing behind.

The workload (`sparse_ledgers`) leaves LEDGERS closed ledgers of 11 objects with 4 live
in each: a run compacts each of them, then condemns it (every holder its scan saw was
moved) and, with `--grace 0`, deletes it after a second scan.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from kazoo.client import KazooClient

from blobstore.ledger.ledger_metadata import STATE_CLOSED
from tests.maintenance.conftest import ENTRY_SIZE_BYTES, MaintenanceCluster
from tests.maintenance.races import (
    KEPT,
    LEDGER_OBJECTS,
    LEDGERS,
    SEAL_BYTES,
    absent,
    assert_compacted,
    condemned_ledgers,
    error_code,
    kept_key,
    ledger_state,
    part_ledgers,
    paused_run,
    record_ledgers,
    sparse_ledgers,
)
from tests.maintenance.workload import OBJECT_BYTES, Expected
from tests.waiting import wait_until

BUCKET = "races"
# No grace period (a run looks twice and deletes); no lifecycle rules to apply and no
# bookie GC pass to wait for.
RUN_ARGS = ("--grace", "0", "--only", "gc,compact", "--no-bookie-gc")
LEDGER_CLOSED_WAIT_S = 30.0


def _once(cluster: MaintenanceCluster) -> Any:
    """A client that does not retry: a refusal (SlowDown) comes back as it is."""
    return cluster.gateway.client(retries={"max_attempts": 1, "mode": "standard"})


def test_gets_while_a_run_copies_and_swaps_read_the_right_bytes(
    cluster: MaintenanceCluster, tmp_path: Path
) -> None:
    """GET every object while the run stands after its copies (every record names its
    old ledger, the new ledgers exist), then after its first swap (one record names a
    new ledger), then after the run (the old ledgers deleted)."""
    cluster.start()
    s3 = cluster.s3()
    expected = sparse_ledgers(s3, BUCKET, random.Random(4))
    points = ("compact_copied", "compact_swapped")

    with paused_run(cluster, tmp_path / "run", points, *RUN_ARGS) as run:
        run.wait_at("compact_copied")
        assert expected.mismatches(s3) == []
        run.resume("compact_copied")
        run.wait_at("compact_swapped")
        assert expected.mismatches(s3) == []
        report = run.finish()

    assert_compacted(report)
    assert report["compacted_ledgers"] == LEDGERS, report
    assert report["records_swapped"] == LEDGERS * len(KEPT), report
    assert report["ledgers_deleted"] >= LEDGERS, report
    assert expected.mismatches(s3) == []


def test_an_overwrite_and_a_delete_during_compaction_skip_their_swaps(
    cluster: MaintenanceCluster, tmp_path: Path
) -> None:
    """While the run stands after its copies, overwrite one object of a compacted ledger
    and delete another: the run skips both swaps (the copies are garbage in the new
    ledger), and a further run reclaims what they left."""
    cluster.start()
    s3 = cluster.s3()
    rng = random.Random(3)
    expected = sparse_ledgers(s3, BUCKET, rng)
    overwritten, deleted = kept_key(0, KEPT[0]), kept_key(0, KEPT[1])

    with paused_run(cluster, tmp_path / "run", ("compact_copied",), *RUN_ARGS) as run:
        run.wait_at("compact_copied")
        expected.put(s3, BUCKET, overwritten, rng.randbytes(OBJECT_BYTES))
        s3.delete_object(Bucket=BUCKET, Key=deleted)
        del expected.objects[BUCKET][deleted]
        report = run.finish()

    assert_compacted(report)
    assert report["swaps_skipped"] >= 2, report
    assert report["records_swapped"] == LEDGERS * len(KEPT) - 2, report
    assert expected.mismatches(s3) == []
    assert absent(s3, BUCKET, deleted)

    again = cluster.report(*RUN_ARGS)

    assert_compacted(again)  # the new ledger holding the two garbage copies
    assert again["ledgers_deleted"] >= 2, again  # it and the first, now unreferenced
    assert expected.mismatches(s3) == []
    assert absent(s3, BUCKET, deleted)


def test_a_copy_during_compaction_keeps_its_ledger_and_a_copy_of_a_condemned_one_is_refused(
    cluster: MaintenanceCluster, zk_client: KazooClient, tmp_path: Path
) -> None:
    """1. The run copies ledger L (the first of the workload) and stands there.
    2. COPY source -> copy: the copy names source's entries in L, and the run's scan
       never saw it.
    3. The run swaps source (and L's other holders) to the new ledger, finds every holder
       of L it scanned moved, and condemns L; it stands before its second look.
    4. COPY copy -> second: it would name L anew: refused (SlowDown), nothing written.
    5. The second look finds the copy naming L: L is absolved, not deleted.
    (A further run compacts L, the copy its only holder, as the multipart test's does.)"""
    cluster.start()
    s3 = cluster.s3()
    expected = sparse_ledgers(s3, BUCKET, random.Random(1))
    source = kept_key(0, KEPT[0])
    (ledger,) = record_ledgers(cluster.zk, BUCKET, source)
    points = ("compact_copied", "second_look")

    with paused_run(cluster, tmp_path / "run", points, *RUN_ARGS) as run:
        run.wait_at("compact_copied")
        _copy(s3, expected, source, "copy")
        assert record_ledgers(cluster.zk, BUCKET, "copy") == {ledger}
        run.resume("compact_copied")
        run.wait_at("second_look")
        assert ledger in condemned_ledgers(zk_client)
        with pytest.raises(ClientError) as refused:
            _copy(_once(cluster), expected, "copy", "second")
        assert error_code(refused.value) == "SlowDown"
        assert absent(s3, BUCKET, "second")
        assert expected.mismatches(s3) == []
        report = run.finish()

    assert_compacted(report)
    assert report["absolved"] >= 1, report
    assert ledger not in condemned_ledgers(zk_client)
    assert ledger_state(zk_client, ledger) == STATE_CLOSED
    assert ledger not in record_ledgers(cluster.zk, BUCKET, source)  # swapped
    assert record_ledgers(cluster.zk, BUCKET, "copy") == {ledger}
    assert expected.mismatches(s3) == []
    assert absent(s3, BUCKET, "second")


def _copy(s3: Any, expected: Expected, source: str, key: str) -> None:
    s3.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": source})
    expected.objects[BUCKET][key] = expected.objects[BUCKET][source]


# ------------------------------------------------------------------ multipart

PART_BYTES_MIN = 64 * 1024  # the gateway's, so that 96 KiB parts may be completed
COMPLETED, REFUSED = "mpu/completed", "mpu/refused"
# What fills ledger P, in order: objects (kept ones marked), and parts (key, number).
P_ITEMS: tuple[tuple[str, int], ...] = (
    ("p/00", 0),
    ("p/01", 0),
    (COMPLETED, 1),
    ("p/02", 0),
    ("p/03", 0),
    (COMPLETED, 2),
    ("p/04", 0),
    (REFUSED, 1),
    ("p/05", 0),
    ("p/06", 0),
    ("p/07", 0),
)
P_KEPT = ("p/00", "p/03", "p/06")
assert len(P_ITEMS) == LEDGER_OBJECTS, "the last item takes P past 1 MiB: P is closed"
assert SEAL_BYTES % ENTRY_SIZE_BYTES == 0, "the seal ends its ledger on an entry boundary"


def test_a_completion_of_parts_in_a_ledger_being_compacted_reads_back(
    cluster: MaintenanceCluster, zk_client: KazooClient, tmp_path: Path
) -> None:
    """1. The run stands before its scan tasks read anything; it has listed the
       bucket's uploads. Two uploads begin; a seal closes the gateway's ledger, and
       ledger P fills with 8 objects and 3 parts of the uploads (P_ITEMS); 5 of the
       objects are deleted. P is closed.
    2. The scan sees P holding 3 live objects and nothing else (the uploads were not
       listed): P is compacted, not pinned. The run stands after its copies.
    3. CompleteMultipartUpload of the first upload: its object names P.
    4. The run swaps the 3 objects and condemns P; it stands before its second look.
    5. CompleteMultipartUpload of the second upload would name P anew: refused.
    6. The second look finds the completed object and the open upload naming P: P is
       absolved. The second upload is aborted; a further run compacts P (the completed
       object its only holder) and deletes it."""
    cluster.bookies.extend(cluster.start_bookies(3))
    cluster.start_gateway("gateway", env={"BLOBSTORE_PART_BYTES_MIN": str(PART_BYTES_MIN)})
    s3 = cluster.s3()
    rng = random.Random(2)
    expected = Expected()
    s3.create_bucket(Bucket=BUCKET)
    expected.put(s3, BUCKET, "base", rng.randbytes(OBJECT_BYTES))
    points = ("scan_task", "compact_copied", "second_look")

    with paused_run(cluster, tmp_path / "run", points, *RUN_ARGS) as run:
        run.wait_at("scan_task")
        uploads, parts = _fill_ledger_p(s3, expected, rng)
        (p_ledger,) = part_ledgers(cluster.zk, BUCKET, uploads[COMPLETED])
        assert part_ledgers(cluster.zk, BUCKET, uploads[REFUSED]) == {p_ledger}
        assert all(record_ledgers(cluster.zk, BUCKET, key) == {p_ledger} for key in P_KEPT)
        wait_until(
            lambda: ledger_state(zk_client, p_ledger) == STATE_CLOSED,
            LEDGER_CLOSED_WAIT_S,
            message=f"ledger {p_ledger} was never closed",
        )
        run.resume("scan_task")
        run.wait_at("compact_copied")
        _complete(s3, expected, uploads, parts, COMPLETED)
        assert expected.mismatches(s3) == []
        run.resume("compact_copied")
        run.wait_at("second_look")
        assert p_ledger in condemned_ledgers(zk_client)
        with pytest.raises(ClientError) as refused:
            _complete(_once(cluster), expected, uploads, parts, REFUSED)
        assert error_code(refused.value) == "SlowDown"
        assert absent(s3, BUCKET, REFUSED)
        report = run.finish()

    assert_compacted(report)
    assert report["absolved"] >= 1, report
    assert p_ledger not in condemned_ledgers(zk_client)
    assert all(p_ledger not in record_ledgers(cluster.zk, BUCKET, key) for key in P_KEPT)
    assert record_ledgers(cluster.zk, BUCKET, COMPLETED) == {p_ledger}
    assert expected.mismatches(s3) == []
    s3.abort_multipart_upload(Bucket=BUCKET, Key=REFUSED, UploadId=uploads[REFUSED])

    again = cluster.report(*RUN_ARGS)

    assert_compacted(again)
    assert again["ledgers_deleted"] >= 1, again
    assert p_ledger not in record_ledgers(cluster.zk, BUCKET, COMPLETED)
    assert ledger_state(zk_client, p_ledger) is None
    assert expected.mismatches(s3) == []
    assert absent(s3, BUCKET, REFUSED)


Parts = dict[str, list[tuple[int, bytes, str]]]  # key -> (part number, bytes, ETag)


def _fill_ledger_p(s3: Any, expected: Expected, rng: random.Random) -> tuple[dict[str, str], Parts]:
    """Step 1 of the multipart race: the uploads (key -> upload id) and their parts."""
    uploads = {
        key: s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        for key in (COMPLETED, REFUSED)
    }
    expected.put(s3, BUCKET, "seal", rng.randbytes(SEAL_BYTES))
    parts: Parts = {key: [] for key in uploads}
    for key, part_number in P_ITEMS:
        body = rng.randbytes(OBJECT_BYTES)
        if not part_number:
            expected.put(s3, BUCKET, key, body)
            continue
        answer = s3.upload_part(
            Bucket=BUCKET, Key=key, UploadId=uploads[key], PartNumber=part_number, Body=body
        )
        parts[key].append((part_number, body, answer["ETag"]))
    for key, part_number in P_ITEMS:
        if not part_number and key not in P_KEPT:
            s3.delete_object(Bucket=BUCKET, Key=key)
            del expected.objects[BUCKET][key]
    return uploads, parts


def _complete(s3: Any, expected: Expected, uploads: dict[str, str], parts: Parts, key: str) -> None:
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key=key,
        UploadId=uploads[key],
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag} for n, _, etag in parts[key]]},
    )
    expected.objects[BUCKET][key] = b"".join(body for _, body, _ in parts[key])
