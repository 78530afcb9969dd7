"""rclone against the gateway, configured by environment only (no config file): buckets
with mkdir/rmdir, a tree with small files, odd names and a 40 MiB file (multipart upload
in 5 MiB chunks) copied up, verified with `rclone check` (MD5 hashes, then downloaded
bytes), listed with lsjson/ls/size, read with cat (whole and ranged), copied server side
(multipart copy), synced after local changes, then deleted and purged. Over https (the
gateway's self-signed certificate given with `--ca-cert`), a tree with a multipart file
is copied up, checked with hashes and downloads, and read back with cat."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess, access_log

MIB = 1024 * 1024
BIG_FILE_BYTES = 40 * MIB
CHUNK = "5M"
REMOTE = "blobstore"
Rclone = Callable[..., subprocess.CompletedProcess[bytes]]
# Keys that need care in URLs and signatures.
ODD_NAMES = [
    "docs/deep/name with spaces & ünïcode.txt",
    "docs/a+b=c%20d.txt",
    "docs/q?mark#hash;semi.txt",
    "docs/tilde~star*paren(1)!.txt",
]


def rclone_env(gateway: GatewayProcess, home: Path) -> dict[str, str]:
    prefix = f"RCLONE_CONFIG_{REMOTE.upper()}_"
    # Nothing from the caller's rclone or AWS settings: an AWS_CA_BUNDLE, for one, makes
    # rclone 1.60 refuse to build its HTTP client.
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("RCLONE_", "AWS_"))
    }
    env.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "RCLONE_CONFIG": "",  # no config file: the remote is defined below
            f"{prefix}TYPE": "s3",
            f"{prefix}PROVIDER": "Other",
            f"{prefix}ENDPOINT": gateway.endpoint,
            f"{prefix}ACCESS_KEY_ID": ACCESS_KEY,
            f"{prefix}SECRET_ACCESS_KEY": SECRET_KEY,
            f"{prefix}REGION": "us-east-1",
        }
    )
    return env


def rclone_runner(
    gateway: GatewayProcess, tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    binary = shutil.which("rclone")
    assert binary is not None, "rclone is missing: run `make setup` (Debian package rclone)"
    home = tmp_path / "home"
    home.mkdir()
    env = rclone_env(gateway, home)
    # The gateway's self-signed certificate is its own CA.
    tls = ["--ca-cert", str(gateway.tls[0])] if gateway.tls else []

    def run(
        *args: str, ok: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[bytes]:
        # One try per operation: a gateway error must fail the command, not be retried away.
        result = subprocess.run(
            [binary, "--retries", "1", "--low-level-retries", "1", *tls, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=env,
            cwd=tmp_path,
        )
        if ok:
            assert result.returncode == 0, (args, result.stderr.decode(errors="replace"))
            assert b"ERROR" not in result.stderr, result.stderr.decode(errors="replace")
        return result

    return run


def copy_up(tree: Path, target: str) -> tuple[str, ...]:
    """`rclone copy` of a local tree, files over CHUNK in CHUNK-sized parts."""
    cutoff = ("--s3-upload-cutoff", CHUNK, "--s3-chunk-size", CHUNK)
    return ("copy", str(tree), target, *cutoff, "--transfers", "4")


@pytest.fixture
def rclone(
    gateway: GatewayProcess, tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    return rclone_runner(gateway, tmp_path)


@pytest.fixture
def rclone_tls(
    tls_gateway: GatewayProcess, tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    return rclone_runner(tls_gateway, tmp_path)


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def local_tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def parse_rclone_time(text: str) -> float:
    """RFC 3339 with up to nanoseconds, as rclone prints it, to a POSIX timestamp."""
    match = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    assert match, text
    whole, fraction, zone = match.groups()
    seconds = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return seconds + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


def remote_listing(rclone: Callable[..., Any], path: str) -> dict[str, dict[str, Any]]:
    listed = rclone("lsjson", "--recursive", "--files-only", "--hash", path)
    return {item["Path"]: item for item in json.loads(listed.stdout)}


def test_rclone_mkdir_lsd_and_rmdir_buckets(
    rclone: Callable[..., subprocess.CompletedProcess[bytes]],
    s3: Any,
    bucket_name: Callable[[], str],
) -> None:
    name = bucket_name()
    rclone("mkdir", f"{REMOTE}:{name}")
    rclone("mkdir", f"{REMOTE}:{name}")  # already there: still success
    s3.head_bucket(Bucket=name)
    buckets = rclone("lsd", f"{REMOTE}:").stdout.decode()
    assert name in [line.split()[-1] for line in buckets.splitlines()]

    s3.put_object(Bucket=name, Key="keep/me.txt", Body=b"still here")
    refused = rclone("rmdir", f"{REMOTE}:{name}", ok=False)
    assert refused.returncode != 0
    assert b"BucketNotEmpty" in refused.stderr, refused.stderr
    s3.head_bucket(Bucket=name)

    rclone("delete", f"{REMOTE}:{name}")
    assert s3.list_objects_v2(Bucket=name)["KeyCount"] == 0
    rclone("rmdir", f"{REMOTE}:{name}")
    with pytest.raises(ClientError) as gone:
        s3.head_bucket(Bucket=name)
    assert gone.value.response["Error"]["Code"] == "404"
    listed = rclone("lsd", f"{REMOTE}:").stdout.decode()
    assert name not in [line.split()[-1] for line in listed.splitlines()]


def _write_tree(tree: Path, rng: random.Random) -> bytes:
    """A 40 MiB big.bin, twelve notes of up to 70 kB, an empty file and the odd names;
    the big file's bytes."""
    (tree / "docs" / "deep").mkdir(parents=True)
    big = rng.randbytes(BIG_FILE_BYTES)
    (tree / "big.bin").write_bytes(big)
    for index in range(12):
        (tree / "docs" / f"note-{index}.txt").write_bytes(rng.randbytes(rng.randrange(0, 70_000)))
    (tree / "docs" / "deep" / "empty").write_bytes(b"")
    for name in ODD_NAMES:
        (tree / name).write_text(f"the file called {name}\n")
    return big


