"""A catalog writer in its own process (own ZooKeeper session), for the multi-process tests.

`python -m tests.catalog.catalog_writer --zk HOSTS --bucket B --writer N ...` runs one of:
- `random`: --ops puts over --keys overlapping keys (random order, seeded), a few at a
  time, each into every bucket of the comma-separated --bucket list; prints one JSON line
  {"bucket", "key", "etag", "version_id"} per acknowledged commit, in ack order.
- `echo`: for each line "put KEY" on stdin, commits KEY and prints "ack KEY" once the
  commit is acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from dataclasses import replace

from blobstore.catalog import Catalog, CatalogConfig
from blobstore.runtime.zk import ZooKeeperClient
from tests.catalog.helpers import object_record

SMALL_PAGES = CatalogConfig(
    page_split_bytes=16 * 1024,
    page_merge_bytes=6 * 1024,
    page_merge_target_bytes=12 * 1024,
    page_fill_bytes=8 * 1024,
    record_bytes_max=8 * 1024,
    map_shard_split_bytes=512,
)


async def run_random(catalog: Catalog, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed * 1000 + args.writer)
    keys = [f"key-{i:03d}" for i in range(args.keys)]
    # Per key, this writer's commits are issued one after another (its own order); across
    # keys up to --in-flight commits run concurrently.
    plan = [rng.choice(keys) for _ in range(args.ops)]
    locks = {k: asyncio.Lock() for k in keys}
    semaphore = asyncio.Semaphore(args.in_flight)

    async def one(sequence: int, key: str, lock_acquired: asyncio.Event) -> None:
        async with semaphore, locks[key]:
            lock_acquired.set()
            etag = f"{args.writer:04x}{sequence:028x}"
            for bucket in args.bucket.split(","):
                record = replace(
                    object_record(bucket, key, sequence), etag=etag, metadata={"pad": "p" * 400}
                )
                result = await catalog.put_object(record)
                line = {
                    "bucket": bucket,
                    "key": key,
                    "etag": etag,
                    "version_id": result.record.version_id,
                }
                print(json.dumps(line), flush=True)

    tasks = []
    for sequence, key in enumerate(plan):
        acquired = asyncio.Event()
        tasks.append(asyncio.ensure_future(one(sequence, key, acquired)))
        # Start the next only when this one holds its key's lock, so per-key order is plan order.
        await asyncio.wait(
            [asyncio.ensure_future(acquired.wait()), tasks[-1]], return_when=asyncio.FIRST_COMPLETED
        )
    await asyncio.gather(*tasks)


async def run_echo(catalog: Catalog, args: argparse.Namespace) -> None:
    n = 0
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        command, key = line.split()
        assert command == "put", command
        n += 1
        await catalog.put_object(object_record(args.bucket, key, n))
        print(f"ack {key}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zk", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--writer", type=int, default=0)
    parser.add_argument("--mode", choices=["random", "echo"], default="random")
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    zk = ZooKeeperClient(args.zk)
    await zk.start()
    catalog = Catalog(zk, SMALL_PAGES)
    await catalog.start()
    try:
        if args.mode == "random":
            await run_random(catalog, args)
        else:
            await run_echo(catalog, args)
    finally:
        await catalog.close()
        await zk.stop()


if __name__ == "__main__":
    asyncio.run(main())
