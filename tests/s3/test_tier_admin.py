"""`blobstore admin tier add|ls|rm` against a real ZooKeeper, a file tier and an S3 tier
(this cluster's own gateway as the remote S3 endpoint): good definitions are probed and
stored, bad ones are one line and change nothing, a secret is never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from blobstore.tier.fs import TierFiles
from blobstore.tier.tiers import TierSpec
from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess
from tests.s3.conftest import S3Cluster


def admin(
    cluster: S3Cluster, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", cluster.zk, "tier", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "BLOBSTORE_CLUSTER_KEY_FILE": str(cluster.key_file),
            **(env or {}),
        },
    )


def listed(cluster: S3Cluster) -> list[dict[str, Any]]:
    result = admin(cluster, "ls", "--json")
    assert result.returncode == 0, result.stderr
    tiers: list[dict[str, Any]] = json.loads(result.stdout)
    return tiers


def names(cluster: S3Cluster) -> set[str]:
    return {t["name"] for t in listed(cluster)}


def one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def tier_name() -> Callable[[], str]:
    return lambda: f"T{uuid.uuid4().hex[:10]}"


def test_a_file_tier_is_added_listed_and_removed(
    s3_cluster: S3Cluster, tmp_path: Path, tier_name: Callable[[], str]
) -> None:
    name = tier_name()
    result = admin(
        s3_cluster, "add", name, f"file://{tmp_path}/cold/", "--storage-class", "glacier"
    )
    assert result.returncode == 0, result.stderr
    (tier,) = [t for t in listed(s3_cluster) if t["name"] == name]
    assert tier["uri"] == f"file://{tmp_path}/cold"
    assert tier["storage_classes"] == ["GLACIER"]
    assert list((tmp_path / "cold" / "probes").iterdir()) == []  # the probe was deleted
    # A class is bound to one tier only; a name is taken once.
    one_line_error(
        admin(s3_cluster, "add", tier_name(), f"file://{tmp_path}/b", "--storage-class", "GLACIER"),
        "already taken",
        "GLACIER",
    )
    one_line_error(admin(s3_cluster, "add", name, f"file://{tmp_path}/c"), "exists")
    assert admin(s3_cluster, "rm", name).returncode == 0
    assert name not in names(s3_cluster)
    one_line_error(admin(s3_cluster, "rm", name), "no tier named")


def test_a_tier_holding_segments_is_not_removed(
    s3_cluster: S3Cluster, tmp_path: Path, tier_name: Callable[[], str]
) -> None:
    name = tier_name()
    assert admin(s3_cluster, "add", name, f"file://{tmp_path}").returncode == 0
    files = TierFiles(TierSpec(name, f"file://{tmp_path}"))
    with files.open_output("seg-1") as out:
        out.write(b"x")
    one_line_error(admin(s3_cluster, "rm", name), "holds 1 segment", "not removed")
    assert name in names(s3_cluster)
    files.delete_segment("seg-1")
    assert admin(s3_cluster, "rm", name).returncode == 0


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("ftp://host/x", ("bad URI", "scheme")),
        ("file://relative/x", ("bad URI", "file:///absolute")),
        ("s3://Not_A_Bucket/x", ("bad URI", "bucket name")),
        ("/no/scheme", ("bad URI",)),
    ],
)
def test_bad_uris_change_nothing(
    s3_cluster: S3Cluster, uri: str, words: tuple[str, ...], tier_name: Callable[[], str]
) -> None:
    name = tier_name()
    one_line_error(admin(s3_cluster, "add", name, uri), name, *words)
    assert name not in names(s3_cluster)


def test_an_unknown_storage_class_is_refused(
    s3_cluster: S3Cluster, tmp_path: Path, tier_name: Callable[[], str]
) -> None:
    name = tier_name()
    one_line_error(
        admin(s3_cluster, "add", name, f"file://{tmp_path}", "--storage-class", "COLDEST"),
        "COLDEST",
    )
    assert name not in names(s3_cluster)


def s3_tier_args(gateway: GatewayProcess, bucket: str, access_key: str) -> list[str]:
    return [f"s3://{bucket}/tiered", "--endpoint", gateway.endpoint, "--access-key", access_key]


def test_an_s3_tier_keeps_its_secret_sealed(
    s3_cluster: S3Cluster,
    gateway: GatewayProcess,
    s3: Any,
    bucket: str,
    tmp_path: Path,
    tier_name: Callable[[], str],
) -> None:
    name = tier_name()
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET_KEY + "\n")
    args = s3_tier_args(gateway, bucket, ACCESS_KEY)
    result = admin(s3_cluster, "add", name, *args, "--secret-key-file", str(secret_file))
    assert result.returncode == 0, result.stderr
    shown = admin(s3_cluster, "ls")
    assert name in shown.stdout and ACCESS_KEY in shown.stdout
    for output in (shown.stdout, json.dumps(listed(s3_cluster))):
        assert SECRET_KEY not in output
    stored = s3.list_objects_v2(Bucket=bucket, Prefix="tiered/").get("Contents", [])
    # The probe wrote, read back and deleted its file (pyarrow may leave a directory
    # marker behind it: an empty object whose key ends with "/").
    assert [o["Key"] for o in stored if not o["Key"].endswith("/") or o["Size"]] == []
    assert admin(s3_cluster, "rm", name).returncode == 0


def test_wrong_credentials_or_a_missing_bucket_change_nothing(
    s3_cluster: S3Cluster, gateway: GatewayProcess, bucket: str, tier_name: Callable[[], str]
) -> None:
    env = {"BLOBSTORE_TIER_SECRET_KEY": "not-the-secret-key"}
    name = tier_name()
    result = admin(s3_cluster, "add", name, *s3_tier_args(gateway, bucket, ACCESS_KEY), env=env)
    one_line_error(result, f"tier {name}", "nothing was changed")
    assert "not-the-secret-key" not in result.stderr
    env = {"BLOBSTORE_TIER_SECRET_KEY": SECRET_KEY}
    args = s3_tier_args(gateway, "no-such-bucket-here", ACCESS_KEY)
    one_line_error(admin(s3_cluster, "add", name, *args, env=env), f"tier {name}")
    assert name not in names(s3_cluster)


def lifecycle(s3: Any, bucket: str, storage_class: str) -> None:
    rule = {
        "ID": "t",
        "Status": "Enabled",
        "Filter": {},
        "Transitions": [{"Days": 60, "StorageClass": storage_class}],
    }
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [rule]})


def test_a_rule_names_a_tier_or_a_class_bound_to_one(
    s3_cluster: S3Cluster, s3: Any, bucket: str, tmp_path: Path, tier_name: Callable[[], str]
) -> None:
    name = tier_name()
    for storage_class in (name, "ONEZONE_IA"):
        with pytest.raises(ClientError) as caught:
            lifecycle(s3, bucket, storage_class)
        assert caught.value.response["Error"]["Code"] == "InvalidStorageClass", storage_class
    args = ("add", name, f"file://{tmp_path}", "--storage-class", "ONEZONE_IA")
    assert admin(s3_cluster, *args).returncode == 0
    try:
        for storage_class in (name, "ONEZONE_IA"):
            lifecycle(s3, bucket, storage_class)
            stored = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
            assert stored[0]["Transitions"][0]["StorageClass"] == storage_class
    finally:
        s3.delete_bucket_lifecycle(Bucket=bucket)
        assert admin(s3_cluster, "rm", name).returncode == 0
