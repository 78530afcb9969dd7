"""Helpers of the catalog tests: run a coroutine with a Catalog on its own ZooKeeper session."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from blobstore.catalog import Catalog, CatalogConfig
from blobstore.catalog.records import Extent, ObjectRecord
from blobstore.runtime.zk import ZooKeeperClient

T = TypeVar("T")
TEST_TIMEOUT_S = 120.0


def seed() -> int:
    return int(os.environ.get("BLOBSTORE_TEST_SEED", "20261120"))


@asynccontextmanager
async def open_catalog(
    zk_connect: str, config: CatalogConfig | None = None
) -> AsyncIterator[Catalog]:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    catalog = Catalog(zk, config)
    try:
        await catalog.start()
        yield catalog
    finally:
        await catalog.close()
        await zk.stop()


def run_with_catalog(
    zk_connect: str,
    body: Callable[[Catalog], Awaitable[T]],
    config: CatalogConfig | None = None,
    timeout_s: float = TEST_TIMEOUT_S,
) -> T:
    async def main() -> T:
        async with open_catalog(zk_connect, config) as catalog:
            return await asyncio.wait_for(body(catalog), timeout_s)

    return asyncio.run(main())


def object_record(bucket: str, key: str, n: int = 0, size: int = 10) -> ObjectRecord:
    return ObjectRecord(
        bucket=bucket,
        key=key,
        size=size,
        etag=f"{n:032x}",
        last_modified=1_700_000_000.0 + n,
        extents=(Extent(1000 + n, 0, 0, size, 1 << 20),) if size else (),
    )
