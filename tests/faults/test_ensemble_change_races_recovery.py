"""A live writer loses a bookie (so it changes ensemble) at the moment another client
recovers its ledger: whichever metadata compare-and-set wins, the writer never has an
add acknowledged beyond the end the recovery chose, the writer's later adds fail, and
every entry up to that end reads back with the writer's bytes.

tests/ledger/test_ledger_recovery.py fences paused and killed writers; here the
writer is running and mid ensemble change, with the kill and the recovery shifted
against each other by a few milliseconds each round.
"""

from __future__ import annotations

import asyncio
import os
import random

from blobstore.ledger import LedgerClient
from blobstore.ledger.errors import LedgerError
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.ledger.conftest import ledger_client, run

PASSWORD = b"race"
ROUNDS = 8
WARM_ENTRIES = 20
IN_FLIGHT_MAX = 16
WRITER_DEADLINE_S = 60.0


def payload(ledger_id: int, entry_id: int) -> bytes:
    return f"{ledger_id}:{entry_id}:".encode() * 200


async def _write_until_stopped(client: LedgerClient, handle, acked: list[int]) -> BaseException:  # type: ignore[no-untyped-def]
    """Pipelined appends until the handle fails; returns that failure."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WRITER_DEADLINE_S
    in_flight: list[asyncio.Future[int]] = []
    entry_id = acked[-1]
    try:
        while loop.time() < deadline:
            await handle.wait_for_capacity()
            entry_id += 1  # the handle numbers appends consecutively
            in_flight.append(handle.append(payload(handle.ledger_id, entry_id)))
            if len(in_flight) >= IN_FLIGHT_MAX:
                acked.append(await in_flight.pop(0))
            else:
                await asyncio.sleep(0)
        raise AssertionError("the writer was never stopped")
    except LedgerError as e:
        for future in in_flight:
            if future.done() and not future.cancelled() and future.exception() is None:
                acked.append(future.result())
        return e


def test_writer_ensemble_change_races_recovery(bookies: BookieFactory, zk_connect: str) -> None:
    processes = bookies(4)
    rng = random.Random(int(os.environ.get("BLOBSTORE_TEST_SEED", "20261121")))

    async def scenario() -> None:
        async with (
            ledger_client(zk_connect) as writer_client,
            ledger_client(zk_connect) as recovery_client,
        ):
            loop = asyncio.get_running_loop()
            for round_index in range(ROUNDS):
                handle = await writer_client.create_ledger(3, 2, 2, password=PASSWORD)
                ledger_id = handle.ledger_id
                for entry_id in range(WARM_ENTRIES):
                    await handle.add_entry(payload(ledger_id, entry_id))
                acked: list[int] = list(range(WARM_ENTRIES))
                writer = asyncio.ensure_future(_write_until_stopped(writer_client, handle, acked))
                await asyncio.sleep(rng.uniform(0.0, 0.1))
                ensemble = set(handle.metadata.last_ensemble)
                victim = rng.choice([b for b in processes if b.bookie_id in ensemble])
                shift_s = rng.uniform(-0.03, 0.15)

                async def kill(victim: BookieProcess = victim, shift_s: float = shift_s) -> None:
                    await asyncio.sleep(max(0.0, -shift_s))
                    await loop.run_in_executor(None, victim.kill)

                async def recover(ledger_id: int = ledger_id, shift_s: float = shift_s) -> int:
                    await asyncio.sleep(max(0.0, shift_s))
                    recovered = await recovery_client.open_ledger(
                        ledger_id, PASSWORD, recovery=True
                    )
                    return recovered.metadata.last_entry_id

                _, last_entry_id = await asyncio.gather(kill(), recover())
                failure = await asyncio.wait_for(writer, WRITER_DEADLINE_S)
                print(
                    f"round={round_index} ledger_id={ledger_id} shift_ms={shift_s * 1000:.0f} "
                    f"last_acked={max(acked)} recovered_end={last_entry_id} writer={failure!r}"
                )
                assert acked == sorted(acked), "acks came in entry order"
                assert max(acked) <= last_entry_id, "an add acked beyond the recovered end"
                reader = await recovery_client.open_ledger(ledger_id, PASSWORD, recovery=False)
                assert reader.is_closed and reader.metadata.last_entry_id == last_entry_id
                entries = await reader.read_entries(0, last_entry_id)
                assert entries == [payload(ledger_id, e) for e in range(last_entry_id + 1)]
                try:
                    await asyncio.wait_for(handle.add_entry(b"zombie"), 30)
                    raise AssertionError("a fenced writer appended")
                except LedgerError:
                    pass
                await loop.run_in_executor(None, victim.start)

    run(scenario(), timeout_s=300)
