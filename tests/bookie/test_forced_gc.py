"""A garbage collection pass on demand: `POST /api/v1/bookie/gc` on the admin port.

Real bookie processes show the space of a deleted ledger freed by one request, the
write cache checkpointed by a rolling pass, and bad requests refused; the pure parsing
and the collector's one-pass-at-a-time loop are tested with fakes."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from blobstore.wire import zk_layout
from blobstore.wire.protocol import Status
from bookie import config as bookie_config
from bookie.compactor import CompactionResult
from bookie.entry_logger import LOG_HEADER_BYTES, RECORD_LENGTH
from bookie.garbage_collector import (
    FORCED_PASSES_PENDING_MAX,
    ForcedGcRequest,
    GarbageCollector,
    GcBusyError,
    GcResult,
    GcStoppedError,
)
from bookie.http_admin import (
    BODY_BYTES_MAX,
    GC_PATH,
    BadRequestError,
    Request,
    parse_forced_gc_query,
    parse_head,
)
from tests.bookie.raw_client import entry_bytes, http_get, metric_value, payload_for, seed
from tests.bookie.test_bookie_storage import WAIT_S, read_all, write_pipelined
from tests.bookie.test_garbage_collection import create_metadata, entry_log_bytes, status_of
from tests.bookie.test_garbage_collector_unit import FakeStorage, FakeZooKeeper
from tests.conftest import BookieFactory
from tests.waiting import wait_until

HTTP_TIMEOUT_S = 60.0
NO_PERIODIC_GC = ["--gc-interval-s", "3600"]
RESULT_KEYS = {"ledgers_deleted", "bytes_freed", "entry_logs_deleted", "duration_s"}

Plan = list[tuple[int, int, bytes]]

# ------------------------------------------------------------------ helpers


def http_call(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, str, str]:
    """(status, Allow header, body) of one request to the admin port."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, response.headers.get("Allow", ""), response.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers.get("Allow", ""), e.read().decode()


def force_gc(port: int, query: str = "") -> dict[str, Any]:
    """One forced pass; its figures."""
    status, _, body = http_call(port, "POST", f"{GC_PATH}{query}")
    assert status == 200, body
    answer = dict(json.loads(body))
    assert set(answer) == RESULT_KEYS, answer
    return answer


def raw_exchange(port: int, data: bytes) -> str:
    """Send `data` as it is, return everything the admin port answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT_S) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("latin-1")


def info(port: int) -> dict[str, Any]:
    status, body = http_get(port, "/info")
    assert status == 200, body
    return dict(json.loads(body))


def record_bytes(plan: Plan) -> int:
    """Bytes the plan's entries take in entry logs (record length + entry)."""
    return sum(
        RECORD_LENGTH.size + len(entry_bytes(ledger, entry, payload))
        for ledger, entry, payload in plan
    )


def log_count(ledger_dir: Path) -> int:
    return len(list((ledger_dir / "current").glob("*.log")))


def interleaved(deleted: int, live: int, count: int, deleted_size: int, live_size: int) -> Plan:
    """Entries of two ledgers in alternation, so they share entry logs."""
    plan = []
    for entry_id in range(count):
        plan.append((deleted, entry_id, payload_for(seed(), deleted, entry_id, deleted_size)))
        plan.append((live, entry_id, payload_for(seed(), live, entry_id, live_size)))
    return plan


# ------------------------------------------------------------------ real bookies


