"""Condemned ledgers: ledgers the maintenance job is about to delete, which no commit may
start to reference.

The maintenance job deletes a ledger only in two steps (docs/maintenance.md, "Deleting a
ledger safely"): it *condemns* the ledgers its scan found unreferenced, and deletes a
condemned ledger only after a second scan, begun after the condemnation, found no
reference to it either. Between the two, every commit that would add a reference to a
ledger (a PUT or part naming its new entries, a COPY or UploadPartCopy sharing a
source's entries, a completion turning parts into an object, a compaction's swap) checks
the ledger against this set, and the check is part of the commit's own `multi`:

    <catalog root>/condemned                 its data version is the *generation*
    <catalog root>/condemned/<ledger id>     {"since": epoch s, "deleted": epoch s|null}

A process reads the children once per generation and keeps them (`CondemnedLedgers`). A
commit naming new ledgers is refused (`LedgerCondemnedError`) when one is in the set, and
otherwise carries `check(<root>/condemned, generation)`: a condemnation made after the
set was read bumps the generation, the commit's multi fails, and it is decided again on
the new set. So a reference added after a condemnation never lands, and one added before
it is in ZooKeeper when the second scan starts, which sees it and absolves the ledger.

A deleted ledger stays in the set, as a tombstone, for `TOMBSTONE_S` (a commit prepared
from a record read before the deletion, a COPY's source, is refused on it); the job
removes older tombstones.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

TOMBSTONE_S = 7 * 86400.0
# A process's copy is read again after this long even when no commit's check failed, so
# that a ledger absolved meanwhile is not refused for good by a process that only ever
# names it (its refusals change nothing in ZooKeeper, so no check fails to tell it).
VIEW_TTL_S = 30.0
LOAD_ATTEMPTS_MAX = 20
WRITES_IN_FLIGHT_MAX = 64

Operation = tuple[str, tuple[Any, ...]]


def ledger_node(ledger_id: int) -> str:
    return f"{ledger_id:019d}"


@dataclass(frozen=True, slots=True)
class Condemnation:
    ledger_id: int
    since: float  # when it was condemned
    deleted: float | None = None  # when its metadata was deleted (a tombstone since)
    # The zxid that created the condemnation: it took effect with the next generation
    # bump, so a scan that began after a bump at a later zxid covers it.
    czxid: int = 0

    def encode(self) -> bytes:
        return orjson.dumps({"since": self.since, "deleted": self.deleted})

    @classmethod
    def decode(cls, ledger_id: int, data: bytes, czxid: int = 0) -> Condemnation:
        value = orjson.loads(data) if data else {}
        return cls(ledger_id, float(value.get("since", 0.0)), value.get("deleted"), czxid)


@dataclass(frozen=True, slots=True)
class CondemnedView:
    """The set as of one generation."""

    generation: int
    ids: frozenset[int]

    def refused(self, ledgers: Iterable[int]) -> list[int]:
        """The ledgers of `ledgers` that may not be referenced anew."""
        return sorted(ledger for ledger in ledgers if ledger in self.ids)


class CondemnedLedgers:
    """One process's copy of the condemned set, read once per generation."""

    def __init__(self, zk: ZooKeeperClient, path: str) -> None:
        self.zk = zk
        self.path = path
        self._view: CondemnedView | None = None
        self._read_at = 0.0
        self._loading: asyncio.Future[CondemnedView] | None = None

    async def view(self) -> CondemnedView:
        """The set as last read (read now if never read, since `invalidate`, or for
        VIEW_TTL_S)."""
        if self._view is not None and time.monotonic() - self._read_at < VIEW_TTL_S:
            return self._view
        if self._loading is None or self._loading.done():
            self._loading = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._loading)

    def invalidate(self, generation: int) -> None:
        """A commit's check of `generation` failed: read the set again before the next."""
        if self._view is not None and self._view.generation <= generation:
            self._view = None

    async def moved_on(self, view: CondemnedView) -> bool:
        """Whether the set's generation has passed `view`'s (one `exists`); if so the
        next `view()` reads it again. A refusal is decided on the current set, not on one
        up to VIEW_TTL_S old."""
        stat = await self.zk.exists(self.path)
        if stat is not None and stat.version == view.generation:
            return False
        self.invalidate(view.generation)
        return True

    def check_operation(self, view: CondemnedView) -> Operation:
        return ("check", (self.path, view.generation))

    async def _load(self) -> CondemnedView:
        for _ in range(LOAD_ATTEMPTS_MAX):
            before = await self.zk.exists(self.path)
            if before is None:
                await self.zk.ensure_path(self.path)
                continue
            started = time.monotonic()
            children = await self.zk.get_children(self.path)
            after = await self.zk.exists(self.path)
            if after is not None and after.version == before.version:
                self._read_at = started
                view = CondemnedView(after.version, frozenset(int(c) for c in children))
                self._view = view
                return view
        raise BadVersionError()  # condemned and absolved faster than it can be read

    # ------------------------------------------------------------ the job's side

    async def read_all(self) -> dict[int, Condemnation]:
        """Every condemnation and tombstone, with its times."""
        await self.zk.ensure_path(self.path)
        children = await self.zk.get_children(self.path)
        semaphore = asyncio.Semaphore(WRITES_IN_FLIGHT_MAX)

        async def read(child: str) -> Condemnation | None:
            async with semaphore:
                try:
                    data, stat = await self.zk.get_with_stat(f"{self.path}/{child}")
                except NoNodeError:
                    return None
            return Condemnation.decode(int(child), data, stat.czxid)

        found = await asyncio.gather(*(read(c) for c in children))
        return {c.ledger_id: c for c in found if c is not None}

    async def covered_zxid(self) -> int:
        """The zxid of the latest generation bump: a scan that starts (with a sync) after
        this is read covers every condemnation created before it."""
        await self.zk.ensure_path(self.path)
        stat = await self.zk.exists(self.path)
        assert stat is not None
        return int(stat.mzxid)

    async def condemn(self, ledger_ids: Iterable[int], now: float) -> int:
        """Condemn the ledgers, then bump the generation (returned): from then on no
        commit adds a reference to them."""
        await self._each(ledger_ids, lambda i: self._create(Condemnation(i, now)))
        return await self._bump()

    async def absolve(self, ledger_ids: Iterable[int]) -> int:
        """A condemned ledger found referenced after all: references to it are allowed
        again."""
        await self._each(ledger_ids, self._delete)
        return await self._bump()

    async def mark_deleted(self, condemnation: Condemnation, now: float) -> None:
        tombstone = Condemnation(
            condemnation.ledger_id, condemnation.since, now, condemnation.czxid
        )
        path = f"{self.path}/{ledger_node(condemnation.ledger_id)}"
        await self.zk.set(path, tombstone.encode(), -1)

    async def forget(self, ledger_ids: Iterable[int]) -> int:
        """Remove old tombstones."""
        return await self.absolve(ledger_ids)

    async def _create(self, condemnation: Condemnation) -> None:
        path = f"{self.path}/{ledger_node(condemnation.ledger_id)}"
        try:
            await self.zk.create(path, condemnation.encode())
        except NodeExistsError:
            pass

    async def _delete(self, ledger_id: int) -> None:
        try:
            await self.zk.delete(f"{self.path}/{ledger_node(ledger_id)}")
        except NoNodeError:
            pass

    async def _each(self, ledger_ids: Iterable[int], write: Any) -> None:
        semaphore = asyncio.Semaphore(WRITES_IN_FLIGHT_MAX)

        async def one(ledger_id: int) -> None:
            async with semaphore:
                await write(ledger_id)

        await asyncio.gather(*(one(i) for i in ledger_ids))

    async def _bump(self) -> int:
        await self.zk.ensure_path(self.path)
        generation = await self.zk.set(self.path, b"", -1)
        self._view = None
        return generation
