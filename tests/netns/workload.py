"""A concurrent S3 workload over every gateway that records its history.

Workers (threads, one boto3 client per gateway each, one attempt per request) share a
small keyspace that changes with each fault cycle (`c<cycle>-k<n>`): a key is written
and read by every worker during its cycle, and only read afterwards, so each key's
history stays small enough for an exhaustive linearizability search, while every key is
still read back after all the faults that follow. Operations: PUT (a random body, empty
to a few entries, now and then dozens of entries), DELETE, GET of a current or an older
key, and a listing of the whole bucket.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from bench import s3_load
from tests.netns.checker import DELETE, FAIL, GET, INFO, LIST, OK, PUT, Op
from tests.waiting import wait_until

KEYS_PER_CYCLE = 8
LISTING_PAGES_MAX = 20


def value_of(body: bytes) -> str:
    """What the history keeps of a body: its size and digest."""
    return f"{len(body)}:{hashlib.sha256(body).hexdigest()[:20]}"


def random_body(rng: random.Random, entry_size_bytes: int) -> bytes:
    if rng.random() < 0.03:
        return rng.randbytes(rng.randrange(10 * entry_size_bytes, 20 * entry_size_bytes))
    size = rng.choice(
        [0, 1, rng.randrange(2, entry_size_bytes), rng.randrange(1, 5 * entry_size_bytes)]
    )
    return rng.randbytes(size)


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)

    def snapshot(self) -> list[Op]:
        with self.lock:
            return list(self.ops)

    def counts(self) -> Counter[str]:
        return Counter(f"{op.kind} {op.outcome}" for op in self.snapshot())


def key_name(cycle: int, index: int) -> str:
    return f"c{cycle:04d}-k{index}"


def get(s3: Any, bucket: str, key: str) -> str | None:
    """The value read, None when the key does not exist; raises on any other error."""
    try:
        response = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if e.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return None
        raise
    return value_of(response["Body"].read())


def list_keys(s3: Any, bucket: str) -> frozenset[str]:
    keys: set[str] = set()
    token: dict[str, str] = {}
    for _ in range(LISTING_PAGES_MAX):
        page = s3.list_objects_v2(Bucket=bucket, **token)
        keys.update(item["Key"] for item in page.get("Contents", []))
        if not page.get("IsTruncated"):
            return frozenset(keys)
        token = {"ContinuationToken": page["NextContinuationToken"]}
    raise RuntimeError(f"listing longer than {LISTING_PAGES_MAX} pages")


@dataclass
class Workload:
    clients: list[list[Any]]  # per worker, one client per gateway
    bucket: str
    history: History
    seed: int
    entry_size_bytes: int
    cycle: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def start(self) -> None:
        for process, clients in enumerate(self.clients):
            rng = random.Random(f"{self.seed}:worker:{process}")
            thread = threading.Thread(
                target=self._run,
                args=(process, clients, rng),
                name=f"s3-worker-{process}",
                daemon=True,
            )
            thread.start()
            self.threads.append(thread)

    def finish(self, timeout_s: float = 60.0) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout_s)
        assert not any(t.is_alive() for t in self.threads), "a worker did not stop"
        assert not self.errors, f"a worker failed: {self.errors!r}"

    def _run(self, process: int, clients: list[Any], rng: random.Random) -> None:
        try:
            while not self.stop.is_set():
                s3 = rng.choice(clients)
                self.history.add(self._operate(process, s3, rng))
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.errors.append(e)

    def _operate(self, process: int, s3: Any, rng: random.Random) -> Op:
        cycle = self.cycle
        key = key_name(cycle, rng.randrange(KEYS_PER_CYCLE))
        roll = rng.random()
        if roll < 0.35:
            body = random_body(rng, self.entry_size_bytes)
            return timed(
                process,
                PUT,
                key,
                value_of(body),
                lambda: s3.put_object(Bucket=self.bucket, Key=key, Body=body),
            )
        if roll < 0.45:
            return timed(
                process, DELETE, key, None, lambda: s3.delete_object(Bucket=self.bucket, Key=key)
            )
        if roll < 0.52:
            return timed_list(process, lambda: list_keys(s3, self.bucket))
        if roll < 0.62 and cycle > 0:
            key = key_name(rng.randrange(cycle), rng.randrange(KEYS_PER_CYCLE))
        return timed_get(process, key, lambda: get(s3, self.bucket, key))


def timed(process: int, kind: str, key: str, value: str | None, call: Callable[[], object]) -> Op:
    """A write: OK when answered with success, INFO (unknown) on any error."""
    invoke_s = time.monotonic()
    try:
        call()
    except Exception:  # noqa: BLE001 - an unanswered write's outcome is unknown
        return Op(process, kind, key, value, invoke_s, time.monotonic(), INFO)
    return Op(process, kind, key, value, invoke_s, time.monotonic(), OK)


def timed_get(process: int, key: str, call: Callable[[], str | None]) -> Op:
    invoke_s = time.monotonic()
    try:
        value = call()
    except Exception:  # noqa: BLE001 - a failed read changed nothing
        return Op(process, GET, key, None, invoke_s, time.monotonic(), FAIL)
    return Op(process, GET, key, value, invoke_s, time.monotonic(), OK)


def timed_list(process: int, call: Callable[[], frozenset[str]]) -> Op:
    invoke_s = time.monotonic()
    try:
        listed = call()
    except Exception:  # noqa: BLE001 - a failed listing changed nothing
        return Op(process, LIST, "", None, invoke_s, time.monotonic(), FAIL)
    return Op(process, LIST, "", None, invoke_s, time.monotonic(), OK, listed)


def final_reads(
    clients: list[Any], bucket: str, keys: list[str], history: History, timeout_s: float
) -> None:
    """Read every key (through the gateways in turn), recording the reads; a read that
    fails is tried again, through the next gateway, until `timeout_s`."""
    for index, key in enumerate(sorted(keys)):
        attempts = itertools.count(index)

        def read(key: str = key, attempts: Iterator[int] = attempts) -> bool:
            s3 = clients[next(attempts) % len(clients)]
            op = timed_get(-1, key, lambda: get(s3, bucket, key))
            history.add(op)
            return op.outcome == OK

        wait_until(
            read, timeout_s, message=f"{key!r} unreadable after the faults healed", interval_s=0.2
        )


@dataclass
class BackgroundLoad:
    """The benchmark generator (bench/s3_load.py) as load beside the checked workload:
    open-loop 4 KiB PUTs at a modest rate into a bucket of its own, in phases of a few
    seconds, each through a gateway picked at random. Its objects are only counted (and
    checked by fsck at the end), never read back; errors during faults are expected."""

    endpoints: list[str]
    bucket: str
    access_key: str
    secret_key: str
    seed: int
    rate_per_s: float = 20.0
    phase_s: float = 4.0
    stop: threading.Event = field(default_factory=threading.Event)
    ops: int = 0
    errors: int = 0
    phases_failed: int = 0
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="bench-load", daemon=True)
        self.thread.start()

    def finish(self, timeout_s: float = 60.0) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout_s)
            assert not self.thread.is_alive(), "the benchmark generator did not stop"

    def _run(self) -> None:
        rng = random.Random(f"{self.seed}:bench")
        phase = 0
        while not self.stop.is_set():
            endpoint = rng.choice(self.endpoints)
            factory = s3_load.put_op(self.bucket, 4096, prefix=f"p{phase}-")
            try:
                result = s3_load.run_phase(
                    f"background {phase}",
                    endpoint,
                    self.access_key,
                    self.secret_key,
                    factory,
                    concurrency=2,
                    duration_s=self.phase_s,
                    request_timeout_s=5.0,
                    rate=self.rate_per_s,
                )
            except Exception:  # noqa: BLE001 - a phase cut short by a fault
                self.phases_failed += 1
            else:
                self.ops += result.ops
                self.errors += result.errors
            phase += 1
