"""kill -9 one bookie again and again while it takes adds, checkpoints every 0.2 s,
drops deleted ledgers and compacts entry logs every fraction of a second: after every
restart each acknowledged entry of a live ledger reads back identical.

tests/bookie/test_garbage_collection.py checks GC and compaction on a quiet bookie and
one restart; here the kill lands anywhere: between copying live entries and the index
batch, between the index batch and the old log's deletion, inside a checkpoint, while
journal files are being deleted, with adds in flight.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

from kazoo.client import KazooClient

from blobstore.wire import zk_layout
from blobstore.wire.protocol import Status
from tests.bookie.raw_client import RawBookie, entry_bytes
from tests.bookie.test_bookie_storage import read_all
from tests.bookie.test_garbage_collection import FAST_GC
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory

ROUNDS = 5
LEDGERS_PER_ROUND = 4
PAYLOAD_BYTES_MAX = 120_000
IN_FLIGHT_MAX = 64
WRITE_DEADLINE_S = 60.0


def _write_until_killed(
    port: int,
    ledgers: list[int],
    next_entry: dict[int, int],
    acknowledged: dict[tuple[int, int], bytes],
    rng: random.Random,
    stop: threading.Event,
) -> None:
    """Pipelined adds until the connection dies (or `stop`); records what was acked."""

    async def run() -> None:
        client = await RawBookie.connect(port)
        in_flight: set[asyncio.Task[None]] = set()

        async def one(ledger: int, entry: int, payload: bytes) -> None:
            try:
                frame = await client.add_future(ledger, entry, entry_bytes(ledger, entry, payload))
            except ConnectionError:
                return  # not acknowledged: its outcome is unknown, nothing is expected
            if Status(frame.flags_or_status) == Status.OK:
                acknowledged[(ledger, entry)] = payload

        try:
            deadline = time.monotonic() + WRITE_DEADLINE_S
            while not stop.is_set() and time.monotonic() < deadline:
                if client.reader_task.done():
                    break
                ledger = rng.choice(ledgers)
                entry = next_entry[ledger]
                next_entry[ledger] += 1
                payload = rng.randbytes(rng.randrange(1, PAYLOAD_BYTES_MAX))
                task = asyncio.ensure_future(one(ledger, entry, payload))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                if len(in_flight) >= IN_FLIGHT_MAX:
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            if in_flight:
                await asyncio.wait(in_flight, timeout=WRITE_DEADLINE_S)
        finally:
            for task in in_flight:
                task.cancel()
            await client.close()

    try:
        asyncio.run(run())
    except (OSError, ConnectionError):
        pass  # the bookie died under us: what was acked is recorded


def test_kill9_during_gc_compaction_and_checkpoints(
    bookies: BookieFactory, zk_client: KazooClient, rng: random.Random
) -> None:
    bookie: BookieProcess = bookies(1, FAST_GC)[0]
    acknowledged: dict[tuple[int, int], bytes] = {}
    next_entry: dict[int, int] = {}
    live: set[int] = set()
    for round_index in range(ROUNDS):
        ledgers = [round_index * 100 + i + 1 for i in range(LEDGERS_PER_ROUND)]
        for ledger in ledgers:
            zk_client.create(zk_layout.ledger_path(ledger), b"test metadata", makepath=True)
            next_entry[ledger] = 0
        live.update(ledgers)
        # Write a while, delete about half the ledgers (GC then compaction reclaim
        # them), keep writing, and kill -9 at a random moment of all that.
        stop = threading.Event()
        writer = threading.Thread(
            target=_write_until_killed,
            args=(
                bookie.port,
                ledgers,
                next_entry,
                acknowledged,
                random.Random(rng.random()),
                stop,
            ),
        )
        writer.start()
        time.sleep(rng.uniform(0.3, 1.0))
        for ledger in rng.sample(sorted(live), len(live) // 2):
            if ledger not in ledgers:
                zk_client.delete(zk_layout.ledger_path(ledger))
                live.discard(ledger)
        time.sleep(rng.uniform(0.0, 1.5))
        bookie.kill()
        stop.set()
        writer.join(timeout=WRITE_DEADLINE_S)
        assert not writer.is_alive()
        bookie.start()
        expected = {key: value for key, value in acknowledged.items() if key[0] in live}
        print(f"round={round_index} live_entries={len(expected)} live_ledgers={sorted(live)}")
        asyncio.run(asyncio.wait_for(read_all(bookie.port, expected), 120))
    log = bookie.managed.log_path.read_text(errors="replace") if bookie.managed else ""
    assert "gc_ledger_deleted" in log, "GC never dropped a ledger: the test proved little"