def _assert_uploaded_by_size(s3: Any, bucket: str, tree: Path, big: bytes) -> None:
    """The big file went up as a multipart upload of 5 MiB parts, with its MD5 kept in
    metadata (a multipart ETag is not an MD5); small files are single PUTs."""
    head = s3.head_object(Bucket=bucket, Key="tree/big.bin")
    assert head["ContentLength"] == BIG_FILE_BYTES
    assert head["ETag"].strip('"').endswith(f"-{BIG_FILE_BYTES // (5 * MIB)}")
    assert base64.b64decode(head["Metadata"]["md5chksum"]).hex() == md5_hex(big)
    small = s3.head_object(Bucket=bucket, Key="tree/docs/note-3.txt")
    assert small["ETag"].strip('"') == md5_hex((tree / "docs" / "note-3.txt").read_bytes())
    odd = s3.get_object(Bucket=bucket, Key=f"tree/{ODD_NAMES[2]}")["Body"].read()
    assert odd == (tree / ODD_NAMES[2]).read_bytes()


def _assert_check_finds_no_differences(
    rclone: Rclone, tree: Path, target: str, local: dict[str, bytes]
) -> None:
    """check compares sizes and MD5 hashes; --download compares the bytes themselves."""
    for extra in ((), ("--download",)):
        checked = rclone("check", str(tree), target, *extra)
        assert b"0 differences found" in checked.stderr, checked.stderr
        assert f"{len(local)} matching files".encode() in checked.stderr, checked.stderr


