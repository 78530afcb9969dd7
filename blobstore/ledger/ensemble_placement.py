"""Choosing bookies: E distinct writable bookies for a new ledger, or one replacement.

Candidates come from the registrations under /ledgers/available; read-only bookies and
bookies this client currently cannot reach are excluded by the caller. When racks are
known (more than one distinct rack among candidates), the ensemble is ordered so that
consecutive bookies (hence every write set, which is WQ consecutive ensemble slots) come
from different racks where possible; a replacement prefers a rack that none of the
other bookies of the write sets through its slot use.

`fit_quorums` lets a writer go on with fewer bookies than its ensemble asks for (one of
three down): the ensemble shrinks to the writable bookies left, then the write quorum,
then the ack quorum, never below the caller's floor of acknowledged copies.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from blobstore.ledger.errors import NotEnoughBookiesError

DEFAULT_RACK = "/default-rack"
RING_REORDER_ATTEMPTS = 200


@dataclass(frozen=True, slots=True)
class BookieInfo:
    """A registered bookie as placement sees it."""

    bookie_id: str
    rack: str = DEFAULT_RACK
    read_only: bool = False
    free_bytes: int | None = None


def _racks_known(candidates: Sequence[BookieInfo]) -> bool:
    return len({c.rack for c in candidates}) > 1


@dataclass(frozen=True, slots=True)
class Quorums:
    """E, WQ and AQ of a ledger: E >= WQ >= AQ >= 1."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int


def fit_quorums(
    wanted: Quorums,
    candidates: Iterable[BookieInfo],
    ack_quorum_min: int,
    *,
    exclude: Iterable[str] = (),
) -> Quorums:
    """The quorums a new ledger gets from the writable bookies among `candidates` (not
    excluded): `wanted` when they suffice, else E, WQ and AQ each cut to the bookies there
    are. Refuses (NotEnoughBookiesError) when that would take AQ below `ack_quorum_min`;
    a floor above the wanted AQ is the wanted AQ (a caller's quorums are never raised)."""
    candidates = list(candidates)
    excluded = set(exclude)
    writable = len(
        {c.bookie_id for c in candidates if not c.read_only and c.bookie_id not in excluded}
    )
    floor = max(1, min(ack_quorum_min, wanted.ack_quorum))
    if writable < floor:
        raise _not_enough(
            f"{writable} writable bookie{'' if writable == 1 else 's'}, {floor} needed "
            f"for {floor} acknowledged copies",
            candidates,
        )
    return Quorums(
        ensemble_size=min(wanted.ensemble_size, writable),
        write_quorum=min(wanted.write_quorum, writable),
        ack_quorum=min(wanted.ack_quorum, writable),
    )


def choose_ensemble(
    candidates: Iterable[BookieInfo],
    ensemble_size: int,
    write_quorum: int,
    *,
    exclude: Iterable[str] = (),
    rng: random.Random | None = None,
) -> tuple[str, ...]:
    """E distinct writable bookies; raises NotEnoughBookiesError when there are fewer."""
    rng = rng or random.Random()
    candidates = list(candidates)
    excluded = set(exclude)
    pool = sorted(
        {
            c.bookie_id: c for c in candidates if not c.read_only and c.bookie_id not in excluded
        }.values(),
        key=lambda c: c.bookie_id,
    )
    if len(pool) < ensemble_size:
        raise _not_enough(
            f"need {ensemble_size} writable bookies, {len(pool)} available", candidates
        )
    rng.shuffle(pool)
    if not _racks_known(pool):
        return tuple(c.bookie_id for c in pool[:ensemble_size])
    by_rack: dict[str, list[BookieInfo]] = {}
    for candidate in pool:
        by_rack.setdefault(candidate.rack, []).append(candidate)
    racks = list(by_rack)
    rng.shuffle(racks)
    # Round-robin over racks: consecutive picks come from distinct racks while the racks
    # last, so every window of WQ consecutive slots spans min(WQ, racks) racks.
    chosen: list[BookieInfo] = []
    while len(chosen) < ensemble_size:
        for rack in racks:
            if by_rack[rack] and len(chosen) < ensemble_size:
                chosen.append(by_rack[rack].pop())
    # The ring wraps (the last slot's write set includes the first slots): when the
    # round-robin order leaves rack conflicts, try a bounded number of reorderings.
    best = list(chosen)
    best_conflicts = _conflict_count(best, write_quorum)
    for _ in range(RING_REORDER_ATTEMPTS if best_conflicts else 0):
        rng.shuffle(chosen)
        conflicts = _conflict_count(chosen, write_quorum)
        if conflicts < best_conflicts:
            best, best_conflicts = list(chosen), conflicts
            if not conflicts:
                break
    return tuple(c.bookie_id for c in best)


def _conflict_count(chosen: list[BookieInfo], write_quorum: int) -> int:
    """Pairs of slots within one write set that share a rack."""
    size = len(chosen)
    return sum(
        1
        for i in range(size)
        for d in range(1, min(write_quorum, size))
        if chosen[i].rack == chosen[(i + d) % size].rack
    )


def choose_replacement(
    candidates: Iterable[BookieInfo],
    ensemble: Sequence[str],
    index: int,
    write_quorum: int,
    *,
    exclude: Iterable[str] = (),
    rng: random.Random | None = None,
) -> str:
    """A writable bookie not in `ensemble` to take slot `index`."""
    rng = rng or random.Random()
    candidates = list(candidates)
    excluded = set(exclude) | set(ensemble)
    pool = [c for c in candidates if not c.read_only and c.bookie_id not in excluded]
    if not pool:
        raise _not_enough(
            f"no writable bookie to replace {ensemble[index]} (ensemble {list(ensemble)})",
            candidates,
        )
    rng.shuffle(pool)
    if not _racks_known(pool):
        return pool[0].bookie_id
    racks = {c.bookie_id: c.rack for c in candidates}
    size = len(ensemble)
    neighbours = {
        racks.get(ensemble[(index + d) % size])
        for d in range(-(write_quorum - 1), write_quorum)
        if d != 0
    }
    for candidate in pool:
        if candidate.rack not in neighbours:
            return candidate.bookie_id
    return pool[0].bookie_id


def _not_enough(message: str, candidates: Iterable[BookieInfo]) -> NotEnoughBookiesError:
    """The error, naming the registered bookies that refuse writes, if any do: a bookie
    turns read-only when its disks fill up (disk_usage_threshold) or fail."""
    read_only = tuple(sorted(c.bookie_id for c in candidates if c.read_only))
    if read_only:
        message += f"; {len(read_only)} read-only (disk full or failing): {', '.join(read_only)}"
    return NotEnoughBookiesError(message, read_only=read_only)
