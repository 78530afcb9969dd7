"""`blobstore admin buckets` and `blobstore admin du [--bucket B]`: what the buckets hold.

Per bucket: objects (current versions that are not delete markers), stored versions,
delete markers, logical bytes (sum of the sizes of every stored version and of the parts
of uploads in progress), bytes stored (each extent's length x the write quorum of its
ledger: what the bookies keep, entry headers aside), bytes moved to the cold tier, and
the ledgers used. `buckets` lists the buckets with their settings and totals; `du` adds
the breakdown, and with `--bucket` the ledgers that bucket uses.

`du` also shows each cold tier: the versions that live there and their bytes (from the
records), and the segments on the tier and their bytes (from a listing of the tier: the
difference is dead bytes a later maintenance run removes or rewrites).
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass, field
from typing import Any

from blobstore.admin._catalog_scan import bucket_names, manifest_reader, walk_bucket
from blobstore.admin._output import (
    Output,
    add_common_arguments,
    admin_session,
    human_bytes,
    run_async,
)
from blobstore.catalog import Catalog
from blobstore.catalog.records import BucketRecord
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.ledger.ledger_manager import LedgerManager
from blobstore.ledger.ledger_metadata import LedgerMetadata, MetadataFormatError
from blobstore.objects.manifest import ManifestReader
from blobstore.runtime.sealing import ClusterKey, load_cluster_key
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.tier.fs import TierFiles, TierUnavailableError
from blobstore.tier.segment import TierLocation
from blobstore.tier.tiers import TierSpec, TierStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--bucket", help="only this bucket (du: with its ledgers)")


@dataclass(slots=True)
class BucketUsage:
    bucket: str
    objects: int = 0
    versions: int = 0
    delete_markers: int = 0
    logical_bytes: int = 0
    stored_bytes: int = 0
    tiered_bytes: int = 0
    uploads: int = 0
    upload_parts: int = 0
    upload_bytes: int = 0
    missing_ledger_bytes: int = 0  # referenced bytes whose ledger is gone (see fsck)
    unreadable_manifests: int = 0  # versions whose part list could not be read (see fsck)
    ledgers: dict[int, int] = field(default_factory=dict)  # ledger id -> bytes referenced
    tiers: dict[str, list[int]] = field(default_factory=dict)  # tier -> [versions, bytes]

    def to_json(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "objects": self.objects,
            "versions": self.versions,
            "delete_markers": self.delete_markers,
            "logical_bytes": self.logical_bytes,
            "stored_bytes": self.stored_bytes,
            "tiered_bytes": self.tiered_bytes,
            "uploads": self.uploads,
            "upload_parts": self.upload_parts,
            "upload_bytes": self.upload_bytes,
            "missing_ledger_bytes": self.missing_ledger_bytes,
            "unreadable_manifests": self.unreadable_manifests,
            "ledgers_used": len(self.ledgers),
        }


class UsageScan:
    """Walks the catalog once and sums usage per bucket."""

    def __init__(self, zk: ZooKeeperClient, output: Output) -> None:
        self._output = output
        self._manager = LedgerManager(zk)
        self._metadata: dict[int, LedgerMetadata | None] = {}
        self.catalog = Catalog(zk)

    async def _ledger(self, ledger_id: int) -> LedgerMetadata | None:
        if ledger_id not in self._metadata:
            try:
                self._metadata[ledger_id] = (await self._manager.read(ledger_id)).value
            except (NoSuchLedgerError, MetadataFormatError):
                self._metadata[ledger_id] = None
        return self._metadata[ledger_id]

    async def bucket_usage(self, manifests: ManifestReader, bucket: str) -> BucketUsage:
        usage = BucketUsage(bucket)
        uploads: set[str] = set()
        with self._output.progress(f"bucket {bucket}", None) as advance:
            async for found in walk_bucket(self.catalog, manifests, bucket):
                advance(1)
                usage.unreadable_manifests += int(bool(found.manifest_error))
                if found.holder.upload_id:
                    uploads.add(found.holder.upload_id)
                    usage.upload_parts += 1
                    usage.upload_bytes += found.size
                else:
                    assert found.record is not None
                    if found.record.is_delete_marker:
                        usage.delete_markers += 1
                        continue
                    usage.versions += 1
                    usage.objects += int(found.is_current)
                    if found.record.tier_location:
                        usage.tiered_bytes += found.size
                        tier = TierLocation.parse(found.record.tier_location).tier
                        counts = usage.tiers.setdefault(tier, [0, 0])
                        counts[0] += 1
                        counts[1] += found.size
                usage.logical_bytes += found.size
                for extent in found.extents:
                    metadata = await self._ledger(extent.ledger_id)
                    if metadata is None:
                        usage.missing_ledger_bytes += extent.length
                        continue
                    usage.stored_bytes += extent.length * metadata.write_quorum
                    usage.ledgers[extent.ledger_id] = (
                        usage.ledgers.get(extent.ledger_id, 0) + extent.length
                    )
        usage.uploads = len(uploads)
        return usage

    def ledger_rows(self, usage: BucketUsage) -> list[dict[str, Any]]:
        rows = []
        for ledger_id, referenced in sorted(usage.ledgers.items()):
            metadata = self._metadata[ledger_id]
            assert metadata is not None, ledger_id
            rows.append(
                {
                    "ledger_id": ledger_id,
                    "state": metadata.state,
                    "referenced_bytes": referenced,
                    "ledger_bytes": metadata.length,
                    "write_quorum": metadata.write_quorum,
                    "ensembles": [list(bookies) for _, bookies in metadata.ensembles],
                }
            )
        return rows


def run(args: argparse.Namespace) -> int:
    output = Output(args.json)
    command = args.admin_command

    async def main() -> tuple[list[BucketRecord], list[BucketUsage], list[dict[str, Any]]]:
        async with admin_session(args.zk) as zk:
            tiers[:] = await TierStore(zk).list()
            scan = UsageScan(zk, output)
            await scan.catalog.start()
            try:
                names = await bucket_names(scan.catalog, args.bucket)
                records = [await scan.catalog.get_bucket(name) for name in names]
                async with manifest_reader(zk) as manifests:
                    usages = [await scan.bucket_usage(manifests, name) for name in names]
                ledgers = scan.ledger_rows(usages[0]) if args.bucket and usages else []
            finally:
                await scan.catalog.close()
            return records, usages, ledgers

    tiers: list[TierSpec] = []
    records, usages, ledgers = run_async(main)
    total = usage_totals(usages)
    if command == "buckets":
        _buckets(output, records, usages, total)
    else:
        total["tiers"] = tier_usage(tiers, usages, load_cluster_key(required=False))
        _du(output, usages, total, ledgers)
    return 0


def tier_usage(
    tiers: list[TierSpec], usages: list[BucketUsage], cluster_key: ClusterKey | None
) -> list[dict[str, Any]]:
    """Per tier: the versions living there and their bytes, the segments on it and
    their bytes (None, with the error, when the tier cannot be listed)."""
    rows = []
    for spec in tiers:
        versions = sum(u.tiers.get(spec.name, [0, 0])[0] for u in usages)
        live = sum(u.tiers.get(spec.name, [0, 0])[1] for u in usages)
        row: dict[str, Any] = {
            "tier": spec.name,
            "uri": spec.uri,
            "versions": versions,
            "live_bytes": live,
            "segments": None,
            "segment_bytes": None,
            "error": "",
        }
        try:
            listed = list(TierFiles(spec, cluster_key).segments())
        except TierUnavailableError as e:
            row["error"] = str(e)
        else:
            row["segments"] = len(listed)
            row["segment_bytes"] = sum(size for _, size in listed)
        rows.append(row)
    return rows


def usage_totals(usages: list[BucketUsage]) -> dict[str, Any]:
    """The buckets' usage summed (a ledger several buckets use counted once)."""
    total_ledgers: set[int] = set()
    for usage in usages:
        total_ledgers.update(usage.ledgers)
    return {
        "buckets": len(usages),
        "objects": sum(u.objects for u in usages),
        "versions": sum(u.versions for u in usages),
        "logical_bytes": sum(u.logical_bytes for u in usages),
        "stored_bytes": sum(u.stored_bytes for u in usages),
        "tiered_bytes": sum(u.tiered_bytes for u in usages),
        "ledgers_used": len(total_ledgers),
    }


