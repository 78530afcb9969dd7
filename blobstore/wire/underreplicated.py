"""The under-replicated set in ZooKeeper: entries known to lack a good copy on a bookie
that should hold one. Bookies (their scrubber), ledger readers (read-repair) and the
auditor add to it; the replication worker (`blobstore/recovery/replication_worker.py`)
repairs what it names and removes it. BookKeeper's `/ledgers/underreplication`.

    /ledgers/underreplicated/L<ledger id, 19 digits>-<sequence>   JSON report

One znode per report, created with a sequence suffix: a reporter never reads or merges
another's report (no compare-and-set, no lost update), and the worker removes exactly
the reports it handled. The same entry may be named by several reports; the worker
merges them. A report:

    {"ledger_id": 12, "bookie": "10.0.0.5:3181", "entries": [[0, 3], [7, 7]],
     "reason": "digest_mismatch", "by": "scrubber 10.0.0.5:3181", "at": 1764350000.0}

`entries` are inclusive ranges of entry ids whose copy on `bookie` is bad or missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from blobstore.wire.zk_layout import LEDGER_ID_DIGITS, LEDGERS_ROOT

UNDERREPLICATED_PATH = f"{LEDGERS_ROOT}/underreplicated"
REPORT_PREFIX = "L"
# A report names at most this many ranges (a whole lost ledger is one range): the znode
# stays far below ZooKeeper's 1 MiB.
REPORT_RANGES_MAX = 10_000

# Why a copy is reported.
DIGEST_MISMATCH = "digest_mismatch"  # the CRC32C of the stored bytes does not verify
MISSING = "missing"  # the bookie has no such entry (or no such ledger)
UNREADABLE = "unreadable"  # the index names bytes the entry log does not hold
REASONS = (DIGEST_MISMATCH, MISSING, UNREADABLE)


def report_path_prefix(ledger_id: int) -> str:
    """The path given to a sequential create: ZooKeeper appends the sequence."""
    return f"{UNDERREPLICATED_PATH}/{REPORT_PREFIX}{ledger_id:0{LEDGER_ID_DIGITS}d}-"


def ledger_id_of(name: str) -> int:
    """The ledger a report's znode name is about; ValueError for a name that is not a
    report's."""
    if (
        not name.startswith(REPORT_PREFIX)
        or name[1 + LEDGER_ID_DIGITS : 2 + LEDGER_ID_DIGITS] != "-"
    ):
        raise ValueError(f"not an under-replication report: {name!r}")
    return int(name[1 : 1 + LEDGER_ID_DIGITS])


def entry_ranges(entry_ids: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted entry ids as inclusive (first, last) runs."""
    ranges: list[tuple[int, int]] = []
    for entry_id in sorted(set(entry_ids)):
        if ranges and ranges[-1][1] == entry_id - 1:
            ranges[-1] = (ranges[-1][0], entry_id)
        else:
            ranges.append((entry_id, entry_id))
    return ranges


@dataclass(frozen=True, slots=True)
class Report:
    """Entries of one ledger whose copy on `bookie` is bad or missing."""

    ledger_id: int
    bookie: str
    ranges: tuple[tuple[int, int], ...]
    reason: str
    by: str
    at: float

    def __post_init__(self) -> None:
        assert self.ranges and len(self.ranges) <= REPORT_RANGES_MAX, len(self.ranges)
        assert all(0 <= first <= last for first, last in self.ranges), self.ranges

    @classmethod
    def of(
        cls, ledger_id: int, bookie: str, entry_ids: Iterable[int], reason: str, by: str, at: float
    ) -> Report:
        return cls(ledger_id, bookie, tuple(entry_ranges(entry_ids)), reason, by, at)

    def entry_ids(self) -> list[int]:
        return [e for first, last in self.ranges for e in range(first, last + 1)]

    @property
    def entry_count(self) -> int:
        return sum(last - first + 1 for first, last in self.ranges)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "ledger_id": self.ledger_id,
                "bookie": self.bookie,
                "entries": [list(r) for r in self.ranges],
                "reason": self.reason,
                "by": self.by,
                "at": self.at,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Report:
        """ValueError for anything that is not a report."""
        try:
            raw = json.loads(data)
            ranges = tuple((int(first), int(last)) for first, last in raw["entries"])
            if not 0 < len(ranges) <= REPORT_RANGES_MAX or any(
                not 0 <= first <= last for first, last in ranges
            ):
                raise ValueError(f"bad entry ranges {raw['entries']!r:.80}")
            report = cls(
                int(raw["ledger_id"]),
                str(raw["bookie"]),
                ranges,
                str(raw["reason"]),
                str(raw.get("by", "")),
                float(raw.get("at", 0.0)),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"not an under-replication report: {e!r}") from None
        return report


def split_reports(
    ledger_id: int, bookie: str, entry_ids: Iterable[int], reason: str, by: str, at: float
) -> list[Report]:
    """Reports naming `entry_ids`, each within REPORT_RANGES_MAX ranges."""
    ranges = entry_ranges(entry_ids)
    return [
        Report(ledger_id, bookie, tuple(ranges[i : i + REPORT_RANGES_MAX]), reason, by, at)
        for i in range(0, len(ranges), REPORT_RANGES_MAX)
    ]
