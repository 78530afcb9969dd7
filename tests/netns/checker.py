"""The history of a concurrent S3 workload, and the checker that judges it.

An operation is recorded once it ends, with the time it was invoked and the time it
ended (`time.monotonic()` of the one process that runs every client). Its outcome is:
- OK: the gateway answered with success (a GET's value is what it read; None: no key);
- FAIL: it certainly had no effect (only reads and listings are ever FAIL);
- INFO: no answer or an error: a PUT or DELETE of INFO may take effect at any time
  after its invocation, or never (its completion is treated as infinitely late).

Each key is a register: PUT writes a value (a digest of the body), DELETE writes None, a
GET reads. The checks, each pure:
- `foreign_reads`: a GET returned bytes that no PUT of that key ever sent (a partial or
  torn object, or another key's bytes);
- `nonlinearizable_keys`: no order of the key's operations agrees with real time and
  the register's rules (a Wing–Gong search with memoized states, as Knossos does, bounded:
  a key whose search passes `states_max` is reported as undecided, never as passed;
  unknown PUTs of unique bodies are settled first, `settle_unknown_writes`);
- `listing_omissions`: a listing that began after a PUT of a key was acknowledged lacks
  that key, while no DELETE of it could have taken effect in between; and listings
  naming a key no PUT had been invoked for.
Acknowledged PUTs are then readable and byte-identical until overwritten or deleted: a
final read of every key, recorded in the same history, must be linearizable with it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

OK, FAIL, INFO = "ok", "fail", "info"
PUT, GET, DELETE, LIST = "put", "get", "delete", "list"
STATES_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class Op:
    process: int
    kind: str
    key: str
    value: str | None
    invoke_s: float
    complete_s: float
    outcome: str
    listed: frozenset[str] | None = None

    def __post_init__(self) -> None:
        assert self.kind in (PUT, GET, DELETE, LIST), self.kind
        assert self.outcome in (OK, FAIL, INFO), self.outcome
        assert self.complete_s >= self.invoke_s, (self.invoke_s, self.complete_s)
        assert self.outcome != FAIL or self.kind in (GET, LIST), "a write's failure is unknown"

    @property
    def is_write(self) -> bool:
        return self.kind in (PUT, DELETE)

    @property
    def end_s(self) -> float:
        """When the operation had surely taken effect (never, for an unknown write)."""
        return self.complete_s if self.outcome == OK else math.inf

    def describe(self) -> str:
        value = sorted(self.listed or ()) if self.kind == LIST else self.value
        return (
            f"p{self.process} {self.kind} {self.key!r} {value!r} {self.outcome} "
            f"[{self.invoke_s:.3f}, {self.complete_s:.3f}]"
        )


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    key: str
    detail: str


def register_ops(history: Iterable[Op]) -> dict[str, list[Op]]:
    """Per key, the operations that bear on its register: every write, and the reads
    that returned."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.is_write or (op.kind == GET and op.outcome == OK):
            by_key[op.key].append(op)
    return dict(by_key)


def settle_unknown_writes(ops: list[Op]) -> list[Op]:
    """The key's operations with each unknown PUT of a body no other write of the key
    sent settled, which keeps the same verdict with far fewer orders to search:
    - no read returned its body: dropped (whether it took effect, no read can tell);
    - some read did: it took effect, before the first of those reads completed, so it
      becomes an acknowledged write that completed then.
    Unknown DELETEs stay as they are (their None is also the state before any write)."""
    writes = Counter(op.value for op in ops if op.is_write)
    first_read_end: dict[str | None, float] = {}
    for op in ops:
        if op.kind == GET:
            first_read_end[op.value] = min(first_read_end.get(op.value, math.inf), op.complete_s)
    settled = []
    for op in ops:
        if op.outcome != INFO or op.kind != PUT or writes[op.value] > 1:
            settled.append(op)
        elif op.value in first_read_end:
            complete_s = max(op.invoke_s, first_read_end[op.value])
            settled.append(replace(op, outcome=OK, complete_s=complete_s))
    return settled


