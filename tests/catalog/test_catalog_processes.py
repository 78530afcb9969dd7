"""Several processes (separate ZooKeeper sessions) on one catalog.

- Four writers put overlapping keys concurrently into a versioned and an unversioned
  bucket (small pages: splits happen under the concurrent writers). The result must be a
  valid serial order: every acknowledged version present exactly once, each writer's
  versions of a key in its own order, and each key's latest record the last write of one
  of the writers.
- Read-after-write and list-after-write: a writer process acknowledges a put; the test
  process (another session) reads and lists it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from blobstore.catalog import Catalog
from tests.catalog.catalog_writer import SMALL_PAGES
from tests.catalog.helpers import object_record, run_with_catalog, seed

REPO = Path(__file__).resolve().parents[2]
WRITERS = 4
OPS = 150
KEYS = 40
PROCESS_TIMEOUT_S = 120.0


def _writer(zk_connect: str, buckets: str, writer: int, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.catalog.catalog_writer",
            "--zk",
            zk_connect,
            "--bucket",
            buckets,
            "--writer",
            str(writer),
            "--mode",
            mode,
            "--ops",
            str(OPS),
            "--keys",
            str(KEYS),
            "--seed",
            str(seed()),
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrent_writer_processes_serialize(zk_connect: str) -> None:
    print(f"BLOBSTORE_TEST_SEED={seed()}")

    async def setup(catalog: Catalog) -> None:
        await catalog.create_bucket("multi-versioned", "owner")
        await catalog.update_bucket("multi-versioned", lambda r: replace(r, versioning="Enabled"))
        await catalog.create_bucket("multi-plain", "owner")

    run_with_catalog(zk_connect, setup, SMALL_PAGES)
    acks: dict[int, list[dict[str, str]]] = {}
    with contextlib.ExitStack() as stack:
        processes = [
            stack.enter_context(_writer(zk_connect, "multi-versioned,multi-plain", w, "random"))
            for w in range(WRITERS)
        ]
        try:
            for w, process in enumerate(processes):
                out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
                assert process.returncode == 0, f"writer {w} failed:\n{err[-3000:]}"
                acks[w] = [json.loads(line) for line in out.splitlines()]
                assert len(acks[w]) == 2 * OPS, (w, len(acks[w]))
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    async def read(catalog: Catalog) -> tuple[dict[str, list[str]], dict[str, str], int]:
        versions: dict[str, list[str]] = defaultdict(list)
        ids: dict[str, list[str]] = defaultdict(list)
        async for record in catalog.iter_objects("multi-versioned"):
            versions[record.key].append(record.etag)
            ids[record.key].append(record.version_id)
        for key, key_ids in ids.items():
            assert key_ids == sorted(key_ids), f"version ids of {key} not sorted newest first"
        plain = {r.key: r.etag async for r in catalog.iter_objects("multi-plain")}
        pages = len(await catalog.index.page_ids("multi-versioned"))
        return dict(versions), plain, pages

    versions, plain, pages = run_with_catalog(zk_connect, read, SMALL_PAGES)
    assert pages > 1, "the run was meant to split pages under concurrent writers"
    acked: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for w, lines in acks.items():
        for line in lines:
            if line["bucket"] == "multi-versioned":
                acked[line["key"]][w].append(line["etag"])
    assert set(versions) == set(acked)
    assert set(plain) == set(acked)
    for key, by_writer in acked.items():
        stored = versions[key]  # newest first
        everything = [e for etags in by_writer.values() for e in etags]
        assert sorted(stored) == sorted(everything), f"{key}: versions lost or duplicated"
        for w, etags in by_writer.items():
            mine = [e for e in reversed(stored) if e in set(etags)]
            assert mine == etags, f"{key}: writer {w}'s versions out of its own order"
        last_writes = {etags[-1] for etags in by_writer.values()}
        assert stored[0] in last_writes, f"{key}: latest is not the last write of a writer"
        assert plain[key] in last_writes, f"{key}: unversioned record is not a last write"


def test_read_and_list_after_write_across_processes(zk_connect: str) -> None:
    run_with_catalog(zk_connect, lambda c: c.create_bucket("raw-bucket", "owner"))
    with _writer(zk_connect, "raw-bucket", 0, "echo") as writer:
        _put_read_and_list(zk_connect, writer)


def _put_read_and_list(zk_connect: str, writer: subprocess.Popen[str]) -> None:
    """Each key the writer acknowledges is read and listed at once from this process."""
    stdin, stdout = writer.stdin, writer.stdout
    assert stdin is not None and stdout is not None

    async def body(catalog: Catalog) -> None:
        for n in range(60):
            key = f"k/{n:04d}"
            stdin.write(f"put {key}\n")
            stdin.flush()
            line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), 30)
            assert line.strip() == f"ack {key}", line
            record = await catalog.get_object("raw-bucket", key)
            assert record.key == key
            listed = await catalog.list_objects(
                "raw-bucket", prefix="k/", start_after=f"k/{n - 1:04d}" if n else ""
            )
            assert [r.key for r in listed.contents] == [key]

    try:
        run_with_catalog(zk_connect, body)
    finally:
        stdin.close()
        try:
            writer.wait(timeout=30)
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
    assert writer.returncode == 0, writer.stderr.read() if writer.stderr else ""


def test_writer_killed_loses_nothing_acknowledged(zk_connect: str) -> None:
    """kill -9 of a writer in the middle of its commits: every acknowledged version is
    in the catalog, nothing else is half there, and the index stays usable."""
    import signal

    async def setup(catalog: Catalog) -> None:
        await catalog.create_bucket("killed", "owner")
        await catalog.update_bucket("killed", lambda r: replace(r, versioning="Enabled"))

    run_with_catalog(zk_connect, setup, SMALL_PAGES)
    acked: list[dict[str, str]] = []
    with _writer(zk_connect, "killed", 0, "random") as writer:
        assert writer.stdout is not None
        try:
            while len(acked) < OPS // 2:
                line = writer.stdout.readline()
                assert line, "writer ended early"
                acked.append(json.loads(line))
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=30)
            # Acknowledgements already written to the pipe count as acknowledged too.
            acked += [json.loads(line) for line in writer.stdout.read().splitlines()]
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()

    async def check(catalog: Catalog) -> None:
        stored = {(r.key, r.version_id): r.etag async for r in catalog.iter_objects("killed")}
        for ack in acked:
            assert stored.get((ack["key"], ack["version_id"])) == ack["etag"], ack
        # Everything stored is a complete record written by the writer.
        assert all(len(etag) == 32 for etag in stored.values())
        await catalog.put_object(object_record("killed", "after", 1))
        assert (await catalog.get_object("killed", "after")).key == "after"

    run_with_catalog(zk_connect, check, SMALL_PAGES)
