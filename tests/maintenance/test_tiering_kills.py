"""A maintenance run killed with -9 while it tiers objects, then run again: nothing is
lost, every object reads back from exactly one place (the bookies until its record is
swapped, the tier after), and the killed run's segment is removed by the next run when
no record names it.

Three kills, each on new objects: after the segment is written (`tier_written`), after
it is verified (`tier_verified`), and in the middle of the swaps (`tier_swapped`, the
second: two records name the segment, the others still the bookies). `make test` runs
the swap's kill (a segment half named: the hardest case); `make soak` all three.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from tests.maintenance.conftest import MaintenanceCluster
from tests.maintenance.killing import rerun, run_killed
from tests.maintenance.test_tiering import (
    BUCKET,
    TIER_RULES,
    add_file_tier,
    later_text,
    start,
)

# (hook, the killed run's segments the rerun removes: those no record names)
KILLS = (
    ("tier_written=kill", 1),
    ("tier_verified=kill", 1),
    ("tier_swapped=kill:2", 0),
)
OBJECTS_PER_ROUND = 4
DRIVER_SESSION_S = 4  # the least maintain takes: a killed run's lock frees soonest


def read_all(s3: Any, expected: dict[str, bytes]) -> dict[str, str]:
    """Key -> storage class, after checking every object reads back byte-identical."""
    classes = {}
    for key, body in expected.items():
        got = s3.get_object(Bucket=BUCKET, Key=key)
        assert got["Body"].read() == body, key
        classes[key] = got.get("StorageClass", "STANDARD")
    return classes


SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "20261129"))


def test_killed_tiering_loses_nothing_and_leaves_no_orphan(
    cluster: MaintenanceCluster, tmp_path: Path
) -> None:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    tiering_survives_kills(cluster, tmp_path, random.Random(SEED), [KILLS[2]])


@pytest.mark.soak
def test_soak_every_tiering_kill(cluster: MaintenanceCluster, tmp_path: Path) -> None:
    tiering_survives_kills(cluster, tmp_path, random.Random(SEED), list(KILLS))


def tiering_survives_kills(
    cluster: MaintenanceCluster,
    tmp_path: Path,
    rng: random.Random,
    kills: list[tuple[str, int]],
) -> None:
    s3 = start(cluster)
    tier_dir = tmp_path / "cold"
    add_file_tier(cluster, tier_dir)
    s3.put_bucket_lifecycle_configuration(
        Bucket=BUCKET, LifecycleConfiguration={"Rules": TIER_RULES}
    )
    args = ("--grace", "0", "--now", later_text(), "--zk-session-timeout", str(DRIVER_SESSION_S))
    expected: dict[str, bytes] = {}
    for round_index, (hook, removed) in enumerate(kills):
        for n in range(OBJECTS_PER_ROUND):
            key, body = f"r{round_index}/k{n}", rng.randbytes(rng.choice([10, 5000, 200_000]))
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            expected[key] = body
        log = tmp_path / f"killed-{round_index}.log"
        status = run_killed(cluster, hook, args, log)
        assert status != 0, log.read_text()[-3000:]
        classes = read_all(s3, expected)
        new = [classes[f"r{round_index}/k{n}"] for n in range(OBJECTS_PER_ROUND)]
        swapped = 2 if hook.startswith("tier_swapped") else 0
        assert new.count("GLACIER") == swapped, (hook, new)

        killed_segments = segments(tier_dir)
        report = rerun(cluster, args)
        assert report["errors"] == [], report["errors"]
        assert report["segments_removed"] == removed, (hook, report)
        assert report["objects_tiered"] == OBJECTS_PER_ROUND - swapped, (hook, report)
        assert set(read_all(s3, expected).values()) == {"GLACIER"}
        # What is on the tier is what the report says was removed and written (a
        # segment the kill left half named may be rewritten: it is sparse).
        written = report["segments_written"]
        assert len(segments(tier_dir)) == len(killed_segments) - removed + written, hook


def segments(tier_dir: Path) -> list[Path]:
    return sorted((tier_dir / "segments").iterdir())
