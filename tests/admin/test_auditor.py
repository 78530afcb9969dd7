"""The bookie auditor (in every gateway): a bookie killed with -9 and gone past
`lost_bookie_delay_s` has everything it held copied elsewhere, with no entry left under-
replicated; one gone less long is only noted; one that comes back gets its auditor
marker removed; with too few bookies left nothing is started."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen

import pytest
from aiolimiter import AsyncLimiter
from prometheus_client import REGISTRY

from blobstore.ledger import LedgerMetadata
from blobstore.recovery.auditor import AUDITOR_MARK, AuditResult, BookieAuditor
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout
from blobstore.wire.zk_layout import decommissioned_path, decommissioning_path
from tests.admin.test_decommission import _ledgers
from tests.admin.workload import Expected, admin, mixed_workload, verify_all
from tests.cluster.processes import BookieProcess, blobstore_command
from tests.conftest import BookieFactory
from tests.waiting import wait_until, wait_until_async

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "12"))
SHORT_SESSION = ["--zk-session-timeout-s", "3"]  # a killed bookie's registration goes soon


def _listed_bookies(zk_connect: str) -> dict[str, dict]:  # type: ignore[type-arg]
    """`blobstore admin bookies --json`, by bookie id (the table must render too)."""
    code, listed = admin(zk_connect, "bookies")
    assert code == 0, listed
    table = subprocess.run(
        blobstore_command("admin", "--zk", zk_connect, "bookies"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0 and "not registered" in table.stdout, table
    return {b["bookie_id"]: b for b in listed}


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def _passes(result: str) -> float:
    return REGISTRY.get_sample_value("blobstore_audit_passes_total", {"result": result}) or 0.0


async def _until_unregistered(zk: ZooKeeperClient, bookie_id: str) -> None:
    async def unregistered() -> bool:
        return await zk.exists(zk_layout.available_path(bookie_id)) is None

    await wait_until_async(
        unregistered, 60, message=f"{bookie_id} still registered", interval_s=0.2
    )


@pytest.fixture
def metered(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """What the recovery's rate limiter is asked for, call by call."""
    amounts: list[float] = []
    real_acquire = AsyncLimiter.acquire

    async def acquire(self: AsyncLimiter, amount: float = 1) -> None:
        amounts.append(amount)
        await real_acquire(self, amount)

    monkeypatch.setattr(AsyncLimiter, "acquire", acquire)
    return amounts


def _busiest_bookie(
    started: list[BookieProcess], ledgers: dict[int, LedgerMetadata]
) -> BookieProcess:
    """The bookie named in the most ensembles (ties: the last started); it holds some."""
    named = Counter(b for m in ledgers.values() for b in m.all_bookies())
    victim = max(started, key=lambda b: (named[b.bookie_id], b.index))
    assert named[victim.bookie_id] > 0
    return victim


async def _kill_and_note_missing(
    zk: ZooKeeperClient, zk_connect: str, victim: BookieProcess
) -> AuditResult:
    """A patient auditor (delay 3600 s) sees nothing missing, then only notes the killed
    bookie; `admin bookies` lists it as missing since then, the other three writable."""
    patient = BookieAuditor(zk, "gateway-a", 60.0, lost_bookie_delay_s=3600.0)
    first = await patient.audit_once()
    assert first.missing == {} and first.recovered is None, first
    victim.kill()
    await _until_unregistered(zk, victim.bookie_id)
    noted = await patient.audit_once()
    assert list(noted.missing) == [victim.bookie_id], noted
    assert noted.recovered is None, "recovered before the delay"
    listed = await asyncio.to_thread(_listed_bookies, zk_connect)
    assert listed[victim.bookie_id]["state"] == "missing", listed
    assert listed[victim.bookie_id]["missing_since"] == noted.missing[victim.bookie_id]
    assert sum(b["state"] == "writable" for b in listed.values()) == 3, listed
    return noted


