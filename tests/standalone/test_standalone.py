"""`blobstore standalone`: one command runs the cluster; stops leave nothing behind; the
data directory survives clean stops and kill -9 of everything at once."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from blobstore.cli.zookeeper_server import free_port
from tests.cluster.processes import ProcessReaper
from tests.standalone.cluster import Standalone, blobstore_command, group_members

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "20261120"))


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    return SEED


def _body(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def test_serves_s3_stops_cleanly_and_keeps_data(
    tmp_path: Path, reaper: ProcessReaper, seed: int
) -> None:
    rng = random.Random(seed)
    cluster = Standalone(tmp_path / "data", free_port(), reaper).start()
    banner = cluster.managed.log_tail(80) if cluster.managed else ""
    access_key, secret_key = cluster.credentials()
    assert access_key in banner and secret_key in banner, banner
    assert cluster.endpoint in banner and "boto3" in banner and "aws --endpoint-url" in banner
    assert oct((tmp_path / "data" / "credentials.json").stat().st_mode & 0o777) == "0o600"

    s3 = cluster.s3()
    s3.create_bucket(Bucket="demo")
    objects = {
        "hello.txt": b"hello, world\n",
        "empty": b"",
        "dir/a.bin": _body(rng, 100_000),
        "dir/big.bin": _body(rng, 3 * (1 << 20) + 12_345),  # several entries
    }
    for key, body in objects.items():
        s3.put_object(Bucket="demo", Key=key, Body=body)
    for key, body in objects.items():
        assert s3.get_object(Bucket="demo", Key=key)["Body"].read() == body, key
    listed = s3.list_objects_v2(Bucket="demo")
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(objects)
    assert s3.list_objects_v2(Bucket="demo", Prefix="dir/", Delimiter="/")["KeyCount"] == 2

    members = group_members(cluster.pgid)
    assert len(members) >= 1 + 1 + 3 + 1, members  # supervisor, zookeeper, bookies, gateway
    assert cluster.terminate() == 0, cluster.log_tails()
    cluster.assert_nothing_left()

    # Same data directory: same credentials, every object still there.
    cluster.start()
    assert cluster.credentials() == (access_key, secret_key)
    s3 = cluster.s3()
    for key, body in objects.items():
        got = s3.get_object(Bucket="demo", Key=key)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), key
    assert cluster.signal_group(signal.SIGINT) == 0, cluster.log_tails()  # Ctrl-C
    cluster.assert_nothing_left()
    assert "stopped" in (cluster.managed.log_tail(5) if cluster.managed else "")

    # Swapped disks: a bookie's cookie names another bookie; one clear line, no traceback.
    data = tmp_path / "data"
    (data / "bookie-0").rename(data / "swap")
    (data / "bookie-1").rename(data / "bookie-0")
    (data / "swap").rename(data / "bookie-1")
    result = _run_standalone(
        "--data-dir", str(data), "--port", str(free_port()), "--zk-port", str(free_port())
    )
    _assert_one_clear_line(result, "cookie mismatch")


def test_kill_9_of_everything_loses_no_acknowledged_object(
    tmp_path: Path, reaper: ProcessReaper, seed: int
) -> None:
    rng = random.Random(seed + 1)
    cluster = Standalone(tmp_path / "data", free_port(), reaper).start()
    cluster.s3().create_bucket(Bucket="crash")
    acknowledged: dict[str, bytes] = {}
    stop = threading.Event()
    enough = threading.Event()
    bodies = [_body(rng, rng.choice([1, 1000, 200_000, 1_500_000])) for _ in range(400)]

    def writer() -> None:
        s3 = cluster.s3()
        for index, body in enumerate(bodies):
            if stop.is_set():
                return
            key = f"k{index:04d}"
            try:
                s3.put_object(Bucket="crash", Key=key, Body=body)
            except Exception:  # noqa: BLE001 - the cluster died under this request
                return
            acknowledged[key] = body
            if len(acknowledged) >= 15:
                enough.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert enough.wait(120), cluster.log_tails()
    cluster.kill_group()  # mid-write: some PUT is in flight
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    cluster.assert_nothing_left()

    cluster.start()
    s3 = cluster.s3()
    for key, body in sorted(acknowledged.items()):
        assert s3.get_object(Bucket="crash", Key=key)["Body"].read() == body, key
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket="crash", MaxKeys=1000)["Contents"]}
    assert set(acknowledged) <= listed
    assert cluster.signal_group(signal.SIGHUP) == 0, cluster.log_tails()  # terminal closed
    cluster.assert_nothing_left()


def _run_standalone(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        blobstore_command("standalone", *args),
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )


def _assert_one_clear_line(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("blobstore: error: "), lines[0]
    assert expected in lines[0], lines[0]


def test_gateway_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_standalone("--data-dir", str(tmp_path / "data"), "--port", str(port))
    _assert_one_clear_line(result, "already in use")
    assert str(port) in result.stderr


def test_zk_port_in_use_is_one_clear_line_and_not_kept(tmp_path: Path) -> None:
    """Refused before cluster.json keeps it (a later start would have found it there)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_standalone(
            "--data-dir", str(tmp_path / "data"), "--port", "0", "--zk-port", str(port)
        )
    _assert_one_clear_line(result, "already in use")
    assert not (tmp_path / "data" / "cluster.json").exists()