def _assert_listings(rclone: Rclone, tree: Path, target: str, local: dict[str, bytes]) -> None:
    """lsjson (sizes, MD5 hashes, modification times to the microsecond), ls and size."""
    listing = remote_listing(rclone, target)
    assert {path: item["Size"] for path, item in listing.items()} == {
        path: len(data) for path, data in local.items()
    }
    assert {path: item["Hashes"]["md5"] for path, item in listing.items()} == {
        path: md5_hex(data) for path, data in local.items()
    }
    for path, item in listing.items():
        local_mtime = (tree / path).stat().st_mtime_ns / 1e9
        assert abs(parse_rclone_time(item["ModTime"]) - local_mtime) < 1e-3, path

    ls_lines = rclone("ls", target).stdout.decode().splitlines()
    assert {line.split(maxsplit=1)[1]: int(line.split()[0]) for line in ls_lines} == {
        path: len(data) for path, data in local.items()
    }
    size = json.loads(rclone("size", "--json", target).stdout)
    assert (size["count"], size["bytes"]) == (len(local), sum(map(len, local.values())))


def _assert_cat(rclone: Rclone, target: str, local: dict[str, bytes]) -> None:
    """cat: whole objects (with odd names) and a range across part boundaries."""
    for path in ("docs/note-7.txt", ODD_NAMES[0], ODD_NAMES[1], ODD_NAMES[3]):
        assert rclone("cat", f"{target}/{path}").stdout == local[path]
    offset = 5 * MIB - 1000
    ranged = rclone("cat", "--offset", str(offset), "--count", "300000", f"{target}/big.bin")
    assert ranged.stdout == local["big.bin"][offset : offset + 300_000]


def _assert_server_side_copies(
    rclone: Rclone, s3: Any, bucket: str, target: str, local: dict[str, bytes]
) -> None:
    """Server-side copy; above the copy cutoff rclone copies in parts (UploadPartCopy)."""
    rclone(
        "copyto",
        f"{target}/big.bin",
        f"{REMOTE}:{bucket}/copies/big.bin",
        "--s3-copy-cutoff",
        CHUNK,
    )
    copied = s3.get_object(Bucket=bucket, Key="copies/big.bin")
    assert copied["ETag"].strip('"').endswith(f"-{BIG_FILE_BYTES // (5 * MIB)}")
    big_sha256 = hashlib.sha256(local["big.bin"]).digest()
    assert hashlib.sha256(copied["Body"].read()).digest() == big_sha256
    rclone("copyto", f"{target}/docs/note-5.txt", f"{REMOTE}:{bucket}/copies/note-5.txt")
    assert rclone("cat", f"{REMOTE}:{bucket}/copies/note-5.txt").stdout == local["docs/note-5.txt"]


def _change_tree(tree: Path) -> Path:
    """note-0 changed, note-1 removed, new.txt added, and note-2 (returned) an hour older."""
    (tree / "docs" / "note-0.txt").write_bytes(b"changed and longer than before " * 1000)
    (tree / "docs" / "note-1.txt").unlink()
    (tree / "docs" / "new.txt").write_text("new file\n")
    touched = tree / "docs" / "note-2.txt"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns - 3600 * 10**9))
    return touched


def _assert_sync_applies_changes(rclone: Rclone, tree: Path, target: str, touched: Path) -> None:
    """sync: a changed file is uploaded again, a removed one deleted, a new one added, and
    a file whose time alone changed gets its time updated in place."""
    synced = rclone("sync", str(tree), target, "-v", "--s3-upload-cutoff", CHUNK)
    log = synced.stderr.decode()
    assert re.search(r"docs/note-0\.txt: Copied \(replaced existing\)", log), log
    assert re.search(r"docs/new\.txt: Copied \(new\)", log), log
    assert re.search(r"docs/note-1\.txt: Deleted", log), log
    assert re.search(r"docs/note-2\.txt: Updated modification time in destination", log), log
    assert "big.bin" not in log
    local = local_tree(tree)
    checked = rclone("check", str(tree), target)
    assert b"0 differences found" in checked.stderr, checked.stderr
    listing = remote_listing(rclone, target)
    assert sorted(listing) == sorted(local)
    assert (
        abs(
            parse_rclone_time(listing["docs/note-2.txt"]["ModTime"])
            - touched.stat().st_mtime_ns / 1e9
        )
        < 1e-3
    )
    assert rclone("cat", f"{target}/docs/note-0.txt").stdout == local["docs/note-0.txt"]


