"""Real bookie processes: cookie refusal, `blobstore admin bookies`, the HTTP admin port."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

from kazoo.client import KazooClient

from blobstore.wire import zk_layout
from tests.bookie.raw_client import RawBookie, http_get, metric_value
from tests.bookie.test_bookie_storage import write_pipelined
from tests.cluster.processes import BookieProcess, blobstore_command
from tests.conftest import BookieFactory
from tests.waiting import wait_until

RUN_TIMEOUT_S = 60.0


def start_directly(
    bookie: BookieProcess, journal_dir: Path, ledger_dir: Path, zk: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = blobstore_command(
        "bookie",
        "--zk", zk or bookie.zk,
        "--host", "127.0.0.1",
        "--port", str(bookie.port),
        "--http-port", "0",
        "--journal-dir", str(journal_dir),
        "--ledger-dir", str(ledger_dir),
    )  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def assert_refused(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode not in (0, None), result
    lines = [line for line in result.stderr.splitlines() if line.startswith("blobstore: error:")]
    assert len(lines) == 1, result.stderr
    assert "cookie mismatch" in lines[0], lines[0]
    assert words in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_cookie_mismatch_refuses_to_start(
    bookies: BookieFactory, tmp_path: Path, zk_client: KazooClient
) -> None:
    (bookie,) = bookies(1)
    asyncio.run(write_pipelined(bookie.port, [(1, 0, b"data")]))
    assert bookie.stop() == 0
    cookie = json.loads(zk_client.get(zk_layout.cookie_path(bookie.bookie_id))[0])
    assert cookie["bookie_id"] == bookie.bookie_id
    assert json.loads((bookie.ledger_dir / "COOKIE").read_text()) == cookie

    # Another ledger directory (a wrong or new disk).
    other = tmp_path / "other-ledgers"
    assert_refused(start_directly(bookie, bookie.journal_dir, other), "ledger_dirs")
    # The directory wiped.
    saved = tmp_path / "saved"
    shutil.copytree(bookie.ledger_dir, saved)
    shutil.rmtree(bookie.ledger_dir)
    assert_refused(start_directly(bookie, bookie.journal_dir, bookie.ledger_dir), "no cookie")
    shutil.rmtree(bookie.ledger_dir)
    shutil.copytree(saved, bookie.ledger_dir)
    # Another cluster (a different instance id).
    zk_client.set(zk_layout.INSTANCE_ID_PATH, b"another-cluster")
    assert_refused(start_directly(bookie, bookie.journal_dir, bookie.ledger_dir), "instance_id")
    zk_client.set(zk_layout.INSTANCE_ID_PATH, cookie["instance_id"].encode())
    # Everything back in place: it starts and still holds its data.
    bookie.start()

    async def read() -> bytes | None:
        client = await RawBookie.connect(bookie.port)
        try:
            return await client.read_payload(1, 0)
        finally:
            await client.close()

    assert asyncio.run(read()) == b"data"


def test_admin_bookies_and_http_admin(bookies: BookieFactory, zk_connect: str) -> None:
    first, second = bookies(2, ["--rack", "/rack-a"])
    asyncio.run(write_pipelined(first.port, [(5, i, b"x" * 1000) for i in range(50)]))

    async def reads() -> None:
        client = await RawBookie.connect(first.port)
        try:
            for i in range(50):
                await client.read_payload(5, i)
            info = await client.info()
            assert info["bookie_id"] == first.bookie_id
            assert info["read_only"] is False
            assert info["ledger_count"] == 1
        finally:
            await client.close()

    asyncio.run(reads())
    result = subprocess.run(
        blobstore_command("admin", "--zk", zk_connect, "--json", "bookies"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    listed = {b["bookie_id"]: b for b in json.loads(result.stdout)}
    assert set(listed) == {first.bookie_id, second.bookie_id}
    for bookie in (first, second):
        entry = listed[bookie.bookie_id]
        assert entry["state"] == "writable"
        assert entry["rack"] == "/rack-a"
        assert entry["port"] == bookie.port
        assert entry["http_port"] == bookie.http_port
        assert entry["total_bytes"] >= entry["free_bytes"] > 0
    table = subprocess.run(
        blobstore_command("admin", "--zk", zk_connect, "bookies"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert table.returncode == 0 and first.bookie_id in table.stdout

    status, text = http_get(first.http_port, "/metrics")
    assert status == 200
    for name in (
        "bookie_adds_total",
        "bookie_add_latency_seconds_bucket",
        "bookie_reads_total",
        "bookie_read_latency_seconds_bucket",
        "bookie_journal_fsync_latency_seconds_bucket",
        "bookie_journal_batch_size_entries_bucket",
        "bookie_write_cache_lookups_total",
        "bookie_read_cache_lookups_total",
        "bookie_compaction_bytes_total",
        "bookie_gc_ledgers_deleted_total",
        "bookie_disk_usage_ratio",
        "bookie_read_only",
    ):
        assert name in text, name
    assert metric_value(text, "bookie_adds_total") == 50
    assert metric_value(text, "bookie_journal_batch_size_entries_count") >= 1
    assert metric_value(text, "bookie_read_only") == 0
    assert http_get(first.http_port, "/health") == (200, "OK\n")
    status, body = http_get(first.http_port, "/info")
    assert status == 200 and json.loads(body)["bookie_id"] == first.bookie_id
    assert http_get(first.http_port, "/nope")[0] == 404


def test_registration_returns_after_session_expiry(
    bookies: BookieFactory, zk_client: KazooClient
) -> None:
    """SIGSTOP past the session timeout: ZooKeeper expires the session and drops the
    ephemeral registration; once resumed, the bookie registers again and still serves."""
    (bookie,) = bookies(1, ["--zk-session-timeout-s", "3", "--registration-refresh-s", "0.5"])
    path = zk_layout.available_path(bookie.bookie_id)
    owner = zk_client.exists(path).ephemeralOwner
    bookie.suspend()
    try:
        wait_until(
            lambda: zk_client.exists(path) is None,
            30,
            message="session never expired",
            interval_s=0.2,
        )
    finally:
        bookie.resume()
    wait_until(
        lambda: _registered_again(zk_client, path, owner),
        30,
        message="bookie did not register again",
        interval_s=0.2,
    )
    asyncio.run(write_pipelined(bookie.port, [(1, 0, b"after expiry")]))
    assert bookie.managed is not None
    assert "registration_lost" in bookie.managed.log_path.read_text(), "the loss path ran"


def _registered_again(zk_client: KazooClient, path: str, owner: int) -> bool:
    """Whether `path` is registered by a session other than `owner`."""
    stat = zk_client.exists(path)
    return stat is not None and stat.ephemeralOwner != owner


def test_refuses_to_run_without_assertions(tmp_path: Path) -> None:
    command = blobstore_command(
        "bookie", "--zk", "127.0.0.1:1", "--journal-dir", str(tmp_path / "j"),
        "--ledger-dir", str(tmp_path / "l"),
    )  # fmt: skip
    result = subprocess.run(
        [command[0], "-O", *command[1:]], capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert result.returncode == 2
    assert "assertions" in result.stderr
    assert not (tmp_path / "j").exists(), "nothing touched"


def test_damaged_completed_journal_file_refuses_to_start(bookies: BookieFactory) -> None:
    """Acknowledged entries sit in a journal file that was complete (the journal rolled
    to a newer one) and not yet checkpointed; damage there stops the bookie with one line
    and exit code 4, instead of a replay that silently drops what follows the damage.
    With the file moved aside, the bookie starts."""
    from bookie.journal import FILE_HEADER_BYTES, file_name, list_journal_ids

    (bookie,) = bookies(
        1, extra_args=("--journal-file-bytes-max", "65536", "--checkpoint-interval-s", "3600")
    )
    asyncio.run(write_pipelined(bookie.port, [(7, i, b"x" * 2000) for i in range(100)]))
    bookie.kill()  # no checkpoint: every journal file is still to be replayed
    ids = list_journal_ids(str(bookie.journal_dir))
    assert len(ids) >= 2, ids
    completed = bookie.journal_dir / file_name(ids[0])
    data = bytearray(completed.read_bytes())
    data[FILE_HEADER_BYTES + 40] ^= 0xFF
    completed.write_bytes(bytes(data))
    result = start_directly(bookie, bookie.journal_dir, bookie.ledger_dir)
    assert result.returncode == 4, result
    lines = [line for line in result.stderr.splitlines() if line.startswith("blobstore: error:")]
    assert len(lines) == 1 and "corrupt at offset" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    completed.rename(bookie.root / "moved-aside.txn")
    bookie.start()
    assert bookie.stop() == 0


def test_the_gil_switch_interval_is_the_bookies_setting(bookies: BookieFactory) -> None:
    """The journal writer takes the GIL back after every fsync: the bookie runs with a
    short switch interval (0.5 ms unless set), not Python's 5 ms."""
    (default,) = bookies(1)
    (tuned,) = bookies(1, ["--thread-switch-interval-ms", "0.25"])
    for bookie, expected in ((default, "0.5"), (tuned, "0.25")):
        log = (bookie.root / "bookie.log").read_text()
        assert f"thread_switch_interval_ms={expected}\n" in log, log[-2000:]


def _bookie_fails_with_one_line(zk: str, tmp_path: Path, expected: str, *extra: str) -> None:
    """`blobstore bookie` on fresh directories exits 2 with one error line naming `expected`."""
    command = blobstore_command(
        "bookie", "--zk", zk, "--port", "0", "--http-port", "0",
        "--journal-dir", str(tmp_path / "j"), "--ledger-dir", str(tmp_path / "l"), *extra,
    )  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if line.startswith("blobstore: error:")]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_zookeeper_path_is_one_line_and_exit_2(zk_connect: str, tmp_path: Path) -> None:
    _bookie_fails_with_one_line(f"{zk_connect}/no-such-path", tmp_path, "does not exist")


def test_an_unwritable_ready_file_stops_the_bookie_with_one_line(
    zk_connect: str, tmp_path: Path
) -> None:
    """The bookie had started serving when the ready file failed: it stops as any stop
    does (it used to skip the stop sequence and hang, deaf to SIGTERM), then says why."""
    ready_file = str(tmp_path / "no-such-dir" / "ready.json")
    _bookie_fails_with_one_line(zk_connect, tmp_path, "--ready-file", "--ready-file", ready_file)
