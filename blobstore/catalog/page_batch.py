"""A batch of mutations applied to a copy of their index page: the pure decision of a
commit (page_commit_queue.py carries it out with ZooKeeper writes).

`apply_batch` runs each mutation's `apply` on the page copy, in order, and sorts the
mutations into applied, refused (a precondition failed, or a record grew too large) and
rerouted (the key left this page). `commit_action` then says what the commit does with
the result: write the page, answer the waiters without a write, or read the page again
after a sync because a decision without a write rests on a state that may lag.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from blobstore.catalog.condemned import CondemnedView
from blobstore.catalog.errors import CatalogError, LedgerCondemnedError, RecordTooLargeError
from blobstore.catalog.page import IndexPage, encode_versions
from blobstore.catalog.records import BucketRecord

# apply(versions, bucket) -> (new versions, or None when nothing changes; result)
ApplyFunction = Callable[
    [list[dict[str, Any]], BucketRecord], tuple[list[dict[str, Any]] | None, Any]
]


@dataclass(eq=False, slots=True)
class Mutation:
    bucket: str
    key: str
    apply: ApplyFunction
    extra_operations: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    future: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    submitted: float = field(default_factory=time.monotonic)
    reroutes: int = 0
    # An attempt's write failed with an unknown outcome: it may have been applied, and
    # `apply` runs again on a state that may hold its own effect.
    outcome_unknown: bool = False

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def succeed(self, result: Any) -> None:
        if not self.future.done():
            self.future.set_result(result)


@dataclass(slots=True)
class BatchOnPage:
    """A batch applied to `work`, a copy of its page."""

    work: IndexPage
    applied: list[tuple[Mutation, Any]] = field(default_factory=list)  # with apply's result
    refused: list[tuple[Mutation, CatalogError]] = field(default_factory=list)
    rerouted: list[Mutation] = field(default_factory=list)  # their key left this page
    changed: bool = False  # `work` differs from the page
    # Some applied mutation references a ledger no version of its key referenced before:
    # the write checks the condemned set's generation (condemned.py).
    references_new_ledgers: bool = False

    def still_pending(self) -> list[Mutation]:
        """The mutations a failed write leaves to the next attempt: the applied ones,
        then the refused ones (a refusal may not stand on a newer page)."""
        return [m for m, _ in self.applied] + [m for m, _ in self.refused]

    def applied_mutations(self) -> list[Mutation]:
        return [m for m, _ in self.applied]


def ledgers_of(versions: list[dict[str, Any]]) -> set[int]:
    """Every ledger the versions name: their extents, their manifests, and the ledgers
    a manifest names (`mfl`)."""
    ledgers: set[int] = set()
    for d in versions:
        for extent in d.get("ext", ()):
            ledgers.add(extent[0])
        for extent in d.get("mf", ()):
            ledgers.add(extent[0])
        ledgers.update(d.get("mfl", ()))
    return ledgers


def apply_batch(
    page: IndexPage,
    pending: list[Mutation],
    bucket: BucketRecord,
    record_bytes_max: int,
    condemned: CondemnedView | None = None,
) -> BatchOnPage:
    """Apply the mutations in order to a copy of `page`; each sees the ones before it.
    A mutation that would reference a ledger of `condemned` anew is refused."""
    batch = BatchOnPage(page.copy())
    work = batch.work
    for mutation in pending:
        if not work.contains(mutation.key):
            batch.rerouted.append(mutation)
            continue
        before = work.versions(mutation.key)
        referenced = ledgers_of(before)  # before `apply`, which may change the list
        try:
            versions, result = mutation.apply(before, bucket)
        except CatalogError as e:
            batch.refused.append((mutation, e))
            continue
        if versions is not None:
            line = encode_versions(versions) if versions else b""
            try:
                check_line_size(mutation.key, line, versions, record_bytes_max)
                _check_references(batch, referenced, versions, condemned)
            except (RecordTooLargeError, LedgerCondemnedError) as e:
                batch.refused.append((mutation, e))
                continue
            work.set_line(mutation.key, line)
            batch.changed = True
        batch.applied.append((mutation, result))
    return batch


def _check_references(
    batch: BatchOnPage,
    referenced: set[int],
    after: list[dict[str, Any]],
    condemned: CondemnedView | None,
) -> None:
    """Refuse a mutation that references a condemned ledger anew; note that the batch
    references new ledgers, so that its write checks the condemned set's generation."""
    added = ledgers_of(after) - referenced
    if not added:
        return
    refused = condemned.refused(added) if condemned is not None else []
    if refused:
        raise LedgerCondemnedError(refused)
    batch.references_new_ledgers = True


class CommitAction(enum.Enum):
    WRITE = "write"  # the page changed: compare-and-set it
    ANSWER = "answer"  # nothing to write, decided on the newest state
    READ_AGAIN = "read_again"  # nothing to write, on a state that may lag: sync, read


def commit_action(changed: bool, newest: bool) -> CommitAction:
    """What a commit does with a batch applied to its page. `newest`: the page was read
    after a sync, so this session's server had every write acknowledged anywhere.

    A changed page is written: its compare-and-set proves the page current. Nothing to
    write proves nothing: a page this queue wrote earlier, or one read from a server that
    lags the ensemble, may miss another gateway's acknowledged write (the key a delete
    finds absent, the object an If-Match names). Such a decision is made again on the
    newest state before the waiters hear it."""
    if changed:
        return CommitAction.WRITE
    return CommitAction.ANSWER if newest else CommitAction.READ_AGAIN


def check_line_size(
    key: str, line: bytes, versions: list[dict[str, Any]], record_bytes_max: int
) -> None:
    """One record at most record_bytes_max, one key's versions at most twice that, so a
    page can always be split below the hard limit."""
    if len(line) <= record_bytes_max:
        return
    if len(line) > 2 * record_bytes_max:
        raise RecordTooLargeError(f"the versions of {key!r}", len(line), 2 * record_bytes_max)
    newest = len(encode_versions(versions[:1]))
    if newest > record_bytes_max:
        raise RecordTooLargeError(f"record of {key!r}", newest, record_bytes_max)