def test_forced_gc_frees_a_deleted_ledgers_space_at_once(
    bookies: BookieFactory, zk_client: KazooClient
) -> None:
    create_metadata(zk_client, 1, 2)
    (bookie,) = bookies(
        1,
        [*NO_PERIODIC_GC, "--checkpoint-interval-s", "0.2", "--entry-log-bytes-max", str(12 << 20)],
    )
    plan = interleaved(deleted=1, live=2, count=60, deleted_size=100_000, live_size=20_000)
    live = [(ledger, entry, payload) for ledger, entry, payload in plan if ledger == 2]
    asyncio.run(write_pipelined(bookie.port, plan))
    wait_until(
        lambda: (
            info(bookie.http_port)["write_cache_bytes"] == 0
            and entry_log_bytes(bookie.ledger_dir) >= record_bytes(plan)
        ),
        WAIT_S,
        message="every entry checkpointed into entry logs",
    )
    before = entry_log_bytes(bookie.ledger_dir)

    zk_client.delete(zk_layout.ledger_path(1))
    answer = force_gc(bookie.http_port)

    after = entry_log_bytes(bookie.ledger_dir)
    assert answer["ledgers_deleted"] == 1, answer
    assert answer["entry_logs_deleted"] >= 1, answer
    assert before - after <= answer["bytes_freed"] <= before, (before, after, answer)
    assert after == record_bytes(live) + LOG_HEADER_BYTES * log_count(bookie.ledger_dir), (
        "only the live ledger's entries are left on disk"
    )
    asyncio.run(read_all(bookie.port, {(ledger, entry): data for ledger, entry, data in live}))
    assert asyncio.run(status_of(bookie.port, 1, 0)) == Status.NO_SUCH_LEDGER
    metrics = http_get(bookie.http_port, "/metrics")[1]
    assert metric_value(metrics, "bookie_gc_ledgers_deleted_total") == 1
    assert metric_value(metrics, "bookie_compaction_reclaimed_bytes_total") > 0
    log = (bookie.root / "bookie.log").read_text()
    assert "gc_forced ledgers_deleted=1 " in log, "the forced pass logged its figures"


def test_roll_checkpoints_the_write_cache_and_no_roll_leaves_it(
    bookies: BookieFactory, zk_client: KazooClient
) -> None:
    """No periodic checkpoint: every entry is in the write cache. `roll=false` collects
    the deleted ledger (its cached entries go with it) and leaves the cache; the default
    pass checkpoints it into the entry log."""
    create_metadata(zk_client, 3, 4)
    (bookie,) = bookies(1, [*NO_PERIODIC_GC, "--checkpoint-interval-s", "3600"])
    plan = interleaved(deleted=3, live=4, count=20, deleted_size=50_000, live_size=10_000)
    live = [(ledger, entry, payload) for ledger, entry, payload in plan if ledger == 4]
    cached_live_bytes = sum(len(entry_bytes(*item)) for item in live)
    asyncio.run(write_pipelined(bookie.port, plan))
    assert info(bookie.http_port)["write_cache_bytes"] > cached_live_bytes
    zk_client.delete(zk_layout.ledger_path(3))

    kept = force_gc(bookie.http_port, "?roll=false&threshold=1")
    assert (kept["ledgers_deleted"], kept["bytes_freed"], kept["entry_logs_deleted"]) == (1, 0, 0)
    assert info(bookie.http_port)["write_cache_bytes"] == cached_live_bytes
    assert entry_log_bytes(bookie.ledger_dir) == LOG_HEADER_BYTES * log_count(bookie.ledger_dir)

    rolled = force_gc(bookie.http_port)
    assert rolled["ledgers_deleted"] == 0, rolled
    assert info(bookie.http_port)["write_cache_bytes"] == 0
    assert entry_log_bytes(bookie.ledger_dir) == record_bytes(live) + LOG_HEADER_BYTES * log_count(
        bookie.ledger_dir
    )
    asyncio.run(read_all(bookie.port, {(ledger, entry): data for ledger, entry, data in live}))