def _buckets(
    output: Output,
    records: list[BucketRecord],
    usages: list[BucketUsage],
    total: dict[str, Any],
) -> None:
    if output.json_mode:
        output.emit_json(
            {
                "buckets": [
                    {
                        "name": r.name,
                        "owner": r.owner,
                        "created": r.created,
                        "region": r.region,
                        "versioning": r.versioning or "Off",
                        **{k: v for k, v in u.to_json().items() if k != "bucket"},
                    }
                    for r, u in zip(records, usages, strict=True)
                ],
                "total": total,
            }
        )
        return
    output.table(
        "buckets",
        ["bucket", "owner", "created", "versioning", "objects", "logical", "stored", "ledgers"],
        [
            (
                r.name,
                r.owner,
                _when(r.created),
                r.versioning or "Off",
                u.objects,
                human_bytes(u.logical_bytes),
                human_bytes(u.stored_bytes),
                len(u.ledgers),
            )
            for r, u in zip(records, usages, strict=True)
        ],
        right_align=["objects", "logical", "stored", "ledgers"],
    )
    output.note(
        f"{total['buckets']} buckets, {total['objects']} objects, "
        f"{human_bytes(total['logical_bytes'])} logical, "
        f"{human_bytes(total['stored_bytes'])} stored"
    )


