"""A real bookie answers plain reads at once when memory has the entry (write cache, read
cache, entry log bytes in the page cache) and through tasks otherwise (fence, long poll,
last entry, unknown ledger, a connection with many response bytes queued): every read
gets the same answer either way."""

from __future__ import annotations

import asyncio
import random

from blobstore.wire import protocol
from blobstore.wire.protocol import Status
from bookie.bookie_server import INLINE_OUT_BYTES_MAX
from tests.bookie.raw_client import RawBookie, http_get, metric_value, payload_for, seed
from tests.bookie.test_bookie_storage import WAIT_S, write_pipelined
from tests.bookie.test_inline_reads import drop_page_cache
from tests.conftest import BookieFactory
from tests.waiting import wait_until


def metrics(port: int) -> str:
    return http_get(port, "/metrics")[1]


def sample(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def read_pipelined(
    port: int, keys: list[tuple[int, int]]
) -> list[tuple[Status, protocol.ReadResponse]]:
    """Every read sent before any answer is awaited: one connection, many frames per
    socket read on the bookie's side."""
    client = await RawBookie.connect(port)
    try:
        futures = [
            client.send(
                protocol.Op.READ_ENTRY,
                0,
                protocol.ReadRequest(ledger, entry, bytes(20), protocol.NO_ENTRY, 0).encode(),
            )
            for ledger, entry in keys
        ]
        frames = await asyncio.wait_for(asyncio.gather(*futures), 60)
        return [(Status(f.flags_or_status), protocol.ReadResponse.decode(f.body)) for f in frames]
    finally:
        await client.close()


def check(
    answers: list[tuple[Status, protocol.ReadResponse]],
    keys: list[tuple[int, int]],
    expected: dict[tuple[int, int], bytes],
) -> None:
    for (ledger, entry), (status, response) in zip(keys, answers, strict=True):
        if (ledger, entry) in expected:
            assert status == Status.OK, (ledger, entry, status)
            decoded = protocol.Entry.decode(response.entry)
            assert (decoded.ledger_id, decoded.entry_id) == (ledger, entry)
            assert decoded.payload == expected[(ledger, entry)], (ledger, entry, seed())
        elif ledger in {k[0] for k in expected}:
            assert status == Status.NO_SUCH_ENTRY, (ledger, entry, status)
            assert response.entry == b""
        else:
            assert status == Status.NO_SUCH_LEDGER, (ledger, entry, status)


def test_inline_and_task_reads_give_the_same_answers(bookies: BookieFactory) -> None:
    rng = random.Random(seed())
    (bookie,) = bookies(1, ["--checkpoint-interval-s", "0.3"])
    plan = [
        (ledger, entry, payload_for(seed(), ledger, entry, rng.choice([0, 100, 4096, 70_000])))
        for ledger in (5, 6)
        for entry in range(150)
    ]
    asyncio.run(write_pipelined(bookie.port, plan))
    expected = {(ledger, entry): payload for ledger, entry, payload in plan}
    # Stored entries in random order, entries never written, a ledger never seen.
    keys = list(expected) + [(5, 150), (6, 10_000), (99, 0)]
    rng.shuffle(keys)

    before = metrics(bookie.http_port)
    check(asyncio.run(read_pipelined(bookie.port, keys)), keys, expected)  # write cache
    after = metrics(bookie.http_port)
    reads = metric_value(after, "bookie_reads_total") - metric_value(before, "bookie_reads_total")
    assert reads == len(keys)  # every read counted once, whichever path answered it
    # More response bytes than one connection may queue: past the bound, tasks answer.
    assert sum(len(p) for p in expected.values()) > INLINE_OUT_BYTES_MAX

    # Moved to the entry logs, and the caches emptied by a restart: reads find the log
    # bytes in the page cache (the checkpoint just wrote them) and answer inline.
    wait_until(
        lambda: metric_value(metrics(bookie.http_port), "bookie_checkpoints_total") >= 1,
        WAIT_S,
        message="a checkpoint",
    )
    assert bookie.stop() == 0
    bookie.start()
    check(asyncio.run(read_pipelined(bookie.port, keys)), keys, expected)
    text = metrics(bookie.http_port)
    assert sample(text, 'bookie_entry_log_reads_total{path="inline"}') > 0
    assert metric_value(text, "bookie_reads_total") == len(keys)

    # Entry logs dropped from the page cache: memory cannot answer, the read pool does,
    # and each read is looked for in the caches once (not again on its way to the disk).
    assert bookie.stop() == 0
    for log in (bookie.ledger_dir / "current").glob("*.log"):
        drop_page_cache(log)
    bookie.start()
    check(asyncio.run(read_pipelined(bookie.port, keys)), keys, expected)
    text = metrics(bookie.http_port)
    assert sample(text, 'bookie_entry_log_reads_total{path="pool"}') > 0
    stored_ledger_reads = len(keys) - 1  # all but the unknown ledger reach the storage
    assert metric_value(text, "bookie_write_cache_lookups_total") == stored_ledger_reads
    assert metric_value(text, "bookie_reads_total") == len(keys)