def foreign_reads(history: Iterable[Op]) -> list[Finding]:
    ops = list(history)
    written: dict[str, set[str | None]] = defaultdict(lambda: {None})
    for op in ops:
        if op.kind == PUT:
            written[op.key].add(op.value)
    return [
        Finding("foreign read", op.key, f"{op.describe()} read bytes no PUT of the key sent")
        for op in ops
        if op.kind == GET and op.outcome == OK and op.value not in written[op.key]
    ]


def linearizable(
    ops: list[Op], initial: str | None = None, states_max: int = STATES_MAX
) -> bool | None:
    """Whether the register's operations have a legal order consistent with real time;
    None when the search visited `states_max` states without an answer."""
    ops = sorted(ops, key=lambda op: op.invoke_s)
    required = 0
    for index, op in enumerate(ops):
        if op.outcome == OK:
            required |= 1 << index
    seen: set[tuple[int, str | None]] = set()
    stack: list[tuple[int, str | None]] = [(0, initial)]
    while stack:
        done, state = stack.pop()
        if done & required == required:
            return True
        if (done, state) in seen:
            continue
        seen.add((done, state))
        if len(seen) > states_max:
            return None
        stack.extend(_next_states(ops, done, state))
    return False


def _next_states(ops: list[Op], done: int, state: str | None) -> list[tuple[int, str | None]]:
    """The states after each operation that may take effect next: one invoked before
    every pending operation's end."""
    pending = [index for index in range(len(ops)) if not done >> index & 1]
    horizon = min(ops[index].end_s for index in pending)
    following = []
    for index in pending:
        op = ops[index]
        if op.invoke_s > horizon:
            break  # sorted by invocation: no later one may go first either
        if op.kind == GET:
            if op.value == state:
                following.append((done | 1 << index, state))
        else:
            following.append((done | 1 << index, op.value))
    return following


def nonlinearizable_keys(history: Iterable[Op], states_max: int = STATES_MAX) -> list[Finding]:
    findings = []
    for key, ops in sorted(register_ops(history).items()):
        verdict = linearizable(settle_unknown_writes(ops), None, states_max)
        if verdict is True:
            continue
        check = "undecided" if verdict is None else "not linearizable"
        shown = "\n  ".join(op.describe() for op in sorted(ops, key=lambda op: op.invoke_s)[-40:])
        findings.append(Finding(check, key, f"{len(ops)} operations, the last:\n  {shown}"))
    return findings


def listing_omissions(history: Iterable[Op]) -> list[Finding]:
    ops = list(history)
    puts: dict[str, list[Op]] = defaultdict(list)
    deletes: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind == PUT:
            puts[op.key].append(op)
        elif op.kind == DELETE:
            deletes[op.key].append(op)
    findings = []
    for listing in ops:
        if listing.kind != LIST or listing.outcome != OK:
            continue
        assert listing.listed is not None
        for key in sorted(puts):
            if key not in listing.listed and _must_list(listing, puts[key], deletes[key]):
                findings.append(Finding("listing omits", key, listing.describe()))
        for key in sorted(listing.listed - set(puts)):
            findings.append(Finding("listing invents", key, listing.describe()))
        for key in sorted(listing.listed & set(puts)):
            if all(put.invoke_s > listing.complete_s for put in puts[key]):
                findings.append(Finding("listing invents", key, listing.describe()))
    return findings


def _must_list(listing: Op, puts: list[Op], deletes: list[Op]) -> bool:
    """Some PUT was acknowledged before the listing began, and no DELETE may have taken
    effect after that PUT and before the listing ended."""
    return any(
        put.outcome == OK
        and put.complete_s < listing.invoke_s
        and not any(
            delete.end_s > put.invoke_s and delete.invoke_s < listing.complete_s
            for delete in deletes
        )
        for put in puts
    )


def check(history: Iterable[Op], states_max: int = STATES_MAX) -> list[Finding]:
    ops = list(history)
    return [
        *foreign_reads(ops),
        *nonlinearizable_keys(ops, states_max),
        *listing_omissions(ops),
    ]
