"""Gateway registration and the sweeper of ledgers whose writer is gone.

Every gateway process registers an ephemeral znode `/gateways/<gateway id>` and names
itself as the `writer` in the custom metadata of every ledger it creates. A gateway
killed mid-PUT leaves its writer ledgers OPEN; nothing references their last entries
(the record was never committed), but an OPEN ledger can neither be compacted nor
deleted. Every gateway runs a sweeper: whoever notices first opens such a ledger with
recovery, which fences it on its bookies and closes it at its last recoverable entry.

Scenario the sweeper handles:
  1. gateway A appends entries 0..40 of a large object to ledger 7 and is killed (-9);
  2. A's session expires, ZooKeeper removes /gateways/A;
  3. gateway B's sweeper lists ledgers, sees ledger 7 OPEN with writer=A, A not
     registered: B opens ledger 7 with recovery; ledger 7 is CLOSED at entry 40;
  4. the object A was writing never became visible: its old version is still served.
A gateway whose own session expired re-registers; its ledgers may have been fenced
meanwhile, which fails its appends in flight (those PUTs fail, nothing is committed).

A pass lists every ledger, so the cluster runs one every half to whole interval, not
one per gateway process: a process whose turn comes skips it when `/sweeper` says a
pass finished less than half an interval ago, or when another holds `/sweeper/lock` (an
ephemeral znode: a pass cut short by a crash releases it with its session). With many
gateways of many workers, ZooKeeper sees a full listing once or twice a minute instead
of once a minute per worker; any process still sweeps when the others are gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Callable

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from blobstore.ledger import LedgerClient
from blobstore.ledger.config import OBJECT_LEDGER_PURPOSE as PURPOSE
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.ledger.passwords import LedgerPasswords
from blobstore.recovery.cluster_singleton import ClusterSingleton
from blobstore.recovery.metrics import SWEEP_ROUNDS, SWEPT_LEDGERS
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

GATEWAYS_PATH = "/gateways"
SWEEPER_PATH = "/sweeper"
SWEEPER_LOCK_PATH = "/sweeper/lock"
RECOVER_TIMEOUT_S = 60.0


def gateway_path(gateway_id: str) -> str:
    return f"{GATEWAYS_PATH}/{gateway_id}"


class GatewayRegistration:
    """The ephemeral znode saying this gateway process is alive (re-created after LOST)."""

    def __init__(self, zk: ZooKeeperClient, gateway_id: str) -> None:
        self._zk = zk
        self.gateway_id = gateway_id
        self._value = json.dumps(
            {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        ).encode()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def start(self) -> None:
        await self._zk.ensure_path(GATEWAYS_PATH)
        await self._register()
        self._zk.add_state_listener(self._state_changed)

    async def _register(self) -> None:
        try:
            await self._zk.create(gateway_path(self.gateway_id), self._value, ephemeral=True)
        except NodeExistsError:
            pass  # already registered by this session (a retried create)
        logger.info("event=gateway_registered gateway_id=%s", self.gateway_id)

    def _state_changed(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED and not self._closed:
            task = asyncio.create_task(self._reregister())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _reregister(self) -> None:
        try:
            if await self._zk.exists(gateway_path(self.gateway_id)) is None:
                await self._register()
        except Exception as e:  # noqa: BLE001 - the next state change tries again
            logger.warning(
                "event=gateway_reregister_failed gateway_id=%s error=%r", self.gateway_id, e
            )

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        try:
            await self._zk.delete(gateway_path(self.gateway_id))
        except NoNodeError:
            pass
        except Exception as e:  # noqa: BLE001 - the session's end removes it anyway
            logger.warning(
                "event=gateway_unregister_failed gateway_id=%s error=%r", self.gateway_id, e
            )


class LedgerSweeper(ClusterSingleton):
    """Finds OPEN object ledgers whose writer is not registered and recovers them."""

    name = "ledger_sweep"

    def __init__(
        self,
        zk: ZooKeeperClient,
        client: LedgerClient,
        gateway_id: str,
        interval_s: float,
        owned_ledger_ids: Callable[[], set[int]],
        passwords: LedgerPasswords | None = None,
    ) -> None:
        """`passwords`: the object ledgers' (default: from the environment's cluster key)."""
        super().__init__(zk, gateway_id, interval_s, SWEEPER_PATH, SWEEPER_LOCK_PATH)
        self._client = client
        self._passwords = LedgerPasswords.from_env() if passwords is None else passwords
        self._gateway_id = gateway_id
        self._owned_ledger_ids = owned_ledger_ids
        # CLOSED is final: those ledgers' metadata is never read again.
        self._closed_ledger_ids: set[int] = set()

    async def _pass(self) -> None:
        await self.sweep_once()

    async def _claim(self) -> bool:
        """This process's turn to sweep: no pass finished within half an interval, and
        the lock taken. Clocks of other hosts only move a pass earlier or later."""
        await self._zk.ensure_path(SWEEPER_PATH)
        value, _ = await self._zk.get_with_stat(SWEEPER_PATH)
        try:
            finished = float(json.loads(value or b"{}").get("finished", 0.0))
        except (ValueError, TypeError, AttributeError):
            finished = 0.0
        if 0.0 <= time.time() - finished < self._interval_s / 2:
            SWEEP_ROUNDS.labels("recent").inc()
            return False
        if not await super()._claim():
            SWEEP_ROUNDS.labels("busy").inc()
            return False
        SWEEP_ROUNDS.labels("swept").inc()
        return True

    async def _done(self) -> None:
        """Record the pass, then release the lock. Recovery is idempotent: two passes at
        once are safe."""
        record = {"finished": time.time(), "by": self._gateway_id}
        try:
            await self._zk.set(SWEEPER_PATH, json.dumps(record).encode())
        finally:
            await super()._done()

    async def sweep_once(self) -> list[int]:
        """One pass; returns the ledgers this pass recovered."""
        live = set(await self._zk.get_children(GATEWAYS_PATH))
        live.add(self._gateway_id)
        owned = self._owned_ledger_ids()
        recovered = []
        ledger_ids = await self._client.list_ledger_ids()
        self._closed_ledger_ids.intersection_update(ledger_ids)
        for ledger_id in ledger_ids:
            if ledger_id in owned or ledger_id in self._closed_ledger_ids:
                continue
            try:
                metadata = await self._client.get_metadata(ledger_id)
            except NoSuchLedgerError:
                continue
            if metadata.state == "CLOSED":
                self._closed_ledger_ids.add(ledger_id)
                continue
            writer = metadata.custom.get("writer", "")
            if metadata.custom.get("purpose") != PURPOSE or not writer or writer in live:
                continue
            # Look again right before fencing: the writer may have just re-registered.
            if await self._zk.exists(gateway_path(writer)) is not None:
                continue
            try:
                await asyncio.wait_for(
                    self._client.open_ledger(ledger_id, self._passwords, recovery=True),
                    RECOVER_TIMEOUT_S,
                )
            except NoSuchLedgerError:
                continue
            except Exception as e:  # noqa: BLE001 - next pass tries again
                logger.warning(
                    "event=orphan_ledger_recovery_failed ledger_id=%d writer=%s error=%r",
                    ledger_id,
                    writer,
                    e,
                )
                continue
            SWEPT_LEDGERS.inc()
            recovered.append(ledger_id)
            logger.info(
                "event=orphan_ledger_recovered ledger_id=%d writer=%s sweeper=%s",
                ledger_id,
                writer,
                self._gateway_id,
            )
        return recovered
