"""A concurrent S3 workload and the model of what its clients were told.

Each key's history allows a set of bodies: the last acknowledged one (None when it was
acknowledged as deleted) plus every body whose PUT (or DELETE) is in flight or ended
without an answer (its outcome is unknown). A read must return one of them; once a
value has been read, only it (and later writes) remain possible.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.faults.conftest import ENTRY_SIZE_BYTES, read_or_none


def digest(body: bytes | None) -> str | None:
    return None if body is None else hashlib.sha256(body).hexdigest()


@dataclass
class KeyModel:
    acknowledged: bytes | None = None
    unknown: list[bytes | None] = field(default_factory=list)
    acked_writes: int = 0

    def allowed(self) -> list[bytes | None]:
        return [self.acknowledged, *self.unknown]


@dataclass
class Model:
    keys: dict[str, KeyModel] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged_puts: int = 0
    failed_ops: int = 0

    def begin(self, key: str, body: bytes | None) -> None:
        with self.lock:
            self.keys.setdefault(key, KeyModel()).unknown.append(body)

    def acknowledge(self, key: str, body: bytes | None) -> None:
        with self.lock:
            model = self.keys[key]
            model.unknown.remove(body)
            model.acknowledged = body
            model.acked_writes += 1
            if body is not None:
                self.acknowledged_puts += 1

    def failed(self) -> None:
        with self.lock:
            self.failed_ops += 1

    def check(self, s3: Any, bucket: str) -> None:
        """Every key reads back as one of its allowed bodies; the model then settles on it."""
        for key, model in sorted(self.keys.items()):
            seen = read_or_none(s3, bucket, key)
            allowed = model.allowed()
            assert any(seen == body for body in allowed), (
                f"key {key!r} read {digest(seen)} ({None if seen is None else len(seen)} bytes);"
                f" acknowledged {digest(model.acknowledged)}, unknown"
                f" {[digest(b) for b in model.unknown]}"
            )
            model.acknowledged = seen
            model.unknown = []


def random_body(rng: random.Random) -> bytes:
    """Empty, one byte, part of an entry, a few entries, or (rarely) a large object."""
    if rng.random() < 0.05:
        return rng.randbytes(rng.randrange(20 * ENTRY_SIZE_BYTES, 60 * ENTRY_SIZE_BYTES))
    size = rng.choice(
        [0, 1, rng.randrange(2, ENTRY_SIZE_BYTES), rng.randrange(1, 6 * ENTRY_SIZE_BYTES)]
    )
    return rng.randbytes(size)


def run_workers(
    s3_factory: Any,
    bucket: str,
    model: Model,
    rng: random.Random,
    *,
    workers: int,
    keys: int,
    stop: threading.Event,
    deadline_s: float,
    deletes: bool = True,
    copies: bool = True,
) -> list[threading.Thread]:
    """Start `workers` threads doing PUT/overwrite/DELETE/COPY until `stop` is set. Each
    worker owns its keys, so a key never has two operations in flight."""
    threads = []
    for index in range(workers):
        worker_rng = random.Random(rng.random())
        s3 = s3_factory()

        def work(worker_rng: random.Random = worker_rng, s3: Any = s3, index: int = index) -> None:
            end = time.monotonic() + deadline_s
            while not stop.is_set() and time.monotonic() < end:
                key = f"w{index}-k{worker_rng.randrange(keys)}"
                if deletes and worker_rng.random() < 0.15:
                    model.begin(key, None)
                    try:
                        s3.delete_object(Bucket=bucket, Key=key)
                    except Exception:  # noqa: BLE001 - outcome unknown
                        model.failed()
                        time.sleep(0.05)
                        continue
                    model.acknowledge(key, None)
                    continue
                if copies and worker_rng.random() < 0.1:
                    source = f"w{index}-k{worker_rng.randrange(keys)}"
                    with model.lock:
                        source_model = model.keys.get(source)
                        known = (
                            source_model is not None
                            and not source_model.unknown
                            and source_model.acknowledged is not None
                        )
                        body = source_model.acknowledged if known else None  # type: ignore[union-attr]
                    if known and source != key:
                        model.begin(key, body)
                        try:
                            s3.copy_object(
                                Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": source}
                            )
                        except Exception:  # noqa: BLE001 - outcome unknown
                            model.failed()
                            time.sleep(0.05)
                            continue
                        model.acknowledge(key, body)
                        continue
                body = random_body(worker_rng)
                model.begin(key, body)
                try:
                    s3.put_object(Bucket=bucket, Key=key, Body=body)
                except Exception:  # noqa: BLE001 - outcome unknown
                    model.failed()
                    time.sleep(0.05)
                    continue
                model.acknowledge(key, body)

        thread = threading.Thread(target=work, name=f"s3-worker-{index}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads
