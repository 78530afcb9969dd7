"""Work done for the whole cluster by one gateway process at a time, in turns.

Every gateway process runs the loop; a pass runs where its lock was taken: an ephemeral
znode, so a pass cut short by a crash releases it with its session. The lock only saves
work (one pass per interval for the cluster instead of one per process): passes must be
safe when two run at once. Sleeps are jittered (0.5-1 interval) so processes started
together do not take turns in lockstep. Used by the ledger sweeper and the bookie
auditor.
"""

from __future__ import annotations

import asyncio
import logging
import random

from kazoo.exceptions import NodeExistsError, NoNodeError

from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)


class ClusterSingleton:
    """Subclasses give `_pass`, and may add conditions to `_claim` / records to `_done`."""

    name = "cluster_pass"  # in the log line of a failed pass: event=<name>_failed

    def __init__(
        self, zk: ZooKeeperClient, owner: str, interval_s: float, base_path: str, lock_path: str
    ) -> None:
        self._zk = zk
        self._owner = owner
        self._interval_s = interval_s
        self._base_path = base_path
        self._lock_path = lock_path
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s * random.uniform(0.5, 1.0))
            try:
                if await self._claim():
                    try:
                        await self._pass()
                    finally:
                        await self._done()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the next turn tries again
                self._failed(e)

    async def _pass(self) -> None:
        raise NotImplementedError

    async def _claim(self) -> bool:
        """This process's turn: the lock taken."""
        await self._zk.ensure_path(self._base_path)
        try:
            await self._zk.create(self._lock_path, self._owner.encode(), ephemeral=True)
        except NodeExistsError:
            return False
        return True

    async def _done(self) -> None:
        """Release the lock if still this session's: a session lost meanwhile took it
        along, and another process may hold it now."""
        try:
            _, stat = await self._zk.get_with_stat(self._lock_path)
            if stat.ephemeralOwner == self._zk.session_id:
                await self._zk.delete(self._lock_path, stat.version)
        except NoNodeError:
            pass

    def _failed(self, error: Exception) -> None:
        logger.warning("event=%s_failed error=%r", self.name, error)
