"""Locations of direct adds that the index does not hold yet, and their log pins.

A direct add's entry is in a direct entry log before its journal record is written
(`direct_adds.py`); applying the record notes its location here (`active`). A checkpoint
swaps these with the write cache (`swap`: they move to `flushing`), indexes them with its
slices' locations (after the entry log's fsync, in the same batches: `checkpoint_writes`),
and drops them once its synced batch is written (`indexed`), so the LastLogMark moves
past a DIRECT_ADD record only once its location is durable in the index, as for an ADD.
A failed checkpoint puts them back (`unswap`).

Each location holds a pin on its log (`entry_logger.LogPins`) until then: compaction
leaves the log alone (the index does not name the entry yet, so it would look like
garbage), and a replay after a crash finds the bytes where the record says. A location
dropped before it is indexed (a newer copy of the entry, a deleted ledger) keeps its pin
until the next checkpoint ends: only then does the LastLogMark pass its record, which a
replay would otherwise read.

The loop thread changes these maps; reader threads look locations up (`get`), and find
each one in `active`, `flushing` or the index at every instant: `swap` fills `flushing`
before it empties `active`, and `indexed` empties `flushing` after the index holds it.
"""

from __future__ import annotations

from collections.abc import Container

from bookie.entry_logger import RECORD_LENGTH, LogPins

EntryKey = tuple[int, int]
# (ledger id, entry id) -> (location, entry bytes)
Locations = dict[EntryKey, tuple[int, int]]
# One index slice: (ledger id, entry id, location) triples.
IndexSlice = list[tuple[int, int, int]]


class DirectLocations:
    def __init__(self, pins: LogPins, slice_entries: int) -> None:
        self.pins = pins
        self.slice_entries = slice_entries
        self.active: Locations = {}  # applied since the last swap
        self.flushing: Locations = {}  # being indexed by the running checkpoint
        self._unpin_next: list[int] = []  # log ids, released when the next checkpoint ends
        self._unpin_flushing: list[int] = []  # ... when the running one ends

    def get(self, key: EntryKey) -> int | None:
        """The entry's location if it is a direct add not indexed yet (any thread)."""
        found = self.active.get(key) or self.flushing.get(key)
        return None if found is None else found[0]

    def add(self, key: EntryKey, loc: int, entry_bytes: int) -> None:
        """A direct add is applied; its log pin (taken by the caller) is held here."""
        self.drop(key)
        self.active[key] = (loc, entry_bytes)

    def drop(self, key: EntryKey) -> None:
        """A newer copy replaces the entry (or its ledger is gone)."""
        old = self.active.pop(key, None)
        if old is not None:
            self._unpin_next.append(old[0] >> 32)

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [key for key in self.active if key[0] == ledger_id]:
            self.drop(key)

    def swap(self, known_ledgers: Container[int]) -> None:
        """Checkpoint step 1: what was applied goes to this checkpoint (ledgers no longer
        known are dropped)."""
        flushing: Locations = {}
        unpin = self._unpin_next
        for key, value in self.active.items():
            if key[0] in known_ledgers:
                flushing[key] = value
            else:
                unpin.append(value[0] >> 32)
        self.flushing = flushing  # first: a reader finds each location in one map
        self.active = {}
        self._unpin_flushing, self._unpin_next = unpin, []

    def checkpoint_writes(self) -> tuple[list[IndexSlice], dict[tuple[int, int], int]]:
        """The swapped locations as index slices, and their record bytes per (log id,
        ledger id) for the per-log counts."""
        items = [(ledger, entry, loc) for (ledger, entry), (loc, _) in self.flushing.items()]
        slices = [
            items[start : start + self.slice_entries]
            for start in range(0, len(items), self.slice_entries)
        ]
        added: dict[tuple[int, int], int] = {}
        for (ledger_id, _), (loc, entry_bytes) in self.flushing.items():
            key = (loc >> 32, ledger_id)
            added[key] = added.get(key, 0) + RECORD_LENGTH.size + entry_bytes
        return slices, added

    def indexed(self) -> None:
        """The checkpoint's synced batch is written: its locations and pins go."""
        self.pins.unpin(loc >> 32 for loc, _ in self.flushing.values())
        self.pins.unpin(self._unpin_flushing)
        self.flushing = {}
        self._unpin_flushing = []

    def unswap(self) -> None:
        """The checkpoint failed: its locations wait for the next one."""
        for key, value in self.flushing.items():
            if self.active.setdefault(key, value) is not value:
                self._unpin_next.append(value[0] >> 32)  # a newer copy came since
        self._unpin_next += self._unpin_flushing
        self.flushing = {}
        self._unpin_flushing = []
