"""The auditor: re-replicates what a bookie held once it has been gone too long.

A bookie that stops (a crash, a lost disk, a node taken away) leaves every entry it held
one replica short. Writers replace it for new entries at once (ensemble change), but what
it held stays under-replicated until it returns, and a second failure meanwhile can lose
entries. After `lost_bookie_delay_s` without its registration (`/ledgers/available/<id>`),
the auditor copies everything the bookie held to other bookies and takes it out of every
ledger's ensembles: the operation of `blobstore admin decommission`, run for it. When no
ledger names the bookie any more it is listed under `/ledgers/decommissioned`, safe to
wipe. This is BookKeeper's Auditor with `lostBookieRecoveryDelay`, run in the gateways
like the ledger sweeper: one pass per interval for the whole cluster, under an ephemeral
lock (`/auditor/lock`).

Known bookies are those with a cookie (`/ledgers/cookies/<id>`, written when a bookie is
first formatted). When a bookie was first seen missing is kept in `/auditor`, so the
delay counts from the first gateway that noticed, whichever process runs later passes.

Each pass then looks after the copies of live bookies (`replica_verifier.py`,
`replication_worker.py`): every `BLOBSTORE_AUDIT_VERIFY_INTERVAL_S` (for the whole
cluster: when the last check ran is kept in `/auditor/verification`) it verifies the
replicas of closed ledgers at `BLOBSTORE_AUDIT_VERIFY_PERCENT`, adding bad or missing
copies to the under-replicated set; and it runs the replication worker over that set
(unless `BLOBSTORE_REPLICA_REPAIR=0`), which the bookies' scrubbers and readers fill too.

Safety:
  - a bookie that registers again before the delay is forgotten;
  - one bookie is recovered per pass, and none while fewer bookies are registered than
    an ensemble holds (`live_bookies_min`, the writers' ensemble size): a segment that
    named the lost bookie then has no live bookie outside it to take its place, and a
    cluster coming back from an outage must not have its bookies marked as leaving;
  - OPEN ledgers of a live writer are not edited behind it: they are skipped, and a
    later pass moves them once their writer pool closed them (`ledger_age_s_max`);
  - a bookie that registers again while the auditor is moving its entries keeps what
    was not moved yet: the auditor's `decommissioning` marker is removed, so placement
    uses the bookie again. An operator's own decommission (its marker names no auditor)
    is left alone: neither released nor run a second time beside theirs.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError, NoNodeError

from blobstore.ledger.passwords import LedgerPasswords
from blobstore.recovery.cluster_singleton import ClusterSingleton
from blobstore.recovery.decommission import DecommissionOp
from blobstore.recovery.metrics import AUDIT_PASSES, AUDIT_RECOVERIES, BOOKIES_MISSING
from blobstore.recovery.replica_verifier import (
    ReplicaCheckSettings,
    ReplicaVerifier,
    VerificationPass,
)
from blobstore.recovery.replication_worker import RepairPass, ReplicationWorker
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout

logger = logging.getLogger(__name__)

AUDITOR_PATH = "/auditor"
AUDITOR_LOCK_PATH = "/auditor/lock"
VERIFICATION_PATH = "/auditor/verification"  # {"last_at": wall time, "by": ...}
AUDITOR_MARK = "auditor"  # the `by` of decommissioning markers the auditor wrote
LEDGER_CONCURRENCY = 4


@dataclass(frozen=True, slots=True)
class BookieCensus:
    """Where every bookie the cluster knows stands, as ZooKeeper has it."""

    known: set[str]  # with a cookie (formatted once)
    live: set[str]  # registered now
    leaving: set[str]  # being decommissioned
    gone: set[str]  # decommissioned
    missing_since: dict[str, float]  # wall time the auditor first saw each missing
    record_version: int  # of /auditor (-1: not written yet)

    @property
    def missing(self) -> set[str]:
        return self.known - self.live - self.gone

    def decommission_of(self, bookie_id: str) -> str | None:
        """How far a decommission of the bookie went: "done", "in progress", or None."""
        if bookie_id in self.gone:
            return "done"
        return "in progress" if bookie_id in self.leaving else None

    def absent_state(self, bookie_id: str) -> str:
        """What a known bookie without a registration is: "decommissioned" (safe to
        wipe), "decommissioning", or "missing" (the auditor's concern)."""
        if bookie_id in self.gone:
            return "decommissioned"
        return "decommissioning" if bookie_id in self.leaving else "missing"


async def _children(zk: ZooKeeperClient, path: str) -> set[str]:
    try:
        return set(await zk.get_children(path))
    except NoNodeError:
        return set()


async def take_census(zk: ZooKeeperClient) -> BookieCensus:
    """Read-only: the auditor's pass and `blobstore admin bookies` both start here."""
    try:
        value, stat = await zk.get_with_stat(AUDITOR_PATH)
        version = stat.version
    except NoNodeError:
        value, version = b"", -1
    try:
        since = {str(k): float(v) for k, v in json.loads(value or b"{}")["missing"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        since = {}
    return BookieCensus(
        known=await _children(zk, zk_layout.COOKIES_PATH),
        live=await _children(zk, zk_layout.AVAILABLE_PATH),
        leaving=await _children(zk, zk_layout.DECOMMISSIONING_PATH),
        gone=await _children(zk, zk_layout.DECOMMISSIONED_PATH),
        missing_since=since,
        record_version=version,
    )


@dataclass(frozen=True, slots=True)
class AuditResult:
    missing: dict[str, float]  # bookie id -> wall time first seen missing
    recovered: str | None  # the bookie whose entries this pass moved (None: none)
    safe_to_remove: bool  # that bookie is decommissioned now
    released: list[str]  # bookies back while the auditor moved them: markers removed


def missing_since(missing: set[str], previous: dict[str, float], now: float) -> dict[str, float]:
    """When each missing bookie was first seen missing: kept from `previous`, `now` for
    the newly missing; a bookie back (or decommissioned) is forgotten."""
    return {b: previous.get(b, now) for b in sorted(missing)}


def due_bookies(missing: dict[str, float], now: float, lost_bookie_delay_s: float) -> list[str]:
    """The missing bookies gone at least `lost_bookie_delay_s`."""
    return [b for b, since in missing.items() if now - since >= lost_bookie_delay_s]


class BookieAuditor(ClusterSingleton):
    """Notices bookies gone longer than `lost_bookie_delay_s` and re-replicates them."""

    name = "bookie_audit"

    def __init__(
        self,
        zk: ZooKeeperClient,
        gateway_id: str,
        interval_s: float,
        lost_bookie_delay_s: float,
        live_bookies_min: int = 3,
        recovery_rate_bytes_per_s: float = 0.0,
        replica_check: ReplicaCheckSettings | None = None,
        passwords: LedgerPasswords | None = None,
    ) -> None:
        """`passwords`: the object ledgers' (default: from the environment's cluster
        key); recovery copies entries under their master keys."""
        super().__init__(zk, gateway_id, interval_s, AUDITOR_PATH, AUDITOR_LOCK_PATH)
        self._passwords = LedgerPasswords.from_env() if passwords is None else passwords
        self._replica_check = replica_check or ReplicaCheckSettings.from_env()
        self._recovery_rate_bytes_per_s = recovery_rate_bytes_per_s
        self._gateway_id = gateway_id
        self._lost_bookie_delay_s = lost_bookie_delay_s
        self._live_bookies_min = max(2, live_bookies_min)

    async def _pass(self) -> None:
        try:
            await self.audit_once()
        finally:
            try:
                await self.check_replicas_if_due()
                if self._replica_check.repair:
                    await self.repair_underreplicated()
            except Exception as e:  # noqa: BLE001 - the next pass tries again
                logger.warning("event=replica_audit_failed error=%r", e)

    async def check_replicas_if_due(self, now: float | None = None) -> VerificationPass | None:
        """The replica check, when `verify_interval_s` passed since the cluster's last
        one (the first is one interval after the auditor first ran)."""
        interval_s = self._replica_check.verify_interval_s
        if interval_s <= 0:
            return None
        now = time.time() if now is None else now
        record = json.dumps({"last_at": now, "by": self._gateway_id}).encode()
        try:
            value, stat = await self._zk.get_with_stat(VERIFICATION_PATH)
        except NoNodeError:
            try:
                await self._zk.create(VERIFICATION_PATH, record, makepath=True)
            except NodeExistsError:
                pass
            return None
        try:
            last_at = float(json.loads(value)["last_at"])
        except (ValueError, KeyError, TypeError):
            last_at = 0.0
        if now - last_at < interval_s:
            return None
        await self._zk.set(VERIFICATION_PATH, record, stat.version)  # this pass runs it
        return await self.check_replicas()

    async def check_replicas(self) -> VerificationPass:
        return await ReplicaVerifier(
            self._zk,
            verifier_id=self._gateway_id,
            percent=self._replica_check.verify_percent,
            rate_bytes_per_s=self._recovery_rate_bytes_per_s,
        ).run_once()

    async def repair_underreplicated(self) -> RepairPass:
        return await ReplicationWorker(
            self._zk,
            worker_id=self._gateway_id,
            rate_bytes_per_s=self._recovery_rate_bytes_per_s,
            passwords=self._passwords,
        ).run_once()

    async def _claim(self) -> bool:
        if await super()._claim():
            return True
        AUDIT_PASSES.labels("busy").inc()
        return False

    def _failed(self, error: Exception) -> None:
        AUDIT_PASSES.labels("failed").inc()
        super()._failed(error)

    async def audit_once(self) -> AuditResult:
        """One pass (the caller holds the lock, or is a test)."""
        await self._zk.ensure_path(AUDITOR_PATH)
        census = await take_census(self._zk)
        released = [b for b in sorted(census.leaving & census.live) if await self._release(b)]
        now = time.time()
        missing = missing_since(census.missing, census.missing_since, now)
        if missing != census.missing_since:
            await self._record_missing(census, missing)
        BOOKIES_MISSING.set(len(missing))
        due = due_bookies(missing, now, self._lost_bookie_delay_s)
        # An operator's decommission under way is theirs to finish.
        due = [
            b for b in due if b not in census.leaving or await self._marked_by(b) == AUDITOR_MARK
        ]
        if not due:
            AUDIT_PASSES.labels("nothing_due").inc()
            return AuditResult(missing, None, False, released)
        if len(census.live) < self._live_bookies_min:
            AUDIT_PASSES.labels("too_few_bookies").inc()
            logger.warning(
                "event=bookie_recovery_deferred missing=%s registered=%d: too few bookies",
                ",".join(due),
                len(census.live),
            )
            return AuditResult(missing, None, False, released)
        bookie = min(due, key=lambda b: (missing[b], b))  # the longest gone first
        safe_to_remove = await self._recover(bookie, now - missing[bookie])
        return AuditResult(missing, bookie, safe_to_remove, released)

    async def _record_missing(self, census: BookieCensus, missing: dict[str, float]) -> None:
        """Log the bookies that went missing or came back, and keep `missing` in
        /auditor (CAS on the version the census read)."""
        previous = census.missing_since
        for bookie in sorted(missing.keys() - previous.keys()):
            logger.warning(
                "event=bookie_missing bookie=%s recovery_in_s=%.0f",
                bookie,
                self._lost_bookie_delay_s,
            )
        for bookie in sorted(previous.keys() - missing.keys()):
            logger.info("event=bookie_missing_no_more bookie=%s", bookie)
        record = {"missing": missing, "by": self._gateway_id}
        await self._zk.set(AUDITOR_PATH, json.dumps(record).encode(), census.record_version)

    async def _recover(self, bookie: str, missing_s: float) -> bool:
        """Move what a lost bookie held (a decommission started by the auditor);
        whether it is safe to remove now."""
        AUDIT_PASSES.labels("recovered").inc()
        logger.warning("event=bookie_recovery_started bookie=%s missing_s=%.0f", bookie, missing_s)
        op = DecommissionOp(
            self._zk,
            bookie,
            passwords=self._passwords,
            wait_open_s=0.0,
            fence_open=False,
            concurrency=LEDGER_CONCURRENCY,
            started_by=AUDITOR_MARK,
            rate_bytes_per_s=self._recovery_rate_bytes_per_s,
        )
        await op.run()
        moved = [o for o in op.outcomes if o.status == "moved"]
        AUDIT_RECOVERIES.labels("done" if op.safe_to_remove else "partial").inc()
        logger.warning(
            "event=bookie_recovery_pass bookie=%s ledgers_moved=%d entries_copied=%d "
            "bytes_copied=%d remaining_ledgers=%d safe_to_remove=%s",
            bookie,
            len(moved),
            sum(o.entries_copied for o in moved),
            op.bytes_copied,
            len(op.remaining),
            op.safe_to_remove,
        )
        return op.safe_to_remove

    async def _marked_by(self, bookie: str) -> str | None:
        """Who started the decommission under way of `bookie` (None: an operator, or none)."""
        try:
            value, _ = await self._zk.get_with_stat(zk_layout.decommissioning_path(bookie))
            by = json.loads(value or b"{}").get("by")
        except (NoNodeError, ValueError, AttributeError):
            return None
        return by if isinstance(by, str) else None

    async def _release(self, bookie: str) -> bool:
        """Remove the auditor's marker of a bookie that registered again."""
        if await self._marked_by(bookie) != AUDITOR_MARK:
            return False  # an operator's decommission, or none
        await self._zk.delete_recursive(zk_layout.decommissioning_path(bookie))
        logger.warning("event=bookie_recovery_stopped bookie=%s: it registered again", bookie)
        return True
