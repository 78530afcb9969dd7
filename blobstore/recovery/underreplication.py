"""The under-replicated set as the recovery side reads and edits it: list the reports
(`blobstore/wire/underreplicated.py` has their layout), add one, remove those handled,
and what they add up to (BookKeeper's LedgerUnderreplicationManager).

Reports are only ever created whole and deleted whole: two auditors, scrubbers or
readers adding at once never lose a report, and the worker that handled a report
deletes exactly it (a report added meanwhile stays for the next pass).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import underreplicated as urs

logger = logging.getLogger(__name__)

# At most this many reports read in one listing (the rest wait for the next pass).
REPORTS_LISTED_MAX = 100_000


@dataclass(frozen=True, slots=True)
class StoredReport:
    name: str  # the znode's name under UNDERREPLICATED_PATH
    report: urs.Report


@dataclass(slots=True)
class LedgerDamage:
    """Every report about one ledger, merged: bookie -> entry ids to repair there."""

    ledger_id: int
    reports: list[StoredReport] = field(default_factory=list)
    entries: dict[str, set[int]] = field(default_factory=dict)
    reasons: set[str] = field(default_factory=set)

    def add(self, stored: StoredReport) -> None:
        self.reports.append(stored)
        self.entries.setdefault(stored.report.bookie, set()).update(stored.report.entry_ids())
        self.reasons.add(stored.report.reason)

    @property
    def entry_count(self) -> int:
        return sum(len(ids) for ids in self.entries.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "bookies": {
                bookie: [list(r) for r in urs.entry_ranges(ids)]
                for bookie, ids in sorted(self.entries.items())
            },
            "entries": self.entry_count,
            "reasons": sorted(self.reasons),
            "reported_by": sorted({s.report.by for s in self.reports}),
            "first_reported_at": min(s.report.at for s in self.reports),
            "reports": len(self.reports),
        }


def merge(reports: list[StoredReport]) -> list[LedgerDamage]:
    """Reports grouped by ledger, in ledger id order."""
    damage: dict[int, LedgerDamage] = {}
    for stored in reports:
        ledger_id = stored.report.ledger_id
        damage.setdefault(ledger_id, LedgerDamage(ledger_id)).add(stored)
    return [damage[k] for k in sorted(damage)]


async def report_names(zk: ZooKeeperClient) -> list[str]:
    try:
        names = await zk.get_children(urs.UNDERREPLICATED_PATH)
    except NoNodeError:
        return []
    return sorted(names)[:REPORTS_LISTED_MAX]


async def list_reports(zk: ZooKeeperClient) -> list[StoredReport]:
    """Every report readable now (an unreadable one is logged and removed)."""
    found = []
    for name in await report_names(zk):
        path = f"{urs.UNDERREPLICATED_PATH}/{name}"
        try:
            data = (await zk.get(path)).value
        except NoNodeError:
            continue  # handled meanwhile
        try:
            report = urs.Report.decode(data)
        except ValueError as e:
            logger.warning("event=underreplicated_bad_report name=%s error=%s", name, e)
            await remove(zk, [name])
            continue
        found.append(StoredReport(name, report))
    return found


async def add(zk: ZooKeeperClient, report: urs.Report) -> str:
    """Add one report; its znode's name."""
    path = await zk.create(
        urs.report_path_prefix(report.ledger_id), report.encode(), sequence=True, makepath=True
    )
    return path.rsplit("/", 1)[-1]


async def remove(zk: ZooKeeperClient, names: list[str]) -> None:
    for name in names:
        try:
            await zk.delete(f"{urs.UNDERREPLICATED_PATH}/{name}")
        except NoNodeError:
            pass


async def ledger_count(zk: ZooKeeperClient) -> int:
    """Ledgers named by the set, from the znode names alone."""
    ids = set()
    for name in await report_names(zk):
        try:
            ids.add(urs.ledger_id_of(name))
        except ValueError:
            continue
    return len(ids)