async def _recover_eagerly(
    zk: ZooKeeperClient,
    zk_connect: str,
    victim: BookieProcess,
    noted: AuditResult,
    metered: list[float],
) -> None:
    """Another gateway, with no delay, counts from when the first noticed: it copies the
    victim's entries (every byte through the rate limit) and marks it decommissioned."""
    eager = BookieAuditor(
        zk, "gateway-b", 60.0, lost_bookie_delay_s=0.0, recovery_rate_bytes_per_s=1e9
    )
    rereplicated = _sample("blobstore_rereplicated_bytes_total")
    done = await eager.audit_once()
    assert done.missing == noted.missing, (done, noted)
    assert done.recovered == victim.bookie_id and done.safe_to_remove, done
    marker, _ = await zk.get_with_stat(decommissioned_path(victim.bookie_id))
    copied = json.loads(marker)["bytes_copied"]
    assert copied > 0 and sum(metered) == copied, (copied, sum(metered))
    assert _sample("blobstore_rereplicated_bytes_total") == rereplicated + copied
    assert await zk.exists(decommissioning_path(victim.bookie_id)) is None
    after = await eager.audit_once()
    assert after.missing == {} and after.recovered is None, after
    listed = await asyncio.to_thread(_listed_bookies, zk_connect)
    assert listed[victim.bookie_id]["state"] == "decommissioned", listed


async def _audit_past_the_delay(
    zk_connect: str, victim: BookieProcess, metered: list[float]
) -> None:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    try:
        noted = await _kill_and_note_missing(zk, zk_connect, victim)
        await _recover_eagerly(zk, zk_connect, victim, noted, metered)
    finally:
        await zk.stop()


def _assert_ensembles_replaced(
    before: dict[int, LedgerMetadata], moved: dict[int, LedgerMetadata], victim: BookieProcess
) -> None:
    """The same ledgers, none naming the victim, no bookie twice in an ensemble."""
    assert set(moved) == set(before)
    for ledger_id, metadata in moved.items():
        for _, ensemble in metadata.ensembles:
            assert victim.bookie_id not in ensemble, (ledger_id, metadata.ensembles)
            assert len(set(ensemble)) == len(ensemble), (ledger_id, metadata.ensembles)


def _assert_readable_and_replicated(zk_connect: str, expected: Expected) -> None:
    asyncio.run(verify_all(zk_connect, expected))
    code, fsck = admin(zk_connect, "fsck")
    assert code == 0, fsck
    assert fsck["summary"]["under_replicated_entries"] == 0


def test_auditor_rereplicates_a_bookie_gone_past_the_delay(
    zk_connect: str, bookies: BookieFactory, metered: list[float]
) -> None:
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    started = bookies(4, SHORT_SESSION)
    expected = asyncio.run(mixed_workload(zk_connect, SEED))
    before = asyncio.run(_ledgers(zk_connect))
    victim = _busiest_bookie(started, before)
    asyncio.run(_audit_past_the_delay(zk_connect, victim, metered))
    _assert_ensembles_replaced(before, asyncio.run(_ledgers(zk_connect)), victim)
    _assert_readable_and_replicated(zk_connect, expected)


def test_auditor_releases_returning_bookies_and_waits_for_enough_bookies(
    zk_connect: str, bookies: BookieFactory
) -> None:
    back, other = bookies(2, SHORT_SESSION)

    async def audit() -> None:
        zk = ZooKeeperClient(zk_connect)
        await zk.start()
        try:
            await zk.ensure_path(zk_layout.DECOMMISSIONING_PATH)
            # The auditor was moving `back` when it registered again; an operator is
            # decommissioning `other`.
            mark = {"started": time.time(), "by": AUDITOR_MARK}
            await zk.create(decommissioning_path(back.bookie_id), json.dumps(mark).encode())
            await zk.create(f"{decommissioning_path(back.bookie_id)}/ledger-1", b"{}")
            operator = json.dumps({"started": time.time()}).encode()
            await zk.create(decommissioning_path(other.bookie_id), operator)
            auditor = BookieAuditor(zk, "gateway-a", 60.0, lost_bookie_delay_s=0.0)
            result = await auditor.audit_once()
            assert result.released == [back.bookie_id], result
            assert await zk.exists(decommissioning_path(back.bookie_id)) is None
            assert await zk.exists(decommissioning_path(other.bookie_id)) is not None
            other.kill()
            await _until_unregistered(zk, other.bookie_id)
            # Gone, but an operator is decommissioning it: theirs to finish.
            operators = _passes("nothing_due")
            left = await auditor.audit_once()
            assert list(left.missing) == [other.bookie_id], left
            assert left.recovered is None and _passes("nothing_due") == operators + 1, left
            # One bookie left registered: no replacement could be placed, nothing starts.
            await zk.delete(decommissioning_path(other.bookie_id))
            too_few = _passes("too_few_bookies")
            deferred = await auditor.audit_once()
            assert list(deferred.missing) == [other.bookie_id], deferred
            assert deferred.recovered is None, deferred
            assert _passes("too_few_bookies") == too_few + 1
            assert await zk.exists(decommissioning_path(other.bookie_id)) is None
        finally:
            await zk.stop()

    asyncio.run(audit())


