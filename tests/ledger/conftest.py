"""Helpers for ledger tests: run a coroutine under a deadline, a connected LedgerClient."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from blobstore.ledger import LedgerClient, LedgerConfig
from blobstore.runtime.zk import ZooKeeperClient

T = TypeVar("T")

TEST_CONFIG = {
    "bookie_connect_timeout_s": 2.0,
    "bookie_request_timeout_s": 10.0,
    "ensemble_change_timeout_s": 20.0,
    "recovery_timeout_s": 60.0,
}


def run(coro: Awaitable[T], timeout_s: float = 120.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def ledger_client(zk_connect: str, **overrides: Any) -> AsyncIterator[LedgerClient]:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    settings = {**TEST_CONFIG, **overrides}
    client = LedgerClient(zk, config=LedgerConfig(**settings))
    try:
        await client.start()
        yield client
    finally:
        await client.close()
        await zk.stop()


def test_seed() -> int:
    return int(os.environ.get("BLOBSTORE_TEST_SEED", str(random.randrange(1 << 32))))


test_seed.__test__ = False  # type: ignore[attr-defined]


def payload(rng: random.Random, entry_id: int, size: int) -> bytes:
    """Deterministic, entry-specific bytes (a header names the entry)."""
    head = f"entry-{entry_id:08d}:".encode()
    return (head + rng.randbytes(max(0, size - len(head))))[: max(size, len(head))]
