"""Bookie faults under a ledger client: kill -9 during adds (ensemble change), SIGSTOP
during reads (speculative reads), a corrupted replica on disk (digest fallback)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from prometheus_client import REGISTRY

from blobstore.ledger.distribution_schedule import write_set_bookies
from tests.conftest import BookieFactory
from tests.ledger.conftest import ledger_client, payload, run


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_kill_bookie_during_adds_changes_ensemble_and_loses_nothing(
    bookies: BookieFactory, zk_connect: str
) -> None:
    started = bookies(4)
    by_id = {b.bookie_id: b for b in started}
    rng = random.Random(5)
    payloads = [payload(rng, i, rng.randrange(10, 5000)) for i in range(600)]
    changes_before = metric("blobstore_ledger_ensemble_changes_total")

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client:
            handle = await client.create_ledger(3, 2, 2, b"pw")
            victim = handle.metadata.last_ensemble[1]
            acknowledged: list[int] = []
            in_flight: list[asyncio.Future[int]] = []
            for i, data in enumerate(payloads):
                if i == 200:
                    by_id[victim].kill()
                await handle.wait_for_capacity()
                in_flight.append(handle.append(data))
                if len(in_flight) >= 32:
                    acknowledged.append(await in_flight.pop(0))
            acknowledged += await asyncio.gather(*in_flight)
            assert acknowledged == list(range(len(payloads)))
            metadata = (await handle.close()).value
            assert len(metadata.ensembles) >= 2, metadata.ensembles
            assert victim in metadata.ensembles[0][1]
            assert victim not in metadata.last_ensemble
            assert metadata.last_entry_id == len(payloads) - 1

        async with ledger_client(zk_connect) as reader_client:
            reader = await reader_client.open_ledger(handle.ledger_id, b"pw", recovery=False)
            assert reader.metadata.ensembles == metadata.ensembles
            assert await reader.read_entries(0, len(payloads) - 1) == payloads

    run(scenario())
    assert metric("blobstore_ledger_ensemble_changes_total") > changes_before


def test_suspended_bookie_reads_finish_through_speculative_reads(
    bookies: BookieFactory, zk_connect: str
) -> None:
    started = bookies(3)
    by_id = {b.bookie_id: b for b in started}
    rng = random.Random(6)
    payloads = [payload(rng, i, 2048) for i in range(60)]
    speculative_before = metric("blobstore_ledger_speculative_reads_total")

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client:
            handle = await client.create_ledger(3, 2, 2, b"pw")
            await asyncio.gather(*(handle.append(p) for p in payloads))
            await handle.close()
            stopped = by_id[handle.metadata.last_ensemble[0]]
        stopped.suspend()
        try:
            async with ledger_client(
                zk_connect, bookie_request_timeout_s=30, speculative_read_timeout_ms=50
            ) as reader_client:
                reader = await reader_client.open_ledger(handle.ledger_id, b"pw", recovery=False)
                # Bounded wait: far below the 30 s request timeout of the stopped bookie.
                got = await asyncio.wait_for(reader.read_entries(0, len(payloads) - 1), 15)
                assert got == payloads
        finally:
            stopped.resume()

    run(scenario())
    assert metric("blobstore_ledger_speculative_reads_total") >= speculative_before + 20


def _flip_payload_bytes(ledger_dir: Path, markers: list[bytes]) -> int:
    """Flip one byte inside each marker found in the bookie's entry logs."""
    flipped = 0
    for path in sorted(ledger_dir.rglob("*.log")):
        data = bytearray(path.read_bytes())
        for marker in markers:
            at = data.find(marker)
            while at >= 0:
                data[at + len(marker) - 1] ^= 0xFF
                flipped += 1
                at = data.find(marker, at + 1)
        path.write_bytes(bytes(data))
    return flipped


def test_corrupt_replica_is_detected_and_read_from_another(
    bookies: BookieFactory, zk_connect: str
) -> None:
    started = bookies(3)
    by_id = {b.bookie_id: b for b in started}
    rng = random.Random(8)
    payloads = [payload(rng, i, 4096) for i in range(30)]
    mismatches_before = metric("blobstore_ledger_digest_mismatches_total")

    async def scenario() -> None:
        async with ledger_client(zk_connect) as client:
            handle = await client.create_ledger(3, 2, 2, b"pw")
            await asyncio.gather(*(handle.append(p) for p in payloads))
            await handle.close()
        ensemble = handle.metadata.last_ensemble
        victim = by_id[ensemble[0]]
        # Entries whose first replica is the victim: reads in write-set order hit it first.
        first_on_victim = [
            i
            for i in range(len(payloads))
            if write_set_bookies(i, ensemble, 2)[0] == victim.bookie_id
        ]
        victim.stop()  # a clean stop checkpoints: the entries sit in the entry log
        markers = [payloads[i][:64] for i in first_on_victim]
        assert _flip_payload_bytes(victim.ledger_dir, markers) == len(markers)
        victim.start()
        async with ledger_client(zk_connect, read_replica_order="write_set") as reader_client:
            reader = await reader_client.open_ledger(handle.ledger_id, b"pw", recovery=False)
            assert await reader.read_entries(0, len(payloads) - 1) == payloads

    run(scenario())
    assert metric("blobstore_ledger_digest_mismatches_total") >= mismatches_before + 10
