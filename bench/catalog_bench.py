"""Catalog benchmark: commits/s, listing throughput, get/put latency at 1M keys, beside the
raw ZooKeeper create rate of the same run. Starts its own ZooKeeper; writes
docs/benchmarks/catalog.md.

    .venv/bin/python -m bench.catalog_bench [--keys 1000000] [--seconds 5] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import uvloop

from blobstore.catalog import Catalog, CatalogConfig
from blobstore.catalog.records import Extent, ObjectRecord, ObjectSummary
from blobstore.cli.zookeeper_server import free_port, start_zookeeper
from blobstore.runtime.zk import ZooKeeperClient

REPO = Path(__file__).resolve().parents[1]


def record(bucket: str, key: str, n: int) -> ObjectRecord:
    return ObjectRecord(
        bucket=bucket,
        key=key,
        size=4096,
        etag=f"{n:032x}",
        last_modified=1_700_000_000.0 + n,
        content_type="application/octet-stream",
        extents=(Extent(10_000 + n // 1000, n % 1000, n % 1000, 4096, 1 << 20),),
    )


@dataclass
class Row:
    name: str
    value: str
    note: str = ""


async def zk_create_rate(zk: ZooKeeperClient, count: int, concurrency: int) -> float:
    await zk.ensure_path("/bench-raw")
    semaphore = asyncio.Semaphore(concurrency)
    payload = b"x" * 200
    base = f"/bench-raw/c{concurrency}-"

    async def one(i: int) -> None:
        async with semaphore:
            await zk.create(f"{base}{i}", payload)

    start = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    return count / (time.monotonic() - start)


async def commit_rate(
    catalog: Catalog, bucket: str, writers: int, seconds: float, sequential: bool
) -> tuple[float, float]:
    await catalog.create_bucket(bucket, "bench")
    deadline = time.monotonic() + seconds
    counts = [0] * writers
    latencies: list[float] = []
    rng = random.Random(writers)

    async def writer(w: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            key = f"seq/{w:03d}/{n:08d}" if sequential else f"rnd/{rng.getrandbits(64):016x}"
            started = time.monotonic()
            await catalog.put_object(record(bucket, key, n))
            latencies.append(time.monotonic() - started)
            n += 1
        counts[w] = n

    start = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    elapsed = time.monotonic() - start
    return sum(counts) / elapsed, statistics.median(latencies) * 1000


def bulk_records(bucket: str, count: int) -> Iterator[ObjectRecord]:
    # Keys sorted by construction: 1000 "directories" of count/1000 files.
    per_dir = max(count // 1000, 1)
    n = 0
    for d in range(1000):
        for f in range(per_dir):
            if n >= count:
                return
            yield record(bucket, f"data/part-{d:04d}/file-{f:06d}.bin", n)
            n += 1


def decode_ceiling(seconds: float = 2.0) -> float:
    """Records/s this process can decode from an index page (what a listing must do)."""
    from blobstore.catalog.page import IndexPage

    page = IndexPage("p", "", None, [], [])
    for n in range(1000):
        page.set_versions(f"data/part-0000/file-{n:06d}.bin", [record("b", "k", n).to_dict()])
    encoded = page.encode()
    decoded = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        fresh = IndexPage.decode("p", encoded, 0)
        for key, versions in zip(fresh.keys, fresh.decode_lines(0, len(fresh.keys)), strict=True):
            ObjectSummary.from_dict(key, versions[0])
        decoded += len(fresh.keys)
    return decoded / (time.monotonic() - start)


async def list_all(
    catalog: Catalog, bucket: str, prefix: str = "", delimiter: str = ""
) -> tuple[int, float]:
    start = time.monotonic()
    total = 0
    start_after = ""
    while True:
        page = await catalog.list_objects(
            bucket, prefix=prefix, delimiter=delimiter, start_after=start_after, max_keys=1000
        )
        total += len(page.contents) + len(page.common_prefixes)
        if not page.is_truncated:
            break
        start_after = page.next_start_after
    return total, time.monotonic() - start


async def latency_ms(
    operation: Callable[[int], Awaitable[object]], count: int
) -> tuple[float, float]:
    samples = []
    for i in range(count):
        started = time.monotonic()
        await operation(i)
        samples.append((time.monotonic() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


async def run(args: argparse.Namespace, connect: str) -> list[Row]:
    zk = ZooKeeperClient(connect)
    await zk.start()
    config = CatalogConfig()
    catalog = Catalog(zk, config)
    await catalog.start()
    try:
        rows, pipelined_create_rate = await zookeeper_create_rows(zk)
        rows += await commit_rows(catalog, args.seconds, pipelined_create_rate)
        load_row, pages = await bulk_load_row(catalog, args.keys)
        rows.append(load_row)
        rows += await listing_rows(catalog, args.keys)
        rows += await latency_rows(zk, catalog, config, args.keys, pages)
    finally:
        await catalog.close()
        await zk.stop()
    return rows


async def zookeeper_create_rows(zk: ZooKeeperClient) -> tuple[list[Row], float]:
    """ZooKeeper's own create rates; the pipelined one is the ceiling commits compare with."""
    print("zookeeper raw create rate...", flush=True)
    raw_1 = await zk_create_rate(zk, 1000, 1)
    raw_64 = await zk_create_rate(zk, 10_000, 64)
    rows = [
        Row("ZooKeeper create, 1 at a time", f"{raw_1:,.0f}/s", "sync write (fsync) per create"),
        Row("ZooKeeper create, 64 in flight", f"{raw_64:,.0f}/s", "pipelined: the write ceiling"),
    ]
    return rows, raw_64


