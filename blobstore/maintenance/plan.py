"""What a run does with the ledgers, decided from the scan (pure: no I/O).

Deleting a ledger takes two looks (docs/maintenance.md): a scan finds it unreferenced and
it is *condemned*; a later scan, begun after the condemnation took effect, finds it
unreferenced again and it is deleted, once it has been condemned for the grace period.
A condemned ledger that the later scan finds referenced (a reference committed before
the condemnation, that the first scan walked past) is absolved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from blobstore.catalog.condemned import TOMBSTONE_S, Condemnation
from blobstore.ledger.config import OBJECT_LEDGER_PURPOSE
from blobstore.ledger.ledger_metadata import STATE_CLOSED


@dataclass(frozen=True, slots=True)
class LedgerStat:
    """One ledger as the scan saw it: its metadata and what references it."""

    ledger_id: int
    state: str
    purpose: str
    length: int  # payload bytes
    write_quorum: int
    live_bytes: int = 0  # bytes of object extents in it
    referenced: bool = False  # any extent, part or manifest names it
    pinned: bool = False  # a part or a manifest names it: it is not compacted
    writer: str = ""  # the gateway (or compaction task) that created it

    @property
    def collectable(self) -> bool:
        """A ledger the job may ever delete: a closed ledger of object data."""
        return self.state == STATE_CLOSED and self.purpose == OBJECT_LEDGER_PURPOSE

    @property
    def live_ratio(self) -> float:
        return self.live_bytes / self.length if self.length > 0 else 1.0


@dataclass(slots=True)
class GcPlan:
    delete: list[Condemnation] = field(default_factory=list)
    absolve: list[int] = field(default_factory=list)
    condemn: list[int] = field(default_factory=list)
    tombstone: list[Condemnation] = field(default_factory=list)  # metadata already gone
    forget: list[int] = field(default_factory=list)  # tombstones old enough to drop
    waiting: list[int] = field(default_factory=list)  # condemned, not yet deletable


@dataclass(frozen=True, slots=True)
class GcInputs:
    ledgers: Mapping[int, LedgerStat]
    referenced: frozenset[int]  # every ledger some extent row names
    condemned: Mapping[int, Condemnation]
    covered_zxid: int  # condemnations created before this zxid are covered by the scan
    clock: float  # wall clock now (grace and tombstones)
    grace_s: float
    blocked: bool = False  # a manifest could not be read: delete and condemn nothing


def plan_gc(inputs: GcInputs) -> GcPlan:
    plan = GcPlan()
    for ledger_id, condemnation in sorted(inputs.condemned.items()):
        _decide_condemned(inputs, ledger_id, condemnation, plan)
    if not inputs.blocked:
        plan.condemn = [
            stat.ledger_id
            for stat in sorted(inputs.ledgers.values(), key=lambda s: s.ledger_id)
            if stat.collectable
            and stat.ledger_id not in inputs.referenced
            and stat.ledger_id not in inputs.condemned
        ]
    return plan


def _decide_condemned(
    inputs: GcInputs, ledger_id: int, condemnation: Condemnation, plan: GcPlan
) -> None:
    if condemnation.deleted is not None:
        if condemnation.deleted + TOMBSTONE_S <= inputs.clock:
            plan.forget.append(ledger_id)
        return
    stat = inputs.ledgers.get(ledger_id)
    covered = condemnation.czxid < inputs.covered_zxid
    if ledger_id in inputs.referenced:
        if covered:
            plan.absolve.append(ledger_id)  # a reference older than the condemnation
        else:
            plan.waiting.append(ledger_id)
        return
    if stat is None:
        if covered:
            plan.tombstone.append(condemnation)  # deleted, the tombstone not written yet
        else:
            plan.waiting.append(ledger_id)
        return
    due = covered and condemnation.since + inputs.grace_s <= inputs.clock
    if due and stat.collectable and not inputs.blocked:
        plan.delete.append(condemnation)
    else:
        plan.waiting.append(ledger_id)


@dataclass(frozen=True, slots=True)
class CompactionChoice:
    ledger_ids: list[int]
    live_bytes: int
    garbage_bytes: int


def plan_compaction(
    ledgers: Iterable[LedgerStat],
    condemned: Mapping[int, Condemnation],
    threshold: float,
    garbage_bytes_min: int,
    bytes_max: int,
) -> CompactionChoice:
    """Closed, referenced, unpinned ledgers under the live-ratio threshold with enough
    garbage to be worth a copy, emptiest first, up to `bytes_max` copied."""
    candidates = sorted(
        (
            stat
            for stat in ledgers
            if stat.collectable
            and stat.referenced
            and not stat.pinned
            and stat.ledger_id not in condemned
            and stat.live_ratio < threshold
            and stat.length - stat.live_bytes >= garbage_bytes_min
        ),
        key=lambda s: (s.live_ratio, s.ledger_id),
    )
    chosen: list[int] = []
    live = garbage = 0
    for stat in candidates:
        if live + stat.live_bytes > bytes_max:
            break
        chosen.append(stat.ledger_id)
        live += stat.live_bytes
        garbage += stat.length - stat.live_bytes
    return CompactionChoice(chosen, live, garbage)


def orphans(ledgers: Iterable[LedgerStat], live_writers: set[str]) -> list[int]:
    """Object ledgers left OPEN (or half recovered) by a writer that is gone: recovered
    (fenced and closed) before GC can consider them, as the gateways' sweeper does."""
    return sorted(
        stat.ledger_id
        for stat in ledgers
        if stat.state != STATE_CLOSED
        and stat.purpose == OBJECT_LEDGER_PURPOSE
        and stat.writer
        and stat.writer not in live_writers
    )


def fully_released(holders: Mapping[int, tuple[int, int]]) -> list[int]:
    """Ledgers every holder of which this run released (deleted by lifecycle or moved
    by compaction): (holders, released) per ledger."""
    return sorted(
        ledger for ledger, (count, released) in holders.items() if count and released >= count
    )
