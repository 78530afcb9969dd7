"""Registration of a live bookie in ZooKeeper: an ephemeral znode with its address and state.

``/ledgers/available/<bookie_id>`` holds JSON {host, port, http_port, rack, free_bytes,
total_bytes, read_only, ledger_count}. It is refreshed every `registration_refresh_s`, at
once on a read-only transition, and re-created after the session is lost. A node left by
this bookie's previous (killed) process is replaced rather than waited out.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout

# How long a stopping bookie tries to delete its registration. The session's end removes
# it anyway (the node is ephemeral), so a ZooKeeper that cannot be reached must not hold
# the stop (and the final checkpoint after it) for a whole operation timeout.
UNREGISTER_WAIT_S = 2.0

logger = logging.getLogger(__name__)


class Registration:
    def __init__(
        self,
        zk: ZooKeeperClient,
        bookie_id: str,
        payload: Callable[[], dict[str, Any]],
        refresh_s: float,
    ) -> None:
        self.zk = zk
        self.bookie_id = bookie_id
        self.path = zk_layout.available_path(bookie_id)
        self.payload = payload
        self.refresh_s = refresh_s
        self._wakeup = asyncio.Event()
        self._lost = False
        self._stopping = False
        zk.add_state_listener(self._state_changed)

    def _state_changed(self, state: KazooState) -> None:
        if state == KazooState.LOST and not self._stopping:
            self._lost = True
            logger.warning("registration_lost bookie_id=%s: will re-register", self.bookie_id)
        self._wakeup.set()

    def trigger(self) -> None:
        """Publish the current state now (read-only transition)."""
        self._wakeup.set()

    def _data(self) -> bytes:
        return json.dumps(self.payload(), sort_keys=True).encode()

    async def register(self) -> None:
        data = self._data()
        try:
            await self.zk.create(self.path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = await self.zk.get_with_stat(self.path)
            session_id = self.zk.session_id
            if stat.ephemeralOwner == session_id:
                await self.zk.set(self.path, data)
                return
            logger.info(
                "replacing stale registration bookie_id=%s owner=%#x",
                self.bookie_id,
                stat.ephemeralOwner,
            )
            try:
                await self.zk.delete(self.path)
            except NoNodeError:
                pass
            await self.zk.create(self.path, data, ephemeral=True, makepath=True)
        self._lost = False
        logger.info("bookie registered bookie_id=%s", self.bookie_id)

    async def refresh(self) -> None:
        if self._lost:
            await self.register()
            return
        try:
            await self.zk.set(self.path, self._data())
        except NoNodeError:
            await self.register()

    async def run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wakeup.wait(), self.refresh_s)
            except TimeoutError:
                pass
            self._wakeup.clear()
            if self._stopping:
                return
            if not self.zk.connected:
                continue
            try:
                await self.refresh()
            except Exception as e:  # noqa: BLE001 - retried on the next round
                logger.warning(
                    "registration refresh failed bookie_id=%s error=%r", self.bookie_id, e
                )
                await asyncio.sleep(0.5)
                self._wakeup.set()

    async def unregister(self) -> None:
        self._stopping = True
        self._wakeup.set()
        try:
            async with asyncio.timeout(UNREGISTER_WAIT_S):
                await self.zk.delete(self.path)
        except Exception as e:  # noqa: BLE001 - the session's end removes it anyway
            logger.info("unregister failed bookie_id=%s error=%r", self.bookie_id, e)
