"""The account's (the cluster's) public access block, kept in ZooKeeper.

One znode, `/access/public-access-block`, holds the PublicAccessBlockConfiguration the
whole cluster is under (S3's account-level block): a JSON object of S3's four setting
names, absent when none is set. Every bucket's own block is merged with it
(`PublicAccessBlock.merged`).

    await put_account_block(zk, PublicAccessBlock(block_public_policy=True))
    await get_account_block(zk)       # None when none is set
    await delete_account_block(zk)

The gateway asks on every request, so it keeps the block in memory (`AccountBlockView`):
read at `start()` under an `exists` watch (which fires on creation, change and deletion),
read again by one task whenever the watch fires or the session reconnects; a failed read
is retried with backoff, the view serving as it was meanwhile. A change reaches every
running gateway within one round trip of its watch event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent

from blobstore.access.policy_public import PublicAccessBlock
from blobstore.runtime.zk import ZooKeeperClient

logger = logging.getLogger(__name__)

ACCOUNT_BLOCK_PATH = "/access/public-access-block"
FORMAT_VERSION = 1
RETRY_S_MIN = 0.1
RETRY_S_MAX = 5.0
STOP_TIMEOUT_S = 5.0


def encode_block(block: PublicAccessBlock) -> bytes:
    return json.dumps({"format_version": FORMAT_VERSION, "settings": block.to_dict()}).encode()


def decode_block(raw: bytes) -> PublicAccessBlock:
    """The stored block; ValueError when the znode holds something else."""
    document = json.loads(raw)
    if not isinstance(document, dict) or document.get("format_version") != FORMAT_VERSION:
        raise ValueError("not an account public access block")
    settings = document.get("settings")
    if not isinstance(settings, dict):
        raise ValueError("not an account public access block")
    return PublicAccessBlock.from_dict(settings)


async def get_account_block(zk: ZooKeeperClient) -> PublicAccessBlock | None:
    """The account's block; None when none is set."""
    try:
        versioned = await zk.get(ACCOUNT_BLOCK_PATH)
    except NoNodeError:
        return None
    return decode_block(versioned.value)


async def put_account_block(zk: ZooKeeperClient, block: PublicAccessBlock) -> None:
    """Set the account's block (replacing the one set, if any)."""
    raw = encode_block(block)
    try:
        await zk.set(ACCOUNT_BLOCK_PATH, raw)
    except NoNodeError:
        try:
            await zk.create(ACCOUNT_BLOCK_PATH, raw, makepath=True)
        except NodeExistsError:  # created meanwhile: set it
            await zk.set(ACCOUNT_BLOCK_PATH, raw)


async def delete_account_block(zk: ZooKeeperClient) -> None:
    """Remove the account's block (none set: nothing to do)."""
    with contextlib.suppress(NoNodeError):
        await zk.delete(ACCOUNT_BLOCK_PATH)


class AccountBlockView:
    """The account's block as this process last read it (all off until `start`)."""

    def __init__(self) -> None:
        self.block = PublicAccessBlock()
        self._zk: ZooKeeperClient | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, zk: ZooKeeperClient | None) -> None:
        """Read the block on `zk` and follow its changes (None: none, ever)."""
        assert self._zk is None, "started twice"
        if zk is None:
            return
        self._zk = zk
        self._wake = asyncio.Event()
        await self._read()
        zk.add_state_listener(self._state_changed)
        self._task = asyncio.create_task(self._follow(), name="account-public-access-block")

    async def stop(self) -> None:
        if self._zk is not None:
            self._zk.remove_state_listener(self._state_changed)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, STOP_TIMEOUT_S)

    def _watched(self, event: WatchedEvent) -> None:  # on the loop
        assert self._wake is not None
        self._wake.set()

    def _state_changed(self, state: KazooState) -> None:  # on the loop
        if state == KazooState.CONNECTED and self._wake is not None:
            self._wake.set()  # watches may have been lost with the session

    async def _read(self) -> None:
        zk = self._zk
        assert zk is not None
        stat = await zk.exists(ACCOUNT_BLOCK_PATH, watch=self._watched)
        block = PublicAccessBlock()
        if stat is not None:
            try:
                block = decode_block((await zk.get(ACCOUNT_BLOCK_PATH)).value)
            except NoNodeError:  # deleted since: the watch fires for it
                pass
            except ValueError as e:
                logger.error("event=account_block_unreadable error=%s: read as none set", e)
        if block != self.block:
            logger.info("event=account_block_changed settings=%s", block.to_dict())
        self.block = block

    async def _follow(self) -> None:
        assert self._wake is not None
        delay_s = RETRY_S_MIN
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._read()
            except (KazooException, TimeoutError) as e:
                logger.warning("event=account_block_read_failed error=%r retry_s=%.1f", e, delay_s)
                self._wake.set()
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, RETRY_S_MAX)
            else:
                delay_s = RETRY_S_MIN