@contextmanager
def _autorecovery(zk_connect: str, metrics_port: int, log_path: Path) -> Iterator[Popen[bytes]]:
    """`blobstore autorecovery` (audit every 0.5 s, bookies lost after 1 s), its output in
    `log_path`, ready; killed at exit if it is still running."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            blobstore_command(
                "autorecovery",
                "--zk",
                zk_connect,
                "--audit-interval-s",
                "0.5",
                "--lost-bookie-delay-s",
                "1",
                "--metrics-port",
                str(metrics_port),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def ready() -> bool:
            assert process.poll() is None, log_path.read_text()
            return b"event=autorecovery_ready" in log_path.read_bytes()

        wait_until(ready, 60, message=log_path.read_text, interval_s=0.1)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def _until_decommissioned(
    zk_connect: str, bookie_id: str, process: Popen[bytes], log_path: Path
) -> None:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    try:

        async def decommissioned() -> bool:
            assert process.poll() is None, log_path.read_text()
            return await zk.exists(decommissioned_path(bookie_id)) is not None

        await wait_until_async(decommissioned, 120, message=log_path.read_text, interval_s=0.2)
    finally:
        await zk.stop()


def _assert_serves_rereplicated_bytes(metrics_port: int) -> None:
    """The process's /metrics counts the bytes it copied."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        metrics = reply.read().decode()
    copied = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("blobstore_rereplicated_bytes_total ")
    ]
    assert copied and copied[0] > 0, metrics


def test_autorecovery_command_rereplicates_a_bookie_killed_with_minus_9(
    zk_connect: str, bookies: BookieFactory, tmp_path: Path
) -> None:
    """`blobstore autorecovery` (the auditor as a process of its own) copies what a
    bookie killed with -9 held, serves its metrics, and stops on SIGTERM."""
    from blobstore.cli.zookeeper_server import free_port

    print(f"BLOBSTORE_TEST_SEED={SEED}")
    started = bookies(4, SHORT_SESSION)
    expected = asyncio.run(mixed_workload(zk_connect, SEED))
    victim = _busiest_bookie(started, asyncio.run(_ledgers(zk_connect)))
    port = free_port()
    log_path = tmp_path / "autorecovery.log"
    with _autorecovery(zk_connect, port, log_path) as process:
        victim.kill()
        asyncio.run(_until_decommissioned(zk_connect, victim.bookie_id, process, log_path))
        _assert_serves_rereplicated_bytes(port)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log_path.read_text()
        assert b"event=autorecovery_stopped" in log_path.read_bytes()
    moved = asyncio.run(_ledgers(zk_connect))
    for ledger_id, metadata in moved.items():
        for _, ensemble in metadata.ensembles:
            assert victim.bookie_id not in ensemble, (ledger_id, metadata.ensembles)
    _assert_readable_and_replicated(zk_connect, expected)


def test_autorecovery_command_errors_are_one_line() -> None:
    """Missing ZooKeeper, an interval of 0 and a bad port: one line each, exit 2."""
    for args, message in (
        ([], "--zk (or BLOBSTORE_ZK) is required"),
        (["--zk", "127.0.0.1:1", "--audit-interval-s", "0"], "needs one above 0"),
        (["--zk", "127.0.0.1:1", "--metrics-port", "70000"], "must be in [0, 65535]"),
        (["--zk", "127.0.0.1:1", "--lost-bookie-delay-s", "-1"], "BLOBSTORE_LOST_BOOKIE_DELAY_S"),
    ):
        env = {k: v for k, v in os.environ.items() if k != "BLOBSTORE_ZK"}
        result = subprocess.run(
            blobstore_command("autorecovery", *args),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert result.returncode == 2, (args, result)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