def test_broken_data_dir_is_one_clear_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = _run_standalone("--data-dir", str(not_a_dir), "--port", str(free_port()))
    _assert_one_clear_line(result, "not a directory")

    data = tmp_path / "data"
    data.mkdir()
    (data / "cluster.json").write_text("{not json")
    result = _run_standalone("--data-dir", str(data), "--port", str(free_port()))
    _assert_one_clear_line(result, "broken data directory")

    (data / "cluster.json").write_text(json.dumps({"format_version": 1, "zk_port": "x"}))
    result = _run_standalone("--data-dir", str(data), "--port", str(free_port()))
    _assert_one_clear_line(result, "broken data directory")


def test_bad_arguments_are_one_clear_line(tmp_path: Path) -> None:
    result = _run_standalone("--data-dir", str(tmp_path / "d"), "--bookies", "0")
    _assert_one_clear_line(result, "--bookies")
    result = _run_standalone("--data-dir", str(tmp_path / "d"), "--access-key", "only-one")
    _assert_one_clear_line(result, "--secret-key")


def test_data_dir_in_use_is_one_clear_line(tmp_path: Path) -> None:
    import fcntl

    data = tmp_path / "data"
    data.mkdir()
    with open(data / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("4242\n")
        lock.flush()
        result = _run_standalone("--data-dir", str(data), "--port", str(free_port()))
    _assert_one_clear_line(result, "in use by another blobstore standalone (pid 4242)")


def test_supervisor_killed_alone_leaves_nothing_that_blocks_a_restart(
    tmp_path: Path, reaper: ProcessReaper
) -> None:
    """kill -9 of the supervisor only: its children die with it (PDEATHSIG); the gateway's
    worker processes, which cannot inherit that, are stopped by the next start."""
    cluster = Standalone(tmp_path / "data", free_port(), reaper, ("--workers", "2")).start()
    cluster.s3().create_bucket(Bucket="kept")
    cluster.s3().put_object(Bucket="kept", Key="k", Body=b"kept")
    assert cluster.managed is not None and cluster.managed.process is not None
    os.kill(cluster.managed.pid, signal.SIGKILL)
    cluster.managed.process.wait(timeout=30)
    cluster.start()
    assert cluster.s3().get_object(Bucket="kept", Key="k")["Body"].read() == b"kept"
    assert cluster.terminate() == 0, cluster.log_tails()
    cluster.assert_nothing_left()
