"""A seeded randomized run of writers, concurrent recoveries, kill -9, restarts and SIGSTOP
of bookies, checking the ledger guarantees after every step:

- no acknowledged entry is lost (it reads back with the bytes written);
- every reader sees the same bytes for an entry id (repeatable read), in order;
- a closed ledger never changes its end, and its end is at or after its last
  acknowledged entry.

Seed: BLOBSTORE_TEST_SEED (printed on failure; rerun with it to replay the same choices).
The default run is short (~40 s of steps); the soak variant runs for ten minutes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

import pytest

from blobstore.ledger import (
    AddOutcomeUnknownError,
    LedgerClient,
    LedgerClosedError,
    LedgerHandle,
)
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.ledger.conftest import ledger_client, run, test_seed

BOOKIE_COUNT = 5
CHECKED_CLOSED_LEDGERS_MAX = 6
PASSWORD = b"randomized"


@dataclasses.dataclass
class LedgerModel:
    ledger_id: int
    acknowledged: list[bytes] = dataclasses.field(default_factory=list)
    closed_end: tuple[int, int] | None = None  # (last_entry_id, length) once CLOSED
    seen: dict[int, bytes] = dataclasses.field(default_factory=dict)


class Scenario:
    def __init__(self, rng: random.Random, zk_connect: str, bookies: list[BookieProcess]) -> None:
        self.rng = rng
        self.zk_connect = zk_connect
        self.bookies = bookies
        self.ledgers: dict[int, LedgerModel] = {}
        self.writer: LedgerHandle | None = None
        self.writer_model: LedgerModel | None = None
        self.log: list[str] = []
        self.down: BookieProcess | None = None  # at most one bookie down at a time

    def note(self, text: str) -> None:
        self.log.append(f"{time.monotonic():.2f} {text}")

    # ------------------------------------------------------------------ actions

    async def new_writer(self, client: LedgerClient) -> None:
        if self.writer is not None and self.rng.random() < 0.5:
            await self.close_writer()
        write_quorum = self.rng.choice((2, 3))
        self.writer = await client.create_ledger(3, write_quorum, 2, PASSWORD)
        self.writer_model = LedgerModel(self.writer.ledger_id)
        self.ledgers[self.writer.ledger_id] = self.writer_model
        self.note(f"new ledger {self.writer.ledger_id} WQ={write_quorum}")

    async def close_writer(self) -> None:
        assert self.writer is not None and self.writer_model is not None
        try:
            closed = (await self.writer.close()).value
        except AddOutcomeUnknownError as e:  # fenced by a recovery meanwhile
            self.note(f"close of {self.writer.ledger_id} refused: {e}")
        else:
            self.record_closed(self.writer_model, closed.last_entry_id, closed.length)
            assert closed.last_entry_id == len(self.writer_model.acknowledged) - 1
        self.writer = self.writer_model = None

    async def write_burst(self, client: LedgerClient) -> None:
        if self.writer is None:
            await self.new_writer(client)
        assert self.writer is not None and self.writer_model is not None
        model = self.writer_model
        count = self.rng.randrange(1, 40)
        payloads = [
            self.rng.randbytes(self.rng.choice((0, 10, 1000, 20_000))) for _ in range(count)
        ]
        futures = []
        try:
            for data in payloads:
                await self.writer.wait_for_capacity()
                futures.append(self.writer.append(data))
        except (AddOutcomeUnknownError, LedgerClosedError) as e:
            self.note(f"append on {model.ledger_id} refused: {e}")
        results = await asyncio.gather(*futures, return_exceptions=True)
        for data, result in zip(payloads, results, strict=False):
            if isinstance(result, BaseException):
                assert isinstance(result, AddOutcomeUnknownError), repr(result)
                self.note(f"add on {model.ledger_id} outcome unknown: {result}")
                self.writer = self.writer_model = None
                return
            assert result == len(model.acknowledged), (result, len(model.acknowledged))
            model.acknowledged.append(data)
        self.note(f"wrote {count} to {model.ledger_id}, acked {len(model.acknowledged)}")

    async def recover(self) -> None:
        open_ledgers = [m for m in self.ledgers.values() if m.closed_end is None]
        if not open_ledgers:
            return
        model = self.rng.choice(open_ledgers)
        racers = self.rng.choice((1, 2))
        self.note(f"recover {model.ledger_id} x{racers}")
        async with (
            ledger_client(self.zk_connect) as first,
            ledger_client(self.zk_connect) as second,
        ):
            clients = [first, second][:racers]
            handles = await asyncio.gather(
                *(c.open_ledger(model.ledger_id, PASSWORD, recovery=True) for c in clients)
            )
        ends = {(h.metadata.last_entry_id, h.metadata.length) for h in handles}
        assert len(ends) == 1, ends
        last_entry_id, length = ends.pop()
        self.record_closed(model, last_entry_id, length)
        if model is self.writer_model:
            assert self.writer is not None
            try:
                await asyncio.wait_for(self.writer.add_entry(b"zombie"), 30)
            except AddOutcomeUnknownError:
                pass
            else:
                raise AssertionError("a fenced writer's add succeeded")
            self.writer = self.writer_model = None

    def record_closed(self, model: LedgerModel, last_entry_id: int, length: int) -> None:
        assert last_entry_id >= len(model.acknowledged) - 1, (
            last_entry_id,
            len(model.acknowledged),
        )
        if model.closed_end is not None:
            assert model.closed_end == (last_entry_id, length), (model.closed_end, last_entry_id)
        model.closed_end = (last_entry_id, length)
        self.note(f"ledger {model.ledger_id} closed at {last_entry_id} length {length}")

    def kill_bookie(self) -> None:
        if self.down is not None:
            return
        self.down = self.rng.choice(self.bookies)
        self.note(f"kill -9 {self.down.bookie_id}")
        self.down.kill()

    def restart_bookie(self) -> None:
        if self.down is None:
            return
        self.note(f"restart {self.down.bookie_id}")
        self.down.start()
        self.down = None

    async def suspend_during_io(self, client: LedgerClient) -> None:
        if self.down is not None:
            return
        victim = self.rng.choice(self.bookies)
        self.note(f"SIGSTOP {victim.bookie_id}")
        victim.suspend()
        try:
            await self.write_burst(client)
            await self.check()
        finally:
            victim.resume()
            self.note(f"SIGCONT {victim.bookie_id}")

    # ------------------------------------------------------------------ invariants

    async def check(self, *, full: bool = False) -> None:
        order = self.rng.choice(("write_set", "random"))
        async with ledger_client(self.zk_connect, read_replica_order=order) as client:
            # The writer's ledger, the open ones, and a sample of the rest: bounded per step.
            models = list(self.ledgers.values())
            chosen = [m for m in models if m.closed_end is None or m is self.writer_model]
            rest = [m for m in models if m not in chosen]
            chosen += (
                rest if full else self.rng.sample(rest, min(len(rest), CHECKED_CLOSED_LEDGERS_MAX))
            )
            for model in chosen:
                handle = await client.open_ledger(model.ledger_id, PASSWORD, recovery=False)
                metadata = handle.metadata
                if model.closed_end is not None:
                    assert metadata.closed
                    assert (metadata.last_entry_id, metadata.length) == model.closed_end
                elif metadata.closed:
                    # Closed by its writer in another step: learn it now.
                    self.record_closed(model, metadata.last_entry_id, metadata.length)
                last = handle.last_add_confirmed
                if last < 0:
                    continue
                first = self.rng.randrange(0, last + 1)
                entries = await handle.read_entries(first, last)
                for entry_id, data in enumerate(entries, start=first):
                    if entry_id < len(model.acknowledged):
                        assert data == model.acknowledged[entry_id], (model.ledger_id, entry_id)
                    previous = model.seen.setdefault(entry_id, bytes(data))
                    assert previous == data, (model.ledger_id, entry_id)
                if model.closed_end is not None:
                    assert len(model.acknowledged) - 1 <= last


def randomized_run(bookies: BookieFactory, zk_connect: str, budget_s: float) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    started = bookies(BOOKIE_COUNT)
    scenario = Scenario(rng, zk_connect, started)

    async def main() -> None:
        deadline = time.monotonic() + budget_s
        async with ledger_client(zk_connect, bookie_request_timeout_s=2.0) as client:
            await scenario.new_writer(client)
            step = 0
            while time.monotonic() < deadline:
                step += 1
                action = rng.choices(
                    ("write", "new_writer", "recover", "kill", "restart", "suspend"),
                    weights=(10, 2, 3, 1.5, 1.5, 0.7),
                )[0]
                scenario.note(f"step {step}: {action}")
                if action == "write":
                    await scenario.write_burst(client)
                elif action == "new_writer":
                    await scenario.new_writer(client)
                elif action == "recover":
                    await scenario.recover()
                elif action == "kill":
                    scenario.kill_bookie()
                elif action == "restart":
                    scenario.restart_bookie()
                else:
                    await scenario.suspend_during_io(client)
                await scenario.check()
            scenario.restart_bookie()
            await scenario.check(full=True)
            scenario.note(f"done after {step} steps")

    try:
        run(main(), timeout_s=budget_s + 180)
    except BaseException:
        print(f"randomized ledger test failed: BLOBSTORE_TEST_SEED={seed}")
        print("\n".join(scenario.log[-60:]))
        raise
    assert sum(len(m.acknowledged) for m in scenario.ledgers.values()) > 0
    actions = [
        line.split(": ", 1)[1] for line in scenario.log if ": " in line and " step " in f" {line}"
    ]
    print(
        f"seed={seed} ledgers={len(scenario.ledgers)} actions={ {a: actions.count(a) for a in set(actions)} }"
    )


def test_randomized_writers_recoveries_and_bookie_faults(
    bookies: BookieFactory, zk_connect: str
) -> None:
    randomized_run(bookies, zk_connect, budget_s=40)


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_randomized_soak(bookies: BookieFactory, zk_connect: str) -> None:
    randomized_run(bookies, zk_connect, budget_s=600)
