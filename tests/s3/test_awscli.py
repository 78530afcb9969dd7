"""The AWS CLI against the gateway: `aws s3 cp --recursive` and `aws s3 sync` of a tree
with a 100 MiB file (multipart), then `aws s3api` calls; every byte compared."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess

BIG_FILE_BYTES = 100 * 1024 * 1024


def aws(gateway: GatewayProcess, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(cwd / "aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(cwd / "aws-credentials"),
            "AWS_PAGER": "",
        }
    )
    aws_bin = shutil.which("aws", path=str(Path(sys.executable).parent)) or "aws"
    return subprocess.run(
        [aws_bin, "--endpoint-url", gateway.endpoint, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )


def digest_tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_aws_cli_cp_recursive_sync_and_s3api(gateway: GatewayProcess, tmp_path: Path) -> None:
    rng = random.Random(5)
    tree = tmp_path / "tree"
    (tree / "docs" / "deep").mkdir(parents=True)
    (tree / "big.bin").write_bytes(rng.randbytes(BIG_FILE_BYTES))
    for index in range(12):
        (tree / "docs" / f"note-{index}.txt").write_bytes(rng.randbytes(rng.randrange(0, 70_000)))
    (tree / "docs" / "deep" / "empty").write_bytes(b"")
    (tree / "docs" / "deep" / "name with spaces & ünïcode.txt").write_text("hello\n")
    bucket = f"cli-{rng.randrange(1 << 40):x}"

    made = aws(gateway, "s3", "mb", f"s3://{bucket}", cwd=tmp_path)
    assert made.returncode == 0, made.stderr

    copied = aws(
        gateway,
        "s3",
        "cp",
        "--recursive",
        "--only-show-errors",
        str(tree),
        f"s3://{bucket}/tree/",
        cwd=tmp_path,
    )
    assert copied.returncode == 0, copied.stderr

    head = aws(
        gateway, "s3api", "head-object", "--bucket", bucket, "--key", "tree/big.bin", cwd=tmp_path
    )
    assert head.returncode == 0, head.stderr
    head_json = json.loads(head.stdout)
    assert head_json["ContentLength"] == BIG_FILE_BYTES
    assert head_json["ETag"].strip('"').endswith(f"-{BIG_FILE_BYTES // (8 * 1024 * 1024) + 1}")

    back = tmp_path / "back"
    downloaded = aws(
        gateway,
        "s3",
        "cp",
        "--recursive",
        "--only-show-errors",
        f"s3://{bucket}/tree/",
        str(back),
        cwd=tmp_path,
    )
    assert downloaded.returncode == 0, downloaded.stderr
    assert digest_tree(back) == digest_tree(tree)

    # sync uploads only what changed, and --delete removes what is gone.
    (tree / "docs" / "note-0.txt").write_bytes(b"changed and longer than before " * 100)
    (tree / "docs" / "note-1.txt").unlink()
    (tree / "docs" / "new.txt").write_text("new file\n")
    synced = aws(gateway, "s3", "sync", "--delete", str(tree), f"s3://{bucket}/tree/", cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    uploads = [line for line in synced.stdout.splitlines() if line.startswith("upload:")]
    deletes = [line for line in synced.stdout.splitlines() if line.startswith("delete:")]
    assert len(uploads) == 2, synced.stdout
    assert len(deletes) == 1, synced.stdout

    mirror = tmp_path / "mirror"
    pulled = aws(gateway, "s3", "sync", f"s3://{bucket}/tree/", str(mirror), cwd=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert digest_tree(mirror) == digest_tree(tree)

    listed = aws(
        gateway,
        "s3api",
        "list-objects-v2",
        "--bucket",
        bucket,
        "--prefix",
        "tree/docs/",
        "--delimiter",
        "/",
        cwd=tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    assert [p["Prefix"] for p in listing["CommonPrefixes"]] == ["tree/docs/deep/"]
    assert len(listing["Contents"]) == 12  # note-0 .. note-11 minus note-1, plus new.txt

    missing = aws(
        gateway,
        "s3api",
        "get-object",
        "--bucket",
        bucket,
        "--key",
        "nope",
        str(tmp_path / "x"),
        cwd=tmp_path,
    )
    assert missing.returncode != 0
    assert "NoSuchKey" in missing.stderr

    not_empty = aws(gateway, "s3", "rb", f"s3://{bucket}", cwd=tmp_path)
    assert not_empty.returncode != 0
    assert "BucketNotEmpty" in not_empty.stderr
    removed = aws(gateway, "s3", "rb", "--force", f"s3://{bucket}", cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