_DU_COLUMNS = [
    "bucket",
    "objects",
    "versions",
    "delete markers",
    "logical",
    "stored (x WQ)",
    "tiered",
    "uploads",
    "ledgers",
]


def _du(
    output: Output,
    usages: list[BucketUsage],
    total: dict[str, Any],
    ledgers: list[dict[str, Any]],
) -> None:
    if output.json_mode:
        document: dict[str, Any] = {"buckets": [u.to_json() for u in usages], "total": total}
        if ledgers:
            document["ledgers"] = ledgers
        output.emit_json(document)
        return
    output.table("disk usage", _DU_COLUMNS, du_rows(usages, total), right_align=_DU_COLUMNS[1:])
    if total.get("tiers"):
        output.table(
            "cold tiers",
            ["tier", "uri", "versions", "live", "segments", "on the tier"],
            [
                (
                    t["tier"],
                    t["uri"],
                    t["versions"],
                    human_bytes(t["live_bytes"]),
                    "?" if t["segments"] is None else t["segments"],
                    t["error"] or human_bytes(t["segment_bytes"]),
                )
                for t in total["tiers"]
            ],
            right_align=["versions", "live", "segments"],
        )
    for warning in du_warnings(usages):
        output.note(warning)
    if ledgers:
        output.table(
            f"ledgers used by {usages[0].bucket}",
            ["ledger", "state", "referenced", "ledger size", "WQ", "bookies"],
            [
                (
                    row["ledger_id"],
                    row["state"],
                    human_bytes(row["referenced_bytes"]),
                    human_bytes(row["ledger_bytes"]),
                    row["write_quorum"],
                    " | ".join(",".join(b) for b in row["ensembles"]),
                )
                for row in ledgers
            ],
            right_align=["referenced", "ledger size", "WQ"],
        )


def du_rows(usages: list[BucketUsage], total: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The disk usage table: a row per bucket, then the TOTAL row."""
    rows: list[tuple[Any, ...]] = [
        (
            u.bucket,
            u.objects,
            u.versions,
            u.delete_markers,
            human_bytes(u.logical_bytes),
            human_bytes(u.stored_bytes),
            human_bytes(u.tiered_bytes),
            f"{u.uploads} / {human_bytes(u.upload_bytes)}",
            len(u.ledgers),
        )
        for u in usages
    ]
    rows.append(
        (
            "TOTAL",
            total["objects"],
            total["versions"],
            sum(u.delete_markers for u in usages),
            human_bytes(total["logical_bytes"]),
            human_bytes(total["stored_bytes"]),
            human_bytes(total["tiered_bytes"]),
            f"{sum(u.uploads for u in usages)} / "
            f"{human_bytes(sum(u.upload_bytes for u in usages))}",
            total["ledgers_used"],
        )
    )
    return rows


def du_warnings(usages: list[BucketUsage]) -> list[str]:
    """What the totals leave out, for fsck to look at."""
    warnings = []
    missing = sum(u.missing_ledger_bytes for u in usages)
    if missing:
        warnings.append(f"warning: {human_bytes(missing)} referenced in missing ledgers: run fsck")
    unreadable = sum(u.unreadable_manifests for u in usages)
    if unreadable:
        warnings.append(
            f"warning: {unreadable} object versions whose part list could not be read are "
            "counted without their data: run fsck"
        )
    return warnings


def _when(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