async def commit_rows(catalog: Catalog, seconds: float, raw_64: float) -> list[Row]:
    rows = []
    for writers in (1, 16, 64):
        for sequential in (False, True):
            kind = "sequential" if sequential else "random"
            print(f"commits: {writers} writers, {kind} keys...", flush=True)
            bucket = f"commits-{writers}-{kind}"
            rate, p50 = await commit_rate(catalog, bucket, writers, seconds, sequential)
            rows.append(
                Row(
                    f"catalog commits, {writers} writers, {kind} keys",
                    f"{rate:,.0f}/s",
                    f"median commit {p50:.1f} ms; {rate / raw_64:.0%} of pipelined creates",
                )
            )
    return rows


async def bulk_load_row(catalog: Catalog, keys: int) -> tuple[Row, int]:
    """Bulk load of the `listing` bucket the later rows read; returns its page count too."""
    print(f"bulk loading {keys:,} keys...", flush=True)
    await catalog.create_bucket("listing", "bench")
    start = time.monotonic()
    pages = await catalog.bulk_load("listing", bulk_records("listing", keys))
    load_s = time.monotonic() - start
    row = Row(
        f"bulk load of {keys:,} keys",
        f"{keys / load_s:,.0f} keys/s",
        f"{pages:,} pages, {load_s:.0f} s",
    )
    return row, pages


async def listing_rows(catalog: Catalog, keys: int) -> list[Row]:
    print("listing...", flush=True)
    total, seconds = await list_all(catalog, "listing")
    assert total == keys, (total, keys)
    listed = Row(
        f"list all {keys:,} keys (max-keys 1000)",
        f"{total / seconds:,.0f} keys/s",
        f"{seconds:.1f} s, {total // 1000:,} requests",
    )
    total, seconds = await list_all(catalog, "listing", prefix="data/", delimiter="/")
    rolled_up = Row(
        f"list with delimiter: {total:,} common prefixes over all keys",
        f"{seconds * 1000 / max(total, 1):.1f} ms per prefix",
        f"each prefix rolls up {keys // max(total, 1):,} keys; the walk jumps "
        "to the next prefix (one page read), it does not scan the keys",
    )
    ceiling = Row(
        "listing CPU ceiling of this machine, same run",
        f"{decode_ceiling():,.0f} keys/s",
        "page decode + record construction only, no ZooKeeper: the bound on listing",
    )
    return [listed, rolled_up, ceiling]


