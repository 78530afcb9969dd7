"""Where the replicas of an entry go, and when a set of answers is enough.

Striping: replica w (0 <= w < WQ) of entry e goes to ensemble[(e + w) % E]. With E=3,
WQ=2: entry 0 -> bookies 0,1; entry 1 -> 1,2; entry 2 -> 2,0; entry 3 -> 0,1 ...

Quorum rules used by the writer and by recovery:

- an add completes when AQ bookies of its write set acknowledged it (`AckSet`);
- fencing is complete once every write set has fewer than AQ bookies that did not
  answer the fence: then no add can still reach AQ anywhere (`FenceQuorum`);
- recovery may treat an entry as never acknowledged once at least WQ - AQ + 1 bookies
  of its write set answered "no such entry": fewer than AQ bookies can hold it
  (`is_entry_missing`).
"""

from __future__ import annotations

from collections.abc import Iterable


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Ensemble indexes holding `entry_id`, in replica order."""
    assert entry_id >= 0, entry_id
    assert 1 <= write_quorum <= ensemble_size, (write_quorum, ensemble_size)
    return [(entry_id + w) % ensemble_size for w in range(write_quorum)]


def write_set_bookies(
    entry_id: int, ensemble: tuple[str, ...] | list[str], write_quorum: int
) -> list[str]:
    return [ensemble[i] for i in write_set(entry_id, len(ensemble), write_quorum)]


def all_write_sets(ensemble_size: int, write_quorum: int) -> list[list[int]]:
    """The distinct write sets of an ensemble (E of them, or one when WQ == E)."""
    count = 1 if write_quorum == ensemble_size else ensemble_size
    return [write_set(e, ensemble_size, write_quorum) for e in range(count)]


class AckSet:
    """Acknowledgements of one add, by ensemble index."""

    __slots__ = ("ack_quorum", "write_set", "_acked")

    def __init__(self, write_set_indexes: Iterable[int], ack_quorum: int) -> None:
        self.write_set = tuple(write_set_indexes)
        assert 1 <= ack_quorum <= len(self.write_set), (ack_quorum, self.write_set)
        self.ack_quorum = ack_quorum
        self._acked: set[int] = set()

    def ack(self, index: int) -> bool:
        """Record an ack from ensemble index `index`; True once AQ is reached."""
        assert index in self.write_set, (index, self.write_set)
        self._acked.add(index)
        return self.complete

    def unset(self, index: int) -> None:
        """Forget an ack (its bookie is being replaced: the add is resent there)."""
        self._acked.discard(index)

    def has(self, index: int) -> bool:
        return index in self._acked

    @property
    def complete(self) -> bool:
        return len(self._acked) >= self.ack_quorum

    @property
    def acked(self) -> frozenset[int]:
        return frozenset(self._acked)


class FenceQuorum:
    """Which bookies of the last ensemble answered a fencing read.

    Complete when, for every write set, fewer than AQ of its bookies are unfenced:
    equivalently at least WQ - AQ + 1 of each write set answered.
    """

    __slots__ = ("ensemble_size", "write_quorum", "ack_quorum", "_answered")

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        assert 1 <= ack_quorum <= write_quorum <= ensemble_size
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self._answered: set[int] = set()

    def answered(self, index: int) -> None:
        assert 0 <= index < self.ensemble_size, index
        self._answered.add(index)

    @property
    def complete(self) -> bool:
        for indexes in all_write_sets(self.ensemble_size, self.write_quorum):
            unfenced = sum(1 for i in indexes if i not in self._answered)
            if unfenced >= self.ack_quorum:
                return False
        return True


def is_entry_missing(no_such_entry_count: int, write_quorum: int, ack_quorum: int) -> bool:
    """True when so many replicas lack the entry that it cannot have reached AQ acks."""
    assert 0 <= no_such_entry_count <= write_quorum, (no_such_entry_count, write_quorum)
    return no_such_entry_count >= write_quorum - ack_quorum + 1
