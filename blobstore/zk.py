"""The one bridge between kazoo's threads and our asyncio loop.

kazoo runs its own connection thread and completes `*_async()` calls there. Every
coroutine here starts such a call and links its completion to an asyncio Future with
`call_soon_threadsafe`, under a timeout: nothing here blocks the event loop, and no wait
is unbounded. kazoo's exceptions (`NoNodeError`, `NodeExistsError`, `BadVersionError`,
`NotEmptyError`, `ConnectionLoss`, `SessionExpiredError`) pass through unchanged so callers
can implement compare-and-set loops on znode versions.

Session state changes are handed to the loop as well (`add_state_listener`): on
SUSPENDED, callers pause anything that relies on an ephemeral node or a lease; on LOST,
they treat them as gone and re-register.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState, ZnodeStat

logger = logging.getLogger(__name__)

SESSION_TIMEOUT_S_DEFAULT = 15.0
OPERATION_TIMEOUT_S_DEFAULT = 15.0
CONNECT_TIMEOUT_S_DEFAULT = 30.0


@dataclass(frozen=True, slots=True)
class Versioned:
    """A znode's value with the version a compare-and-set must name."""

    value: bytes
    version: int


class ZooKeeperClient:
    """An asyncio face on one kazoo session. Create it inside the running loop."""

    def __init__(
        self,
        hosts: str,
        session_timeout_s: float = SESSION_TIMEOUT_S_DEFAULT,
        operation_timeout_s: float = OPERATION_TIMEOUT_S_DEFAULT,
    ) -> None:
        self.hosts = hosts
        self.operation_timeout_s = operation_timeout_s
        self.kazoo = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 2.0},
            command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0},
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_listeners: list[Callable[[KazooState], None]] = []
        self.kazoo.add_listener(self._state_changed)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.kazoo.start, timeout_s)

    async def stop(self) -> None:
        def stop_and_close() -> None:
            self.kazoo.stop()
            self.kazoo.close()

        await asyncio.to_thread(stop_and_close)

    @property
    def connected(self) -> bool:
        return bool(self.kazoo.connected)

    def add_state_listener(self, listener: Callable[[KazooState], None]) -> None:
        """`listener(state)` runs on the event loop for every session state change."""
        self._state_listeners.append(listener)

    def _state_changed(self, state: KazooState) -> None:  # kazoo thread
        logger.info("zookeeper session state=%s hosts=%s", state, self.hosts)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        for listener in self._state_listeners:
            loop.call_soon_threadsafe(listener, state)

    # ------------------------------------------------------------------ plumbing

    async def _call(self, start_async: Callable[[], Any], timeout_s: float | None = None) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(async_result: Any) -> None:  # kazoo thread
            def settle() -> None:
                if future.done():
                    return
                try:
                    future.set_result(async_result.get_nowait())
                except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
                    future.set_exception(e)

            if not loop.is_closed():
                loop.call_soon_threadsafe(settle)

        async_result = start_async()
        async_result.rawlink(done)
        return await asyncio.wait_for(future, timeout_s or self.operation_timeout_s)

    # ------------------------------------------------------------------ operations

    async def get(self, path: str, watch: Callable[[Any], None] | None = None) -> Versioned:
        """The value and version; raises NoNodeError. `watch` runs on the kazoo thread."""
        value, stat = await self._call(lambda: self.kazoo.get_async(path, watch=watch))
        return Versioned(value, stat.version)

    async def get_with_stat(self, path: str) -> tuple[bytes, ZnodeStat]:
        value, stat = await self._call(lambda: self.kazoo.get_async(path))
        return value, stat

    async def exists(self, path: str) -> ZnodeStat | None:
        return await self._call(lambda: self.kazoo.exists_async(path))  # type: ignore[no-any-return]

    async def get_children(
        self, path: str, watch: Callable[[Any], None] | None = None
    ) -> list[str]:
        return list(await self._call(lambda: self.kazoo.get_children_async(path, watch=watch)))

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a znode and return its path (with the sequence suffix, if any)."""
        return await self._call(  # type: ignore[no-any-return]
            lambda: self.kazoo.create_async(
                path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath
            )
        )

    async def set(self, path: str, value: bytes, version: int = -1) -> int:
        """Compare-and-set (version -1: unconditional); returns the new version."""
        stat = await self._call(lambda: self.kazoo.set_async(path, value, version))
        return int(stat.version)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(lambda: self.kazoo.delete_async(path, version))

    async def ensure_path(self, path: str) -> None:
        """Create `path` and its parents when missing (idempotent, race-safe)."""
        if await self.exists(path) is not None:
            return
        parts = [p for p in path.split("/") if p]
        current = ""
        for part in parts:
            current = f"{current}/{part}"
            try:
                await self.create(current)
            except NodeExistsError:
                pass

    async def delete_recursive(self, path: str) -> None:
        """Delete a subtree (children first). Missing nodes are fine."""
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return
        for child in children:
            await self.delete_recursive(f"{path}/{child}")
        try:
            await self.delete(path)
        except NoNodeError:
            pass

    async def sync(self, path: str = "/") -> None:
        """Make this session's server catch up with the leader before the next read."""
        await self._call(lambda: self.kazoo.sync_async(path))

    async def multi(self, operations: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Run a ZooKeeper `multi`: all operations or none.

        `operations` is a list of (kind, args) with kind one of "create" (path, value),
        "set" (path, value, version), "delete" (path, version), "check" (path, version).
        Returns kazoo's per-operation results; raises the first failure's exception
        (e.g. BadVersionError) when the transaction was rolled back.
        """
        transaction = self.kazoo.transaction()
        for kind, args in operations:
            if kind == "create":
                transaction.create(*args)
            elif kind == "set":
                transaction.set_data(*args)
            elif kind == "delete":
                transaction.delete(*args)
            elif kind == "check":
                transaction.check(*args)
            else:
                raise ValueError(f"unknown multi operation {kind!r}")
        results = await self._call(transaction.commit_async)
        for result in results:
            if isinstance(result, Exception) and not _is_rolled_back(result):
                raise result
        return list(results)


def _is_rolled_back(error: Exception) -> bool:
    from kazoo.exceptions import RolledBackError

    return isinstance(error, RolledBackError)
