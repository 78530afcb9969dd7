"""Ledger metadata and bookie registrations in ZooKeeper.

- Ledger ids: an ephemeral sequential znode under zk_layout.IDGEN_PATH; its sequence
  number is the id (ZooKeeper's counter on the parent never repeats), and the znode is
  deleted right away. Creating the metadata znode with `create` (never `set`) guards
  against an id used twice.
- Metadata: JSON (`LedgerMetadata`) at zk_layout.ledger_path(id), a 5-level hierarchy.
  Every update is a compare-and-set on the znode version; a lost race raises
  MetadataVersionConflictError and the caller re-reads.
- Bookies: children of zk_layout.AVAILABLE_PATH, each a JSON registration
  ({"rack": ..., "read_only": ...}); a child "readonly" (BookKeeper's layout) holds
  read-only bookies. The list is cached briefly and refreshed on a child watch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from blobstore.ledger.ensemble_placement import DEFAULT_RACK, BookieInfo
from blobstore.ledger.errors import (
    MetadataVersionConflictError,
    NoSuchLedgerError,
)
from blobstore.ledger.ledger_metadata import LedgerMetadata, MetadataFormatError, Versioned
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout

logger = logging.getLogger(__name__)

ID_CREATE_ATTEMPTS_MAX = 16
LIST_CONCURRENCY_MAX = 16
READ_ONLY_CHILD = "readonly"


class LedgerManager:
    def __init__(self, zk: ZooKeeperClient, *, bookie_list_cache_s: float = 1.0) -> None:
        self.zk = zk
        self._bookie_list_cache_s = bookie_list_cache_s
        self._bookies: list[BookieInfo] | None = None
        self._bookies_read_at = 0.0
        self._draining: frozenset[str] | None = None
        self._draining_read_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.zk.ensure_path(zk_layout.IDGEN_PATH)
        await self.zk.ensure_path(zk_layout.LEDGER_META_ROOT)
        await self.zk.ensure_path(zk_layout.AVAILABLE_PATH)
        await self.bookies(refresh=True)

    # ------------------------------------------------------------------ ids + metadata

    async def _new_ledger_id(self) -> int:
        path = await self.zk.create(
            f"{zk_layout.IDGEN_PATH}/ID-", b"", ephemeral=True, sequence=True
        )
        try:
            await self.zk.delete(path)
        except NoNodeError:
            pass
        return int(path.rsplit("-", 1)[1])

    async def create(self, build: Any) -> Versioned[LedgerMetadata]:
        """Allocate an id and create its metadata; `build(ledger_id)` makes the record."""
        for _ in range(ID_CREATE_ATTEMPTS_MAX):
            ledger_id = await self._new_ledger_id()
            metadata: LedgerMetadata = build(ledger_id)
            try:
                await self.zk.create(
                    zk_layout.ledger_path(ledger_id), metadata.encode(), makepath=True
                )
            except NodeExistsError:
                logger.warning("ledger id already used ledger_id=%d", ledger_id)
                continue
            return Versioned(metadata, 0)
        raise MetadataVersionConflictError("could not allocate an unused ledger id")

    async def read(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        try:
            versioned = await self.zk.get(zk_layout.ledger_path(ledger_id))
        except NoNodeError:
            raise NoSuchLedgerError(f"no ledger {ledger_id}", ledger_id=ledger_id) from None
        try:
            metadata = LedgerMetadata.decode(versioned.value)
        except MetadataFormatError as e:
            raise MetadataFormatError(f"ledger_id={ledger_id}: {e}") from e
        if metadata.ledger_id != ledger_id:
            raise MetadataFormatError(
                f"metadata at ledger_id={ledger_id} names ledger {metadata.ledger_id}"
            )
        return Versioned(metadata, versioned.version)

    async def write(self, metadata: LedgerMetadata, version: int) -> Versioned[LedgerMetadata]:
        """Compare-and-set; MetadataVersionConflictError when `version` is stale."""
        try:
            new_version = await self.zk.set(
                zk_layout.ledger_path(metadata.ledger_id), metadata.encode(), version
            )
        except BadVersionError:
            raise MetadataVersionConflictError(
                f"ledger_id={metadata.ledger_id} metadata changed since version {version}",
                ledger_id=metadata.ledger_id,
            ) from None
        except NoNodeError:
            raise NoSuchLedgerError(
                f"no ledger {metadata.ledger_id}", ledger_id=metadata.ledger_id
            ) from None
        return Versioned(metadata, new_version)

    async def delete(self, ledger_id: int) -> None:
        try:
            await self.zk.delete(zk_layout.ledger_path(ledger_id))
        except NoNodeError:
            raise NoSuchLedgerError(f"no ledger {ledger_id}", ledger_id=ledger_id) from None

    async def list_ledger_ids(self) -> list[int]:
        """Every ledger id, ascending (walks the 5-level hierarchy)."""
        semaphore = asyncio.Semaphore(LIST_CONCURRENCY_MAX)

        async def children(path: str) -> list[str]:
            async with semaphore:
                try:
                    return await self.zk.get_children(path)
                except NoNodeError:
                    return []

        paths = [zk_layout.LEDGER_META_ROOT]
        for _ in range(4):
            lists = await asyncio.gather(*(children(p) for p in paths))
            paths = [
                f"{p}/{c}"
                for p, names in zip(paths, lists, strict=True)
                for c in names
                if c.isdigit()
            ]
        leaves = await asyncio.gather(*(children(p) for p in paths))
        ids = []
        for parent, names in zip(paths, leaves, strict=True):
            for name in names:
                try:
                    ids.append(zk_layout.ledger_id_from_path(f"{parent}/{name}"))
                except ValueError:
                    continue
        return sorted(ids)

    # ------------------------------------------------------------------ bookies

    def _bookies_changed(self, _event: Any) -> None:  # a watch callback, on the loop
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._invalidate_bookies)

    def _invalidate_bookies(self) -> None:
        self._bookies_read_at = 0.0

    async def draining_bookies(self) -> frozenset[str]:
        """Bookies being decommissioned or already decommissioned (cached like bookies())."""
        now = time.monotonic()
        if self._draining is not None and now - self._draining_read_at < self._bookie_list_cache_s:
            return self._draining
        names: set[str] = set()
        for path in (zk_layout.DECOMMISSIONING_PATH, zk_layout.DECOMMISSIONED_PATH):
            try:
                names.update(await self.zk.get_children(path))
            except NoNodeError:
                pass
        self._draining = frozenset(names)
        self._draining_read_at = now
        return self._draining

    async def bookies(self, *, refresh: bool = False) -> list[BookieInfo]:
        """Registered bookies (read-only ones flagged), cached for a short while."""
        now = time.monotonic()
        if (
            not refresh
            and self._bookies is not None
            and now - self._bookies_read_at < self._bookie_list_cache_s
        ):
            return list(self._bookies)
        try:
            names = await self.zk.get_children(
                zk_layout.AVAILABLE_PATH, watch=self._bookies_changed
            )
        except NoNodeError:
            names = []
        infos = await asyncio.gather(
            *(self._registration(n) for n in names if n != READ_ONLY_CHILD)
        )
        found = [info for info in infos if info is not None]
        if READ_ONLY_CHILD in names:
            try:
                read_only = await self.zk.get_children(
                    f"{zk_layout.AVAILABLE_PATH}/{READ_ONLY_CHILD}"
                )
            except NoNodeError:
                read_only = []
            known = {info.bookie_id for info in found}
            found = [
                BookieInfo(i.bookie_id, i.rack, True, i.free_bytes)
                if i.bookie_id in read_only
                else i
                for i in found
            ]
            found += [BookieInfo(b, DEFAULT_RACK, True) for b in read_only if b not in known]
        self._bookies = sorted(found, key=lambda i: i.bookie_id)
        self._bookies_read_at = now
        return list(self._bookies)

    async def _registration(self, bookie_id: str) -> BookieInfo | None:
        try:
            versioned = await self.zk.get(zk_layout.available_path(bookie_id))
        except NoNodeError:
            return None  # went away between the listing and the read
        return parse_registration(bookie_id, versioned.value)


def parse_registration(bookie_id: str, data: bytes) -> BookieInfo:
    """A registration's placement facts; lenient: unknown or missing fields default."""
    try:
        raw = json.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        raw = {}
    if not isinstance(raw, dict):
        raw = {}
    read_only = bool(raw.get("read_only", raw.get("readonly", False)))
    rack = raw.get("rack") or DEFAULT_RACK
    free = raw.get("free_bytes")
    return BookieInfo(
        bookie_id=bookie_id,
        rack=str(rack),
        read_only=read_only,
        free_bytes=int(free) if isinstance(free, int | float) else None,
    )