def existing_keys(keys: int, count: int) -> list[str]:
    """`count` keys of the bulk-loaded bucket (`bulk_records`), picked at random."""
    per_dir = max(keys // 1000, 1)
    rng = random.Random(7)
    return [
        f"data/part-{rng.randrange(1000):04d}/file-{rng.randrange(per_dir):06d}.bin"
        for _ in range(count)
    ]


def p50_p99(latency: tuple[float, float]) -> str:
    return f"{latency[0]:.2f} / {latency[1]:.2f} ms"


async def latency_rows(
    zk: ZooKeeperClient, catalog: Catalog, config: CatalogConfig, keys: int, pages: int
) -> list[Row]:
    """Single-key latencies on an empty bucket and on the bulk-loaded one, in the same
    ZooKeeper state (its data tree loaded), so the two differ only by the bucket's size."""
    print("latency on an empty bucket...", flush=True)
    round_trip = await latency_ms(lambda _i: zk.fresh_view(), 300)
    await catalog.create_bucket("latency-empty", "bench")
    put_empty = await latency_ms(
        lambda i: catalog.put_object(record("latency-empty", f"k/{i:06d}", i)), 300
    )
    get_empty = await latency_ms(lambda i: catalog.get_object("latency-empty", f"k/{i:06d}"), 300)
    print("latency at 1M keys...", flush=True)
    existing = existing_keys(keys, 300)
    get_full = await latency_ms(lambda i: catalog.get_object("listing", existing[i]), 300)
    hot = existing[:20]  # their pages are cached now, as a working set's would be
    get_hot = await latency_ms(lambda i: catalog.get_object("listing", hot[i % len(hot)]), 300)
    put_full = await latency_ms(
        lambda i: catalog.put_object(record("listing", existing[i] + ".new", i)), 300
    )
    shards = len(await catalog.index.shards("listing"))
    fill_kib = config.page_fill_bytes // 1024
    return [
        Row(
            "get latency, empty bucket (p50 / p99)",
            p50_p99(get_empty),
            "sync; the one page stays cached under its data watch",
        ),
        Row(
            f"get latency, {keys:,} keys, cached pages (p50 / p99)",
            p50_p99(get_hot),
            "sync; root map, map shard and page cached under watches",
        ),
        Row(
            f"get latency, {keys:,} keys, random keys (p50 / p99)",
            p50_p99(get_full),
            f"sync and page read sent back to back: one round trip plus a ~{fill_kib} KiB"
            f" page ({pages:,} pages in {shards} map shards; the cache holds "
            f"{config.page_read_cache_pages})",
        ),
        Row(
            "put latency, empty bucket (p50 / p99)",
            p50_p99(put_empty),
            "one compare-and-set of the page",
        ),
        Row(
            f"put latency, {keys:,} keys, random keys (p50 / p99)",
            p50_p99(put_full),
            f"page read + one compare-and-set of a ~{fill_kib} KiB page",
        ),
        Row(
            "ZooKeeper round trip, same run (p50 / p99)",
            p50_p99(round_trip),
            "an empty sync: the floor of any consistent read",
        ),
    ]


def _number(rows: list[Row], name: str) -> float:
    """The leading number of the row whose name starts with `name` ("2,639/s" -> 2639)."""
    row = next(r for r in rows if r.name.startswith(name))
    return float(row.value.replace(",", "").split("/")[0].split(" ")[0])


def aims_table(rows: list[Row]) -> list[str]:
    """The issue's aims against this run (ratio >= 1 meets an aim)."""
    aims = [
        (
            "commits/s, 64 writers, random keys >= 2,000",
            "catalog commits, 64 writers, random",
            2000,
        ),
        (
            "commits/s, 64 writers, sequential keys >= 2,000",
            "catalog commits, 64 writers, sequential",
            2000,
        ),
        ("listed keys/s >= 50,000", "list all", 50000),
    ]
    lines = [
        "## Against the aims (ratio = measured / aim; >= 1 meets it)",
        "",
        "| aim | measured | ratio |",
        "|---|---|---|",
    ]
    for label, name, aim in aims:
        value = _number(rows, name)
        lines.append(f"| {label} | {value:,.0f} | {value / aim:.2f} |")
    lines.append("")
    return lines


def write_report(rows: list[Row], args: argparse.Namespace, load: tuple[float, float]) -> str:
    lines = [
        "# Catalog benchmark",
        "",
        "Produced by `python -m bench.catalog_bench` (its own standalone ZooKeeper 3.8, one client",
        "session, small object records of ~200 bytes, default CatalogConfig: pages split",
        "above 32 KiB, page map shards above 64 KiB). Commit rates are objects committed per second by N concurrent",
        "writers in one process; they are compared with ZooKeeper's own create rate",
        "measured in the same run, which is the ceiling of any ZooKeeper-backed catalog.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()};",
        f"load average before/after the run: {load[0]:.1f} / {load[1]:.1f}",
        "(the machine was shared with other test runs; figures are lower bounds).",
        "",
        "| measurement | result | note |",
        "|---|---|---|",
    ]
    lines += [f"| {r.name} | {r.value} | {r.note} |" for r in rows]
    lines += [
        "",
        "Reading the table: one writer is bound by a ZooKeeper synchronous write per commit.",
        "With more writers, mutations waiting for the same index page are grouped into one",
        "compare-and-set of the page, so commits/s grow past the per-write ceiling; random",
        "keys spread over many pages and pipeline the writes of different pages.",
        "",
        "On a shared, loaded machine ZooKeeper's own rate drops, and the catalog keeps its",
        "ratio to it (grouping gives a multiple of the raw create rate). Listing is bound by",
        "the ZooKeeper page reads and decoding summaries in Python: compare it with the",
        "decoding ceiling measured in the same run (the load may change during a run).",
        "",
        *aims_table(rows),
        "Single-key operations do not grow with the bucket: a key is routed through the",
        "root map and one map shard (both cached under watches) to one small page. A put",
        "reads and rewrites one page of ~100 records whatever the bucket holds; a get of",
        "a key whose page is cached costs one sync, as on an empty bucket. A get of a key",
        "whose page is not cached also transfers that page, sent right behind the sync",
        "(one round trip): the difference between the empty bucket and random keys over",
        "1,000,000 is that transfer, the same for 10,000 keys as for 10,000,000 once the",
        "working set outgrows the page cache.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "catalog.md")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="catalog-bench-") as data_dir:
        server = start_zookeeper(Path(data_dir), free_port(), heap_mb=3072)
        try:
            # uvloop, as in the gateway that runs the catalog.
            rows = uvloop.run(run(args, server.connect_string))
        finally:
            server.stop()
    report = write_report(rows, args, (load_before, os.getloadavg()[0]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