def _assert_delete_and_purge(rclone: Rclone, s3: Any, bucket: str, target: str) -> None:
    """delete removes matching files only; purge removes a whole directory, then the
    bucket."""
    rclone("delete", target, "--include", "*.txt")
    assert sorted(remote_listing(rclone, target)) == ["big.bin", "docs/deep/empty"]
    rclone("purge", target)
    assert s3.list_objects_v2(Bucket=bucket, Prefix="tree/")["KeyCount"] == 0
    assert sorted(remote_listing(rclone, f"{REMOTE}:{bucket}")) == [
        "copies/big.bin",
        "copies/note-5.txt",
    ]
    # A missing object is, to rclone on a bucket store, an empty directory.
    assert rclone("cat", f"{target}/big.bin").stdout == b""

    rclone("purge", f"{REMOTE}:{bucket}")
    with pytest.raises(ClientError) as gone:
        s3.head_bucket(Bucket=bucket)
    assert gone.value.response["Error"]["Code"] == "404"


def test_rclone_copy_check_sync_cat_delete_and_purge(
    rclone: Rclone, s3: Any, bucket_name: Callable[[], str], tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    big = _write_tree(tree, random.Random(11))
    bucket = bucket_name()
    target = f"{REMOTE}:{bucket}/tree"
    rclone("mkdir", f"{REMOTE}:{bucket}")
    rclone(*copy_up(tree, target))
    _assert_uploaded_by_size(s3, bucket, tree, big)

    local = local_tree(tree)
    _assert_check_finds_no_differences(rclone, tree, target, local)
    _assert_listings(rclone, tree, target, local)
    _assert_cat(rclone, target, local)
    _assert_server_side_copies(rclone, s3, bucket, target, local)
    touched = _change_tree(tree)
    _assert_sync_applies_changes(rclone, tree, target, touched)
    _assert_delete_and_purge(rclone, s3, bucket, target)


def test_rclone_presigned_single_part_uploads(
    rclone: Callable[..., subprocess.CompletedProcess[bytes]],
    s3: Any,
    bucket: str,
    tmp_path: Path,
) -> None:
    """--s3-use-presigned-request: how rclone before 1.59 uploaded every small file. The
    PUT carries Content-Length twice (Go's own and the signed copy)."""
    rng = random.Random(12)
    tree = tmp_path / "small"
    tree.mkdir()
    for index in range(5):
        (tree / f"f{index} +?.bin").write_bytes(rng.randbytes(rng.randrange(1, 200_000)))
    (tree / "empty").write_bytes(b"")
    target = f"{REMOTE}:{bucket}/small"
    rclone("copy", "--s3-use-presigned-request", str(tree), target)
    checked = rclone("check", "--download", str(tree), target)
    assert b"0 differences found" in checked.stderr, checked.stderr
    assert b"6 matching files" in checked.stderr, checked.stderr
    for path, data in local_tree(tree).items():
        head = s3.head_object(Bucket=bucket, Key=f"small/{path}")
        assert head["ETag"].strip('"') == md5_hex(data)
        assert "mtime" in head["Metadata"]


def _assert_big_file_stored_in_three_parts(
    gateway: GatewayProcess, s3: Any, bucket: str, big: bytes
) -> None:
    """big.bin: three parts of 5, 5 and 2 MiB, each stored as exactly its bytes."""
    head = s3.head_object(Bucket=bucket, Key="tree/big.bin")
    assert head["ContentLength"] == len(big)
    assert base64.b64decode(head["Metadata"]["md5chksum"]).hex() == md5_hex(big)
    parts = [big[start : start + 5 * MIB] for start in range(0, len(big), 5 * MIB)]
    assert [len(part) for part in parts] == [5 * MIB, 5 * MIB, 2 * MIB + 1234]
    joined = b"".join(hashlib.md5(part).digest() for part in parts)
    assert head["ETag"].strip('"') == f"{md5_hex(joined)}-3"
    for number, part in enumerate(parts, start=1):
        stored = s3.get_object(Bucket=bucket, Key="tree/big.bin", PartNumber=number)
        assert stored["ContentLength"] == len(part)
        assert stored["ETag"] == head["ETag"]
        assert stored["Body"].read() == part
    uploads = access_log(gateway, "UploadPart", f"/{bucket}/tree/big.bin", 3)
    assert sorted(int(line["bytes_in"]) for line in uploads) == sorted(map(len, parts))


def _assert_small_files_stored_by_single_puts(
    gateway: GatewayProcess, s3: Any, bucket: str, local: dict[str, bytes]
) -> None:
    """Single PUTs whose ETag is their MD5, the body exactly the file."""
    for path, data in local.items():
        if path == "big.bin":
            continue
        stored = s3.get_object(Bucket=bucket, Key=f"tree/{path}")
        assert stored["ETag"].strip('"') == md5_hex(data), path
        assert stored["ContentLength"] == len(data), path
        assert stored["Body"].read() == data, path
    [put] = access_log(gateway, "PutObject", f"/{bucket}/tree/docs/note-4.txt", 1)
    assert int(put["bytes_in"]) == len(local["docs/note-4.txt"])


def test_rclone_over_https_copy_check_and_cat(
    rclone_tls: Callable[..., subprocess.CompletedProcess[bytes]],
    tls_gateway: GatewayProcess,
    bucket_name: Callable[[], str],
    tmp_path: Path,
) -> None:
    """rclone 1.60 (AWS SDK for Go v1) sends the same over https as over http, seen on
    the wire: a single PutObject with `x-amz-content-sha256: UNSIGNED-PAYLOAD` and
    Content-MD5, UploadParts with the body's signed SHA-256 and Content-MD5, plain
    Content-Length bodies: no aws-chunked framing, no x-amz-checksum-* header or
    trailer (the MD5 of a multipart file goes in the `md5chksum` metadata)."""
    s3 = tls_gateway.client()
    rng = random.Random(13)
    tree = tmp_path / "tree"
    (tree / "docs" / "deep").mkdir(parents=True)
    big = rng.randbytes(12 * MIB + 1234)
    (tree / "big.bin").write_bytes(big)
    for index in range(6):
        (tree / "docs" / f"note-{index}.txt").write_bytes(rng.randbytes(rng.randrange(1, 70_000)))
    (tree / "docs" / "deep" / "empty").write_bytes(b"")
    (tree / ODD_NAMES[0]).write_text(f"the file called {ODD_NAMES[0]}\n")
    bucket = bucket_name()
    target = f"{REMOTE}:{bucket}/tree"

    rclone_tls("mkdir", f"{REMOTE}:{bucket}")
    s3.head_bucket(Bucket=bucket)
    rclone_tls(*copy_up(tree, target))
    local = local_tree(tree)

    _assert_big_file_stored_in_three_parts(tls_gateway, s3, bucket, big)
    _assert_small_files_stored_by_single_puts(tls_gateway, s3, bucket, local)

    _assert_check_finds_no_differences(rclone_tls, tree, target, local)
    listing = remote_listing(rclone_tls, target)
    assert {path: (item["Size"], item["Hashes"]["md5"]) for path, item in listing.items()} == {
        path: (len(data), md5_hex(data)) for path, data in local.items()
    }

    # cat: whole files, and a range across the first part boundary.
    for path in ("big.bin", "docs/note-2.txt", ODD_NAMES[0], "docs/deep/empty"):
        assert rclone_tls("cat", f"{target}/{path}").stdout == local[path], path
    offset = 5 * MIB - 1000
    ranged = rclone_tls("cat", "--offset", str(offset), "--count", "3000", f"{target}/big.bin")
    assert ranged.stdout == big[offset : offset + 3000]
