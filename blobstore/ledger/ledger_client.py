"""LedgerClient: create, open (with or without recovery), delete and list ledgers.

One client per process is enough: it shares one BookieClientPool (one connection per
bookie) and one ZooKeeper session among all its ledger handles.

A ledger's password is given as bytes, or as `LedgerPasswords` (object ledgers,
`passwords.py`): a new ledger then gets the password of the id it is allocated, and
opening takes the known password whose hash the metadata keeps.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from blobstore.ledger.bookie_client import BookieClientPool
from blobstore.ledger.config import LedgerConfig
from blobstore.ledger.ensemble_placement import BookieInfo, Quorums, choose_ensemble, fit_quorums
from blobstore.ledger.errors import BadLedgerConfigError, LedgerUnauthorizedError
from blobstore.ledger.ledger_handle import LedgerHandle
from blobstore.ledger.ledger_manager import LedgerManager
from blobstore.ledger.ledger_metadata import (
    LedgerMetadata,
    check_quorums,
    new_metadata,
    password_hash,
)
from blobstore.ledger.ledger_recovery_op import LedgerRecoveryOp
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.ledger.read_repair import ReadRepairQueue
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)


class LedgerClient:
    def __init__(
        self,
        zk: ZooKeeperClient,
        pool: BookieClientPool | None = None,
        config: LedgerConfig | None = None,
    ) -> None:
        self.config = (config or LedgerConfig.from_env()).validate()
        self.zk = zk
        self._own_pool = pool is None
        self.pool = pool or BookieClientPool(
            connect_timeout_s=self.config.bookie_connect_timeout_s,
            request_timeout_s=self.config.bookie_request_timeout_s,
            in_flight_max=self.config.bookie_in_flight_max,
        )
        self.manager = LedgerManager(zk, bookie_list_cache_s=self.config.bookie_list_cache_s)
        self.read_repair = ReadRepairQueue(zk)
        self._rng = random.Random()

    async def start(self) -> None:
        """Create the base znodes if needed and start watching /ledgers/available."""
        await self.manager.start()

    async def close(self) -> None:
        """Close the bookie connections (if this client made the pool). Ledgers stay as
        they are: open ones are recovered by whoever opens them next. Copies noted for
        read-repair are written first (for a few seconds at most)."""
        await self.read_repair.close()
        if self._own_pool:
            await self.pool.close()

    async def __aenter__(self) -> LedgerClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ bookies

    async def writable_bookies(self) -> list[BookieInfo]:
        return [b for b in await self.manager.bookies() if not b.read_only]

    async def placement_candidates(
        self, *, refresh: bool = True
    ) -> tuple[list[BookieInfo], set[str]]:
        """(every registered bookie, the ids of those not to place on: unreachable from
        this client or being drained). Placement also skips read-only ones, and names
        every read-only bookie when that leaves too few."""
        bookies = await self.manager.bookies(refresh=refresh)
        unusable = set(await self.manager.draining_bookies())
        unusable.update(b.bookie_id for b in bookies if self.pool.is_unreachable(b.bookie_id))
        return bookies, unusable

    # ------------------------------------------------------------------ ledgers

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        password: bytes | LedgerPasswords = b"",
        metadata: dict[str, str] | None = None,
        *,
        ack_quorum_min: int | None = None,
    ) -> LedgerHandle:
        """A new ledger on E writable bookies. With `ack_quorum_min`, fewer writable
        bookies than E (one of three down) shrink E, then WQ, then AQ to the bookies
        there are, AQ never below `ack_quorum_min`; without it, E bookies or an error.
        `password`: the ledger's, or LedgerPasswords (the one for the id allocated)."""
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        if not isinstance(password, (bytes, LedgerPasswords)):
            raise BadLedgerConfigError("password must be bytes or LedgerPasswords")
        password_of = _password_function(password)
        candidates, unusable = await self.placement_candidates(refresh=False)
        quorums = Quorums(ensemble_size, write_quorum, ack_quorum)
        if ack_quorum_min is not None:
            quorums = fit_quorums(quorums, candidates, ack_quorum_min, exclude=unusable)
        ensemble = choose_ensemble(
            candidates, quorums.ensemble_size, quorums.write_quorum, exclude=unusable, rng=self._rng
        )
        versioned = await self.manager.create(
            lambda ledger_id: new_metadata(
                ledger_id,
                ensemble,
                quorums.write_quorum,
                quorums.ack_quorum,
                password_of(ledger_id),
                metadata,
            )
        )
        ledger_id = versioned.value.ledger_id
        logger.info(
            "ledger_created ledger_id=%d ensemble=%s E=%d WQ=%d AQ=%d",
            ledger_id,
            list(ensemble),
            quorums.ensemble_size,
            quorums.write_quorum,
            quorums.ack_quorum,
        )
        if ack_quorum_min is not None and quorums.ack_quorum < 2:
            logger.warning(
                "event=single_copy_ledger ledger_id=%d ensemble=%s AQ=%d wanted_AQ=%d: "
                "writes to it are acknowledged with one copy (single copies allowed)",
                ledger_id,
                list(ensemble),
                quorums.ack_quorum,
                ack_quorum,
            )
        return LedgerHandle(self, versioned, password_of(ledger_id), writable=True)

    async def open_ledger(
        self, ledger_id: int, password: bytes | LedgerPasswords = b"", *, recovery: bool = True
    ) -> LedgerHandle:
        """A read handle. With recovery, an OPEN ledger is fenced and closed first.
        LedgerUnauthorizedError when the ledger's password is not `password` (not one
        of those it knows, for LedgerPasswords)."""
        versioned = await self.manager.read(ledger_id)
        password = _ledger_password(ledger_id, versioned.value.password_hash, password)
        if recovery and not versioned.value.closed:
            versioned = await LedgerRecoveryOp(self, ledger_id, password).run()
        handle = LedgerHandle(self, versioned, password, writable=False)
        if not versioned.value.closed:
            await handle.read_last_add_confirmed()
        return handle

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the metadata; bookies drop the entries at their next garbage collection."""
        await self.manager.delete(ledger_id)
        logger.info("ledger_deleted ledger_id=%d", ledger_id)

    async def get_metadata(self, ledger_id: int) -> LedgerMetadata:
        return (await self.manager.read(ledger_id)).value

    async def list_ledger_ids(self) -> list[int]:
        return await self.manager.list_ledger_ids()


def _password_function(password: bytes | LedgerPasswords) -> Callable[[int], bytes]:
    """Ledger id -> the password a new ledger of that id gets."""
    if isinstance(password, LedgerPasswords):
        return password.for_new_ledger
    return lambda _ledger_id: password


def _ledger_password(ledger_id: int, stored_hash: str, password: bytes | LedgerPasswords) -> bytes:
    """The password whose hash the ledger's metadata keeps; LedgerUnauthorizedError
    when it is not `password` (none of them)."""
    if isinstance(password, bytes):
        if stored_hash != password_hash(password):
            raise LedgerUnauthorizedError(
                f"ledger_id={ledger_id}: wrong password", ledger_id=ledger_id
            )
        return password
    known = password.matching(ledger_id, stored_hash)
    if known is None:
        raise LedgerUnauthorizedError(
            f"ledger_id={ledger_id}: wrong password: none of those known here "
            f"({password.describe()}) is the ledger's; was it written under another "
            "cluster key?",
            ledger_id=ledger_id,
        )
    return known
