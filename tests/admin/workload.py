"""A mixed object workload written through the object layer (real ZooKeeper and bookies),
and the `blobstore admin` command run as a subprocess with `--json`."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from blobstore.catalog.records import (
    VERSIONING_ENABLED,
    ObjectRecord,
    UploadRecord,
)
from blobstore.objects.config import ObjectStoreConfig
from blobstore.objects.store import ObjectStore

ADMIN_TIMEOUT_S = 240.0
ENTRY_BYTES = 64 * 1024  # small entries: many entries per object, cheap to copy


def store_config(**overrides: object) -> ObjectStoreConfig:
    values: dict[str, object] = {
        "entry_size_bytes": ENTRY_BYTES,
        "ensemble_size": 3,
        "write_quorum": 2,
        "ack_quorum": 2,
        "part_bytes_min": 1,
        "ledger_bytes_max": 1 << 20,  # several ledgers
    }
    values.update(overrides)
    return ObjectStoreConfig(**values)  # type: ignore[arg-type]


def admin(zk: str, *args: str, timeout_s: float = ADMIN_TIMEOUT_S) -> tuple[int, dict]:  # type: ignore[type-arg]
    """Run `blobstore admin --zk ZK <args> --json`; (exit code, parsed stdout)."""
    result = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", "admin", "--zk", zk, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert "Traceback" not in result.stderr, result.stderr
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"admin {args} printed no JSON (exit {result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}"
        ) from None
    return result.returncode, document


async def _chunks(body: bytes, size: int = 100_000) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@dataclass
class Expected:
    """What the workload left: current bodies per (bucket, key), and totals."""

    bodies: dict[tuple[str, str], bytes] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)  # stored versions per bucket
    logical_bytes: dict[str, int] = field(default_factory=dict)  # versions + upload parts
    upload_parts: dict[str, int] = field(default_factory=dict)
    # The object whose part list lives in a manifest: its manifest's ledger(s) and the
    # ledgers only it references (written by a store of its own), and manifest bytes.
    manifest_ledgers: set[int] = field(default_factory=set)
    manifest_data_ledgers: set[int] = field(default_factory=set)
    manifest_bytes: int = 0


async def put(store: ObjectStore, bucket: str, key: str, body: bytes) -> ObjectRecord:
    result = await store.put_object(
        ObjectRecord(bucket=bucket, key=key), _chunks(body), size_max=1 << 30
    )
    return result.record


async def read_all(store: ObjectStore, bucket: str, key: str) -> bytes:
    record = await store.catalog.get_object(bucket, key)
    if record.size == 0:
        return b""
    return b"".join([piece async for piece in store.read(record, 0, record.size - 1)])


async def mixed_workload(zk: str, seed: int) -> Expected:
    """Puts, overwrites, deletes, a versioned bucket, a completed and an open multipart
    upload. Closes the store (its writer ledgers) before returning."""
    rng = random.Random(seed)
    expected = Expected()
    store = ObjectStore(zk, store_config())
    await store.start()
    try:
        catalog = store.catalog
        await catalog.create_bucket("plain", "tester")
        await catalog.create_bucket("versioned", "tester")
        await catalog.update_bucket("versioned", lambda b: _with_versioning(b, VERSIONING_ENABLED))
        sizes = [0, 1, 1000, ENTRY_BYTES, ENTRY_BYTES + 1, 300_000, 1_200_000]
        for index in range(14):
            body = rng.randbytes(sizes[index % len(sizes)])
            await put(store, "plain", f"obj/{index:02d}", body)
            expected.bodies[("plain", f"obj/{index:02d}")] = body
        for index in (2, 5):  # overwrites
            body = rng.randbytes(200_000)
            await put(store, "plain", f"obj/{index:02d}", body)
            expected.bodies[("plain", f"obj/{index:02d}")] = body
        for index in (3, 9):
            await catalog.delete_object("plain", f"obj/{index:02d}")
            del expected.bodies[("plain", f"obj/{index:02d}")]
        versioned_sizes = []
        for generation in range(3):
            body = rng.randbytes(150_000 + generation)
            await put(store, "versioned", "doc", body)
            versioned_sizes.append(len(body))
            expected.bodies[("versioned", "doc")] = body
        # A completed multipart upload, and one left in progress.
        upload = await catalog.create_upload(UploadRecord(bucket="plain", key="multi"))
        parts = [rng.randbytes(150_000), rng.randbytes(70_000)]
        for number, body in enumerate(parts, start=1):
            await store.upload_part("plain", upload.upload_id, number, _chunks(body))
        uploaded = await catalog.get_parts("plain", upload.upload_id)
        await store.complete_upload(
            "plain", upload.upload_id, [(p.part_number, p.etag) for p in uploaded]
        )
        expected.bodies[("plain", "multi")] = b"".join(parts)
        await _manifest_object(zk, rng, expected)
        pending = await catalog.create_upload(UploadRecord(bucket="plain", key="pending"))
        pending_body = rng.randbytes(90_000)
        await store.upload_part("plain", pending.upload_id, 1, _chunks(pending_body))

        plain_sizes = [len(b) for (bucket, _), b in expected.bodies.items() if bucket == "plain"]
        expected.versions = {"plain": len(plain_sizes), "versioned": 3}
        expected.logical_bytes = {
            "plain": sum(plain_sizes) + len(pending_body),
            "versioned": sum(versioned_sizes),
        }
        expected.upload_parts = {"plain": 1, "versioned": 0}
        for (bucket, key), body in expected.bodies.items():
            assert await read_all(store, bucket, key) == body, (bucket, key)
    finally:
        await store.close()
    return expected


async def _manifest_object(zk: str, rng: random.Random, expected: Expected) -> None:
    """plain/manifested: 40 parts whose list is kept in a manifest, written through a store
    of its own (so its ledgers hold nothing else), closed before returning."""
    store = ObjectStore(zk, store_config(manifest_bytes_min=0))
    await store.start()
    try:
        upload = await store.catalog.create_upload(UploadRecord(bucket="plain", key="manifested"))
        parts = [rng.randbytes(rng.randrange(1, 3000)) for _ in range(40)]
        for number, body in enumerate(parts, start=1):
            await store.upload_part("plain", upload.upload_id, number, _chunks(body))
        uploaded = await store.catalog.get_parts("plain", upload.upload_id)
        result = await store.complete_upload(
            "plain", upload.upload_id, [(p.part_number, p.etag) for p in uploaded]
        )
        record = result.record
        assert record.manifest and not record.extents and not record.parts, record
        resolved = await store.resolve(record)
        assert [p.part_number for p in resolved.parts] == list(range(1, 41))
        expected.bodies[("plain", "manifested")] = b"".join(parts)
        expected.manifest_ledgers = {e.ledger_id for e in record.manifest}
        expected.manifest_data_ledgers = {e.ledger_id for e in resolved.extents}
        expected.manifest_bytes = sum(e.length for e in record.manifest)
    finally:
        await store.close()


def _with_versioning(bucket, state: str):  # type: ignore[no-untyped-def]
    import dataclasses

    return dataclasses.replace(bucket, versioning=state)


async def verify_all(zk: str, expected: Expected) -> None:
    store = ObjectStore(zk, store_config())
    await store.start()
    try:
        for (bucket, key), body in sorted(expected.bodies.items()):
            got = await asyncio.wait_for(read_all(store, bucket, key), 60)
            assert got == body, (bucket, key, len(got), len(body))
    finally:
        await store.close()
