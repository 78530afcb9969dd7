"""Decommission a bookie: copy every entry a bookie holds to other bookies,
take it out of every ledger's ensembles, then mark it safe to remove.

For every ledger whose ensembles name the bookie, segment by segment:

  1. pick a replacement: a writable, registered bookie not already in that segment's
     ensemble and not itself being decommissioned (rack-aware, as placement does);
     the choice is saved in ZooKeeper first, so a rerun reuses it;
  2. for each entry of the segment whose write set includes the bookie, read a copy
     from the other bookies of its write set (the bookie itself last), verify its digest
     and ids, and store it on the replacement with a RECOVERY_ADD under the ledger's
     master key (fsync'd by the replacement before it answers);
  3. replace the bookie in that segment of the metadata by compare-and-set on the znode
     version (on a conflict: read again, check the segment is unchanged, retry).

Open ledgers: segments of an OPEN ledger still change under its writer, so they are
never edited behind it. An OPEN (or IN_RECOVERY) ledger whose writer gateway is gone is
opened with recovery (fenced and closed) and then moved like any closed ledger. An OPEN
ledger of a live writer is waited for (`--wait-open-s`: writer pools close their
ledgers at a size or age limit) and else skipped with a message; `--fence-open` recovers
it anyway (safe: the writer's next append fails, so that PUT fails and is retried by its
client; nothing acknowledged is lost).

Ledger passwords: metadata keeps only a hash; the master key is derived from the
password, so the command tries the passwords the object layer uses (the one derived from
the cluster key and the ledger id, the fixed one: `blobstore/ledger/passwords.py`), the
empty one, and those given with `--password`, and picks the one whose hash matches.

Progress lives in ZooKeeper: `/ledgers/decommissioning/<bookie>` while the command runs
(with one child per ledger under way naming the chosen replacements), and
`/ledgers/decommissioned/<bookie>` once no ledger names the bookie: then it is safe to
stop it and wipe its disks. Interrupting and rerunning is safe: every step is idempotent
(a copy already present is overwritten with identical bytes; a segment already moved no
longer names the bookie).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiolimiter import AsyncLimiter
from kazoo.exceptions import NodeExistsError, NoNodeError

from blobstore.ledger import LedgerClient
from blobstore.ledger.bookie_client import BookieError, BookieUnavailableError
from blobstore.ledger.distribution_schedule import write_set_bookies
from blobstore.ledger.ensemble_placement import BookieInfo, choose_replacement
from blobstore.ledger.errors import (
    LedgerError,
    MetadataVersionConflictError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from blobstore.ledger.ledger_metadata import (
    LedgerMetadata,
    MetadataFormatError,
    Versioned,
)
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.ledger.replicas import OK, read_verified
from blobstore.recovery.metrics import REREPLICATED_BYTES
from blobstore.recovery.sweeper import GATEWAYS_PATH
from blobstore.runtime.aio import for_each
from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout
from blobstore.wire.protocol import master_key
from blobstore.wire.zk_layout import decommissioned_path, decommissioning_path

# progress(description, total) -> a context whose value advances the bar by n.
ProgressBar = Callable[[str, int], contextlib.AbstractContextManager[Callable[[int], None]]]


@contextlib.contextmanager
def no_progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    yield lambda n: None


logger = logging.getLogger(__name__)

DECOMMISSIONING_PATH = zk_layout.DECOMMISSIONING_PATH
DECOMMISSIONED_PATH = zk_layout.DECOMMISSIONED_PATH
# Besides the object ledgers' passwords, recovery moves ledgers made without one.
NO_PASSWORD = b""
CAS_ATTEMPTS_MAX = 16
COPY_WINDOW_ENTRIES = 16
LEDGER_CONCURRENCY_DEFAULT = 4
RECOVER_TIMEOUT_S = 60.0
WAIT_OPEN_POLL_S = 1.0


@dataclass(slots=True)
class LedgerOutcome:
    ledger_id: int
    status: str  # moved | not_on_bookie | skipped | failed | deleted
    detail: str = ""
    segments_moved: int = 0
    entries_copied: int = 0
    replacements: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "status": self.status,
            "detail": self.detail,
            "segments_moved": self.segments_moved,
            "entries_copied": self.entries_copied,
            "replacements": self.replacements,
        }


def recovery_passwords(passwords: LedgerPasswords) -> LedgerPasswords:
    """`passwords` and the empty one: what recovery tries on a ledger it moves."""
    return dataclasses.replace(passwords, foreign=(*passwords.foreign, NO_PASSWORD))


class SegmentCopyError(Exception):
    """A segment could not be copied (no good source copy, replacement refused)."""


class DecommissionOp:
    def __init__(
        self,
        zk: ZooKeeperClient,
        bookie_id: str,
        *,
        passwords: LedgerPasswords,
        wait_open_s: float,
        fence_open: bool,
        concurrency: int,
        started_by: str | None = None,
        rate_bytes_per_s: float = 0.0,
        progress: ProgressBar | None = None,
    ) -> None:
        """`started_by`: recorded in the decommissioning marker (the auditor names itself
        there, so it can tell its own markers from an operator's). `rate_bytes_per_s`:
        the most entry bytes copied per second (BookKeeper's replicationRateByBytes;
        0: no limit). `progress` draws the ledgers done (none in a server)."""
        self._zk = zk
        self._started_by = started_by
        self._progress = progress or no_progress
        self.bookie_id = bookie_id
        self._passwords = recovery_passwords(passwords)
        self._wait_open_s = wait_open_s
        self._fence_open = fence_open
        self._concurrency = concurrency
        # A bucket of one second's bytes: a burst never passes one second's worth.
        self._limiter = AsyncLimiter(rate_bytes_per_s, 1.0) if rate_bytes_per_s > 0 else None
        self.bytes_copied = 0
        self._client = LedgerClient(zk)
        self._candidates: list[BookieInfo] = []
        self._excluded: set[str] = set()
        self.outcomes: list[LedgerOutcome] = []
        self.remaining: list[int] = []
        self.safe_to_remove = False

    async def run(self) -> None:
        await self._client.start()
        try:
            await self._check_bookie_known()
            await self._mark_in_progress()
            await self._refresh_candidates()
            ledger_ids = await self._client.list_ledger_ids()
            with self._progress(f"ledgers off {self.bookie_id}", len(ledger_ids)) as adv:
                await for_each(ledger_ids, self._one_ledger, self._concurrency, adv)
            self.outcomes.sort(key=lambda o: o.ledger_id)
            self.remaining = await self._ledgers_naming_bookie()
            if not self.remaining:
                await self._mark_done()
        finally:
            await self._client.close()

    # ------------------------------------------------------------------ setup

    async def _check_bookie_known(self) -> None:
        registered = await self._zk.exists(zk_layout.available_path(self.bookie_id))
        cookie = await self._zk.exists(zk_layout.cookie_path(self.bookie_id))
        if registered is None and cookie is None:
            raise UsageError(
                f"unknown bookie {self.bookie_id}: neither registered nor holding a cookie"
            )

    async def _mark_in_progress(self) -> None:
        await self._zk.ensure_path(DECOMMISSIONING_PATH)
        try:
            marker: dict[str, Any] = {"started": time.time()}
            if self._started_by is not None:
                marker["by"] = self._started_by
            await self._zk.create(decommissioning_path(self.bookie_id), json.dumps(marker).encode())
        except NodeExistsError:
            pass  # a rerun after an interruption: resume

    async def _refresh_candidates(self) -> None:
        try:
            self._excluded = set(await self._zk.get_children(DECOMMISSIONING_PATH))
        except NoNodeError:
            self._excluded = set()
        try:
            self._excluded |= set(await self._zk.get_children(DECOMMISSIONED_PATH))
        except NoNodeError:
            pass
        self._excluded.add(self.bookie_id)
        bookies = await self._client.manager.bookies(refresh=True)
        self._candidates = [
            b for b in bookies if not b.read_only and b.bookie_id not in self._excluded
        ]

    # ------------------------------------------------------------------ per ledger

    async def _one_ledger(self, ledger_id: int) -> None:
        try:
            outcome = await self._move_ledger(ledger_id)
        except NoSuchLedgerError:
            outcome = LedgerOutcome(ledger_id, "deleted")
        except (
            LedgerError,
            SegmentCopyError,
            MetadataFormatError,
            BookieError,
            BookieUnavailableError,
            TimeoutError,
        ) as e:
            logger.warning(
                "event=decommission_ledger_failed bookie=%s ledger_id=%d error=%s",
                self.bookie_id,
                ledger_id,
                e,
            )
            outcome = LedgerOutcome(ledger_id, "failed", str(e) or repr(e))
        if outcome.status != "not_on_bookie":
            self.outcomes.append(outcome)

    async def _move_ledger(self, ledger_id: int) -> LedgerOutcome:
        versioned = await self._client.manager.read(ledger_id)
        if self.bookie_id not in versioned.value.all_bookies():
            return LedgerOutcome(ledger_id, "not_on_bookie")
        outcome = LedgerOutcome(ledger_id, "moved")
        password = self._passwords.matching(ledger_id, versioned.value.password_hash)
        if password is None:
            return LedgerOutcome(
                ledger_id,
                "skipped",
                f"unknown ledger password: not {self._passwords.describe()}, nor the empty "
                "one (written under another cluster key? another application's ledger: "
                "give its password with --password)",
            )
        if not versioned.value.closed:
            closed = await self._close_open_ledger(versioned, password)
            if isinstance(closed, str):
                return LedgerOutcome(ledger_id, "skipped", closed)
            versioned = closed
        plan = await self._load_plan(ledger_id)
        while True:
            metadata = versioned.value
            index = next(
                (i for i, (_, b) in enumerate(metadata.ensembles) if self.bookie_id in b), None
            )
            if index is None:
                break
            first_entry = metadata.ensembles[index][0]
            replacement = await self._replacement_for(metadata, index, plan)
            if plan.get(str(first_entry)) != replacement:
                plan[str(first_entry)] = replacement
                await self._save_plan(ledger_id, plan)
            outcome.entries_copied += await self._copy_segment(
                metadata, index, replacement, master_key(password)
            )
            versioned = await self._swap_in_metadata(ledger_id, first_entry, replacement)
            outcome.segments_moved += 1
            outcome.replacements.append(replacement)
            logger.info(
                "event=decommission_segment_moved bookie=%s ledger_id=%d first_entry=%d "
                "replacement=%s",
                self.bookie_id,
                ledger_id,
                first_entry,
                replacement,
            )
        await self._drop_plan(ledger_id)
        return outcome

    async def _close_open_ledger(
        self, versioned: Versioned[LedgerMetadata], password: bytes
    ) -> Versioned[LedgerMetadata] | str:
        """The ledger closed (recovered if its writer is gone), or why it was skipped."""
        ledger_id = versioned.value.ledger_id
        deadline = time.monotonic() + self._wait_open_s
        while True:
            metadata = versioned.value
            if metadata.closed:
                return versioned
            writer = metadata.custom.get("writer", "")
            alive = bool(writer) and (
                await self._zk.exists(f"{GATEWAYS_PATH}/{writer}") is not None
            )
            if not alive or self._fence_open:
                break
            if time.monotonic() >= deadline:
                return f"OPEN, its writer {writer} is alive: rerun later or pass --fence-open"
            await asyncio.sleep(WAIT_OPEN_POLL_S)
            versioned = await self._client.manager.read(ledger_id)
        logger.info(
            "event=decommission_recover_open_ledger bookie=%s ledger_id=%d writer=%s",
            self.bookie_id,
            ledger_id,
            versioned.value.custom.get("writer", ""),
        )
        await asyncio.wait_for(
            self._client.open_ledger(ledger_id, password, recovery=True), RECOVER_TIMEOUT_S
        )
        return await self._client.manager.read(ledger_id)

    async def _replacement_for(
        self, metadata: LedgerMetadata, index: int, plan: dict[str, str]
    ) -> str:
        first_entry, ensemble = metadata.ensembles[index]
        planned = plan.get(str(first_entry))
        candidate_ids = {c.bookie_id for c in self._candidates}
        if planned and planned in candidate_ids and planned not in ensemble:
            return planned
        try:
            return choose_replacement(
                self._candidates,
                ensemble,
                ensemble.index(self.bookie_id),
                metadata.write_quorum,
                exclude=self._excluded,
            )
        except NotEnoughBookiesError as e:
            raise SegmentCopyError(f"no bookie to take over: {e}") from None

    async def _copy_segment(
        self, metadata: LedgerMetadata, index: int, replacement: str, key: bytes
    ) -> int:
        first_entry, ensemble = metadata.ensembles[index]
        if index + 1 < len(metadata.ensembles):
            last_entry = metadata.ensembles[index + 1][0] - 1
        else:
            last_entry = metadata.last_entry_id
        entry_ids = [
            e
            for e in range(first_entry, last_entry + 1)
            if self.bookie_id in write_set_bookies(e, ensemble, metadata.write_quorum)
        ]
        pool = self._client.pool
        ledger_id = metadata.ledger_id

        async def copy(entry_id: int) -> None:
            write_set = write_set_bookies(entry_id, ensemble, metadata.write_quorum)
            sources = [b for b in write_set if b != self.bookie_id] + [self.bookie_id]
            for source in sources:
                outcome, data = await read_verified(pool, source, ledger_id, entry_id)
                if outcome == OK and data is not None:
                    break
            else:
                raise SegmentCopyError(
                    f"ledger {ledger_id} entry {entry_id}: no good copy on {sources}"
                )
            if self._limiter is not None:
                # An entry larger than a second's allowance takes the whole second.
                await self._limiter.acquire(min(len(data), self._limiter.max_rate))
            try:
                await pool.add_entry(replacement, ledger_id, entry_id, key, (data,), recovery=True)
            except (BookieError, BookieUnavailableError) as e:
                raise SegmentCopyError(
                    f"ledger {ledger_id} entry {entry_id}: {replacement} refused the copy: {e}"
                ) from e
            self.bytes_copied += len(data)
            REREPLICATED_BYTES.inc(len(data))

        await for_each(entry_ids, copy, COPY_WINDOW_ENTRIES)
        return len(entry_ids)

    async def _swap_in_metadata(
        self, ledger_id: int, first_entry: int, replacement: str
    ) -> Versioned[LedgerMetadata]:
        for _ in range(CAS_ATTEMPTS_MAX):
            versioned = await self._client.manager.read(ledger_id)
            metadata = versioned.value
            segments = list(metadata.ensembles)
            position = next((i for i, (f, _) in enumerate(segments) if f == first_entry), None)
            if position is None or self.bookie_id not in segments[position][1]:
                return versioned  # changed under us: the caller looks again
            if not metadata.closed:
                raise SegmentCopyError(f"ledger {ledger_id} was reopened while moving it")
            bookies = tuple(
                replacement if b == self.bookie_id else b for b in segments[position][1]
            )
            segments[position] = (first_entry, bookies)
            updated = dataclasses.replace(metadata, ensembles=tuple(segments))
            try:
                return await self._client.manager.write(updated, versioned.version)
            except MetadataVersionConflictError:
                continue
        raise SegmentCopyError(f"ledger {ledger_id}: metadata kept changing, gave up")

    # ------------------------------------------------------------------ plans

    def _plan_path(self, ledger_id: int) -> str:
        return f"{decommissioning_path(self.bookie_id)}/{ledger_id}"

    async def _load_plan(self, ledger_id: int) -> dict[str, str]:
        try:
            raw = json.loads((await self._zk.get(self._plan_path(ledger_id))).value)
        except (NoNodeError, ValueError):
            return {}
        return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}

    async def _save_plan(self, ledger_id: int, plan: dict[str, str]) -> None:
        data = json.dumps(plan).encode()
        try:
            await self._zk.set(self._plan_path(ledger_id), data)
        except NoNodeError:
            await self._zk.create(self._plan_path(ledger_id), data, makepath=True)

    async def _drop_plan(self, ledger_id: int) -> None:
        try:
            await self._zk.delete(self._plan_path(ledger_id))
        except NoNodeError:
            pass

    # ------------------------------------------------------------------ end

    async def _ledgers_naming_bookie(self) -> list[int]:
        naming = []
        for ledger_id in await self._client.list_ledger_ids():
            try:
                metadata = await self._client.get_metadata(ledger_id)
            except NoSuchLedgerError:
                continue
            if self.bookie_id in metadata.all_bookies():
                naming.append(ledger_id)
        return naming

    async def _mark_done(self) -> None:
        moved = [o for o in self.outcomes if o.status == "moved"]
        value = json.dumps(
            {
                "finished": time.time(),
                "ledgers_moved": len(moved),
                "entries_copied": sum(o.entries_copied for o in moved),
                "bytes_copied": self.bytes_copied,
            }
        ).encode()
        await self._zk.ensure_path(DECOMMISSIONED_PATH)
        try:
            await self._zk.create(decommissioned_path(self.bookie_id), value)
        except NodeExistsError:
            await self._zk.set(decommissioned_path(self.bookie_id), value)
        await self._zk.delete_recursive(decommissioning_path(self.bookie_id))
        self.safe_to_remove = True
        logger.info("event=bookie_decommissioned bookie=%s", self.bookie_id)