def test_the_gc_endpoint_refuses_bad_requests_with_a_reason(bookies: BookieFactory) -> None:
    (bookie,) = bookies(1, NO_PERIODIC_GC)
    port = bookie.http_port
    for method in ("GET", "HEAD"):
        status, allow, _ = http_call(port, method, GC_PATH)
        assert (status, allow) == (405, "POST, PUT"), method
    assert http_call(port, "POST", "/metrics")[:2] == (405, "GET, HEAD")
    for query in ("threshold=2", "threshold=abc", "threshold=nan", "roll=maybe", "force=true"):
        status, _, body = http_call(port, "POST", f"{GC_PATH}?{query}")
        assert status == 400, (query, body)
        assert body.count("\n") == 1 and query.split("=")[0] in body, body
    status, _, body = http_call(port, "PUT", f"{GC_PATH}?threshold=0.5", body=b'{"ignored": 1}')
    assert status == 200 and set(json.loads(body)) == RESULT_KEYS, body

    too_big = f"POST {GC_PATH} HTTP/1.1\r\nContent-Length: {BODY_BYTES_MAX + 1}\r\n\r\n"
    assert raw_exchange(port, too_big.encode()).startswith("HTTP/1.1 413 ")
    chunked = f"POST {GC_PATH} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert raw_exchange(port, chunked.encode()).startswith("HTTP/1.1 411 ")
    assert http_get(port, "/health") == (200, "OK\n"), "the admin port still serves"


# ------------------------------------------------------------------ pure parsing

DEFAULT = 0.8


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ForcedGcRequest(DEFAULT, True)),
        ("threshold=0.5", ForcedGcRequest(0.5, True)),
        ("roll=false", ForcedGcRequest(DEFAULT, False)),
        ("threshold=1&roll=true", ForcedGcRequest(1.0, True)),
        ("roll=false&threshold=0", ForcedGcRequest(0.0, False)),
        ("threshold=%30.25", ForcedGcRequest(0.25, True)),
    ],
)
def test_forced_gc_query_parses(query: str, expected: ForcedGcRequest) -> None:
    assert parse_forced_gc_query(query, DEFAULT) == expected


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("threshold=2", "threshold"),
        ("threshold=-0.1", "threshold"),
        ("threshold=abc", "threshold"),
        ("threshold=nan", "threshold"),
        ("threshold=inf", "threshold"),
        ("threshold=", "threshold"),
        ("threshold=%0A", "threshold"),
        ("roll=maybe", "roll"),
        ("roll=TRUE", "roll"),
        ("roll=", "roll"),
        ("force=true", "force"),
        ("threshold=0.5&threshold=0.6", "threshold"),
        ("threshold", "query"),
        ("&".join(["roll=true"] * 9), "query"),
    ],
)
def test_a_bad_forced_gc_query_is_refused_with_one_line(query: str, named: str) -> None:
    with pytest.raises(BadRequestError) as refused:
        parse_forced_gc_query(query, DEFAULT)
    reason = str(refused.value)
    assert refused.value.status == 400
    assert named in reason and "\n" not in reason, reason


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (
            "POST /api/v1/bookie/gc?roll=false HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n",
            Request("POST", GC_PATH, "roll=false", 3),
        ),
        ("GET /metrics HTTP/1.1\r\n\r\n", Request("GET", "/metrics", "", 0)),
        (
            "PUT /api/v1/bookie/gc HTTP/1.1\r\ncontent-length: 0\r\nContent-Length: 0\r\n\r\n",
            Request("PUT", GC_PATH, "", 0),
        ),
    ],
)
def test_request_heads_parse(head: str, expected: Request) -> None:
    assert parse_head(head.encode()) == expected


