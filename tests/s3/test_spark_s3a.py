"""Spark s3a against the gateway: PySpark 3.5 with hadoop-aws 3.3.1 writes a Parquet
dataset (multipart upload, the file committer's copy-and-delete renames), reads it back,
and reads a CSV written with boto3. Counts and values must match."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess

JARS_DIR = Path(__file__).resolve().parents[2] / ".deps" / "jars"
ROWS = 400_000  # ~ 20 MiB of Parquet in one file: several 5 MiB parts


def test_spark_s3a_parquet_round_trip_and_boto3_csv(
    gateway: GatewayProcess, s3: Any, bucket: str, tmp_path: Path
) -> None:
    assert (JARS_DIR / "hadoop-aws-3.3.1.jar").exists(), "run `make setup` for the s3a jars"
    people = [("ada", 36), ("grace", 85), ("linus", 54), ("barbara", 79)]
    csv = "name,age\n" + "".join(f"{name},{age}\n" for name, age in people)
    s3.put_object(Bucket=bucket, Key="input/people.csv", Body=csv.encode())

    result = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("spark_s3a_job.py")),
            gateway.endpoint,
            ACCESS_KEY,
            SECRET_KEY,
            bucket,
            str(ROWS),
            str(JARS_DIR),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])

    assert [tuple(row) for row in report["csv_rows"]] == sorted(people)
    assert report["count"] == ROWS
    assert report["id_sum"] == ROWS * (ROWS - 1) // 2
    assert report["distinct_digests"] == ROWS
    assert {int(k): v for k, v in report["per_bucket"].items()} == {
        b: len(range(b, ROWS, 7)) for b in range(7)
    }

    # The committed dataset is visible to plain S3 listing, with a multipart data file.
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="output/dataset.parquet/")
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert "output/dataset.parquet/_SUCCESS" in keys
    data_files = [o for o in listed["Contents"] if o["Key"].endswith(".parquet")]
    assert len(data_files) == 1
    assert data_files[0]["Size"] > 5 * 1024 * 1024
    assert not any("_temporary" in key for key in keys)
