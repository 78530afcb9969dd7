"""The retry policy of compare-and-set loops: attempt cap, deadline, jittered backoff."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from blobstore.catalog import metrics

# Jitter needs no per-loop seed; one generator (seeded once from the OS) serves every
# loop of the process, instead of seeding a new one per commit.
_JITTER = random.Random()


@dataclass(frozen=True, slots=True)
class CasRetryPolicy:
    attempts_max: int
    deadline_s: float
    backoff_initial_ms: float
    backoff_max_ms: float

    def start(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> CasRetry:
        return CasRetry(self, clock, sleep, clock() + self.deadline_s)


@dataclass(slots=True)
class CasRetry:
    """One loop's retry state. `await retry.backoff(reason)` returns False when exhausted."""

    policy: CasRetryPolicy
    clock: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    deadline: float
    attempt: int = 1
    failures: int = 0  # failed attempts the caller counted (backoff does not)

    async def backoff(self, reason: str) -> bool:
        if self.attempt >= self.policy.attempts_max:
            return False
        ceiling_ms = min(
            self.policy.backoff_max_ms,
            self.policy.backoff_initial_ms * (2 ** min(self.attempt - 1, 16)),
        )
        delay_s = _JITTER.uniform(0, ceiling_ms) / 1000.0  # full jitter
        if self.clock() + delay_s >= self.deadline:
            return False
        self.attempt += 1
        metrics.RETRIES.labels(reason).inc()
        await self.sleep(delay_s)
        return True