@pytest.mark.parametrize(
    ("head", "status"),
    [
        ("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        (f"POST /x HTTP/1.1\r\nContent-Length: {BODY_BYTES_MAX + 1}\r\n\r\n", 413),
        ("POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        ("POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        ("POST\r\n\r\n", 400),
        ("POST x HTTP/1.1\r\n\r\n", 400),
    ],
)
def test_bad_request_heads_are_refused(head: str, status: int) -> None:
    with pytest.raises(BadRequestError) as refused:
        parse_head(head.encode())
    assert refused.value.status == status


# ------------------------------------------------------------------ the collector's loop


class GatedCompactor:
    """Records compactions; each one waits for `release` (the test holds a pass open)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, str, bool]] = []
        self.running = 0
        self.running_max = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def compact(
        self, threshold: float, kind: str, *, include_current: bool = True
    ) -> CompactionResult:
        self.calls.append((threshold, kind, include_current))
        self.running += 1
        self.running_max = max(self.running_max, self.running)
        self.entered.set()
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return CompactionResult(bytes_freed=1000, entry_logs_deleted=1)


class NoEntryLogs:
    def close_retired(self) -> None:
        pass


class CheckpointedStorage(FakeStorage):
    def __init__(self, ledger_ids: set[int]) -> None:
        super().__init__(ledger_ids)
        self.checkpoints = 0
        self.entry_logger = NoEntryLogs()

    async def checkpoint(self) -> None:
        self.checkpoints += 1


def collector(
    storage: CheckpointedStorage, live_ledger_ids: set[int]
) -> tuple[GarbageCollector, GatedCompactor]:
    config = bookie_config.BookieConfig(zk="x", journal_dir="j", ledger_dir="l", gc_interval_s=3600)
    gc = GarbageCollector(
        FakeZooKeeper(live_ledger_ids),  # type: ignore[arg-type]
        storage,  # type: ignore[arg-type]
        config,
        lambda: False,
    )
    compactor = GatedCompactor()
    gc.compactor = compactor  # type: ignore[assignment]
    return gc, compactor


def test_forced_passes_run_one_at_a_time_on_the_collectors_task() -> None:
    async def scenario() -> tuple[GcResult, GcResult]:
        storage = CheckpointedStorage({1, 2})
        gc, compactor = collector(storage, {2})
        runner = asyncio.create_task(gc.run())
        first = asyncio.create_task(gc.force(ForcedGcRequest(0.5, roll=True)))
        second = asyncio.create_task(gc.force(ForcedGcRequest(1.0, roll=False)))
        await asyncio.wait_for(compactor.entered.wait(), WAIT_S)
        assert compactor.calls == [(0.5, "forced", True)], "the second pass waits its turn"
        compactor.release.set()
        results = await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
        assert compactor.calls == [(0.5, "forced", True), (1.0, "forced", False)]
        assert compactor.running_max == 1
        assert storage.checkpoints == 1, "only the rolling pass checkpoints"
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        with pytest.raises(GcStoppedError):
            await gc.force(ForcedGcRequest(0.5, roll=True))
        return results[0], results[1]

    first, second = asyncio.run(scenario())
    assert (first.ledgers_deleted, first.bytes_freed, first.entry_logs_deleted) == (1, 1000, 1)
    assert second.ledgers_deleted == 0, "ledger 1 went with the first pass"


def test_a_full_queue_is_refused_and_a_pass_no_one_waits_for_is_dropped() -> None:
    async def scenario() -> None:
        gc, compactor = collector(CheckpointedStorage(set()), set())
        compactor.release.set()
        request = ForcedGcRequest(0.5, roll=False)
        waiting = [asyncio.create_task(gc.force(request)) for _ in range(FORCED_PASSES_PENDING_MAX)]
        await asyncio.sleep(0)  # each waiter queues its pass (the collector is not running)
        assert len(gc.forced) == FORCED_PASSES_PENDING_MAX
        with pytest.raises(GcBusyError):
            await gc.force(request)
        waiting[0].cancel()
        runner = asyncio.create_task(gc.run())
        await asyncio.wait_for(asyncio.gather(*waiting[1:]), WAIT_S)
        assert len(compactor.calls) == FORCED_PASSES_PENDING_MAX - 1
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())


def test_stopping_fails_the_passes_still_waiting() -> None:
    async def scenario() -> None:
        gc, compactor = collector(CheckpointedStorage(set()), set())
        runner = asyncio.create_task(gc.run())
        running = asyncio.create_task(gc.force(ForcedGcRequest(0.5, roll=False)))
        queued = asyncio.create_task(gc.force(ForcedGcRequest(0.5, roll=False)))
        await asyncio.wait_for(compactor.entered.wait(), WAIT_S)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        for waiter in (running, queued):
            with pytest.raises(GcStoppedError):
                await asyncio.wait_for(waiter, WAIT_S)

    asyncio.run(scenario())
