"""Multipart uploads: one znode per upload, one child znode per part.

    uploads/<bucket>/<upload id>              UploadRecord
    uploads/<bucket>/<upload id>/part-00001   PartRecord

Parallel part uploads write different znodes and never contend. Replacing a part is a
compare-and-set on its znode and returns the replaced part (its extents are garbage).
Abort deletes the parts and the upload in one multi with version checks, so a part written
concurrently is either returned as garbage or makes the abort retry. Completion is done by
the catalog as one multi: the object's index page, plus deletion of every part and of the
upload (version-checked), so the object appears exactly when the upload disappears.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from blobstore.catalog._private import zookeeper_errors
from blobstore.catalog.condemned import CondemnedLedgers, CondemnedView
from blobstore.catalog.config import CatalogConfig, CatalogPaths
from blobstore.catalog.errors import (
    CatalogBusyError,
    LedgerCondemnedError,
    NoSuchBucketError,
    NoSuchUploadError,
)
from blobstore.catalog.naming import common_prefix, prefix_successor, validate_key
from blobstore.catalog.records import PartListResult, PartRecord, UploadListResult, UploadRecord
from blobstore.catalog.retry import CasRetryPolicy
from blobstore.runtime.zk import ZooKeeperClient

_READ_CONCURRENCY = 64
# Upload keys remembered for listings (~150 bytes each): listings of a bucket with more
# uploads in progress than this read the records they no longer remember.
UPLOAD_KEYS_REMEMBERED_MAX = 200_000


def new_upload_id() -> str:
    """Unique; sorts by initiation time (S3 lists uploads of one key oldest first)."""
    return f"{time.time_ns():016x}{os.urandom(8).hex()}"


def _is_upload_id(upload_id: str) -> bool:
    return 1 <= len(upload_id) <= 64 and all(c in "0123456789abcdef" for c in upload_id)


VersionedPart = tuple[PartRecord, int]


@dataclass(slots=True)
class UploadPage:
    """One page of a listing of uploads: the upload ids (in key order) and the common
    prefixes it returns, and where the next page starts when it is truncated."""

    upload_ids: list[str] = field(default_factory=list)
    common_prefixes: list[str] = field(default_factory=list)
    truncated: bool = False
    next_key_marker: str = ""
    next_upload_id_marker: str = ""

    def full(self, max_uploads: int) -> bool:
        return len(self.upload_ids) + len(self.common_prefixes) >= max_uploads


def choose_uploads(
    keyed: list[tuple[str, str]],
    *,
    prefix: str,
    delimiter: str,
    key_marker: str,
    upload_id_marker: str,
    max_uploads: int,
) -> UploadPage:
    """The page a listing returns from the (key, upload id) pairs, sorted: the uploads
    under `prefix` after the markers, with those under a common prefix rolled up."""
    page = UploadPage()
    skip_below: str | None = None  # past the common prefix returned last
    last_key = last_upload = ""
    for key, upload_id in keyed:
        if not key.startswith(prefix) or _at_or_before_marker(
            key, upload_id, key_marker, upload_id_marker
        ):
            continue
        if skip_below is not None and key < skip_below:
            continue
        common = common_prefix(prefix, delimiter, key)
        if common is not None and key_marker and common <= key_marker:
            continue  # rolled up on an earlier page
        if page.full(max_uploads):
            page.truncated = True
            page.next_key_marker, page.next_upload_id_marker = last_key, last_upload
            break
        if common is not None:
            page.common_prefixes.append(common)
            last_key, last_upload = common, ""
            skip_below = prefix_successor(common) or "\U0010ffff" * 2
            continue
        page.upload_ids.append(upload_id)
        last_key, last_upload = key, upload_id
    return page


def _at_or_before_marker(key: str, upload_id: str, key_marker: str, upload_id_marker: str) -> bool:
    """Whether the upload was listed on an earlier page (S3: after key-marker, or with
    key-marker's key and after upload-id-marker)."""
    if not key_marker or key > key_marker:
        return False
    if key < key_marker:
        return True
    return not upload_id_marker or upload_id <= upload_id_marker


class MultipartUploads:
    def __init__(
        self,
        zk: ZooKeeperClient,
        config: CatalogConfig,
        paths: CatalogPaths,
        condemned: CondemnedLedgers,
    ) -> None:
        self.zk = zk
        self.config = config
        self.paths = paths
        self.condemned = condemned
        self.retry_policy = CasRetryPolicy(
            config.cas_attempts_max,
            config.cas_deadline_s,
            config.cas_backoff_initial_ms,
            config.cas_backoff_max_ms,
        )
        # (bucket, upload id) -> key, least recently listed first (bounded).
        self._upload_keys: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def create(self, record: UploadRecord) -> UploadRecord:
        validate_key(record.key)
        record = replace(
            record, upload_id=new_upload_id(), initiated=record.initiated or time.time()
        )
        with zookeeper_errors("create upload"):
            try:
                await self.zk.multi(
                    [
                        ("check", (self.paths.bucket(record.bucket), -1)),
                        (
                            "create",
                            (self.paths.upload(record.bucket, record.upload_id), record.encode()),
                        ),
                    ]
                )
            except NoNodeError:
                raise NoSuchBucketError(record.bucket) from None
        self._remember_key(record.bucket, record.upload_id, record.key)
        return record

    async def get(self, bucket: str, upload_id: str) -> tuple[UploadRecord, int]:
        if not _is_upload_id(upload_id):
            raise NoSuchUploadError(bucket, upload_id)
        with zookeeper_errors("read upload"):
            try:
                value = await self.zk.get(self.paths.upload(bucket, upload_id))
            except NoNodeError:
                if await self.zk.exists(self.paths.bucket(bucket)) is None:
                    raise NoSuchBucketError(bucket) from None
                raise NoSuchUploadError(bucket, upload_id) from None
        return UploadRecord.decode(value.value), value.version

    async def put_part(self, bucket: str, upload_id: str, part: PartRecord) -> PartRecord | None:
        """Store a part (replacing one of the same number, which is returned). The write
        checks the condemned set's generation: a part naming a condemned ledger is
        refused (`LedgerCondemnedError`)."""
        if not _is_upload_id(upload_id):
            raise NoSuchUploadError(bucket, upload_id)
        path = self.paths.part(bucket, upload_id, part.part_number)
        data = part.encode()
        ledgers = {extent.ledger_id for extent in part.extents}
        retry = self.retry_policy.start()
        with zookeeper_errors("write part"):
            while True:
                view = await self.condemned.view()
                if view.refused(ledgers) and await self.condemned.moved_on(view):
                    view = await self.condemned.view()
                refused = view.refused(ledgers)
                if refused:
                    raise LedgerCondemnedError(refused)
                try:
                    return await self._write_part(path, data, view)
                except NoNodeError:
                    raise NoSuchUploadError(bucket, upload_id) from None
                except BadVersionError as e:
                    if getattr(e, "operation_index", 1) == 0:
                        self.condemned.invalidate(view.generation)
                if not await retry.backoff("part"):
                    raise CatalogBusyError(f"upload {upload_id!r}: part kept changing") from None

    async def _write_part(self, path: str, data: bytes, view: CondemnedView) -> PartRecord | None:
        """Create the part, or replace the one there: the replaced part, None if none."""
        check = self.condemned.check_operation(view)
        try:
            await self.zk.multi([check, ("create", (path, data))])
            return None
        except NodeExistsError:
            pass
        except NoNodeError as e:
            if getattr(e, "operation_index", 1) == 0:  # the condemned set's node
                retry_check = BadVersionError()
                retry_check.operation_index = 0
                raise retry_check from e
            raise
        old = await self.zk.get(path)
        await self.zk.multi([check, ("set", (path, data, old.version))])
        return PartRecord.decode(old.value)

    async def parts(self, bucket: str, upload_id: str) -> dict[int, VersionedPart]:
        """Every part with its znode version (NoSuchUploadError when the upload is gone)."""
        if not _is_upload_id(upload_id):
            raise NoSuchUploadError(bucket, upload_id)
        path = self.paths.upload(bucket, upload_id)
        with zookeeper_errors("list parts"):
            try:
                children = await self.zk.get_children(path)
            except NoNodeError:
                raise NoSuchUploadError(bucket, upload_id) from None
            names = [c for c in children if c.startswith("part-")]
            values = await _gather_bounded([self._get_versioned(f"{path}/{n}") for n in names])
        result: dict[int, VersionedPart] = {}
        for value in values:
            if value is not None:
                part = PartRecord.decode(value[0])
                result[part.part_number] = (part, value[1])
        return result

    async def _get_versioned(self, path: str) -> tuple[bytes, int] | None:
        try:
            value = await self.zk.get(path)
        except NoNodeError:
            return None
        return value.value, value.version

    async def list_parts(
        self, bucket: str, upload_id: str, part_number_marker: int, max_parts: int
    ) -> PartListResult:
        parts = await self.parts(bucket, upload_id)
        numbers = sorted(n for n in parts if n > part_number_marker)
        chosen = numbers[: max(max_parts, 0)]
        truncated = len(numbers) > len(chosen)
        return PartListResult(
            [parts[n][0] for n in chosen], truncated, chosen[-1] if truncated and chosen else 0
        )

    async def upload_ids(self, bucket: str) -> list[str]:
        """The ids of the bucket's uploads in progress, sorted (the child list only)."""
        with zookeeper_errors("list uploads"):
            try:
                children = await self.zk.get_children(self.paths.bucket_uploads(bucket))
            except NoNodeError:
                raise NoSuchBucketError(bucket) from None
        return sorted(c for c in children if _is_upload_id(c))

    async def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str,
        delimiter: str,
        key_marker: str,
        upload_id_marker: str,
        max_uploads: int,
    ) -> UploadListResult:
        path = self.paths.bucket_uploads(bucket)
        keys, records = await self._upload_keys_of(bucket, path)
        # From this listing's own map: remembering may forget keys of the same listing.
        keyed = sorted((key, upload_id) for upload_id, key in keys.items() if key is not None)
        page = choose_uploads(
            keyed,
            prefix=prefix,
            delimiter=delimiter,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            max_uploads=max_uploads,
        )
        with zookeeper_errors("list uploads"):
            missing = [u for u in page.upload_ids if u not in records]
            for record in await _gather_bounded([self._read(path, u) for u in missing]):
                if record is not None:
                    records[record.upload_id] = record
        # An upload completed or aborted since the child list was read is left out.
        result = [records[u] for u in page.upload_ids if u in records]
        return UploadListResult(
            result,
            page.common_prefixes,
            page.truncated,
            page.next_key_marker,
            page.next_upload_id_marker,
        )

    async def _upload_keys_of(
        self, bucket: str, path: str
    ) -> tuple[dict[str, str | None], dict[str, UploadRecord]]:
        """The key of every upload of the bucket (None: the upload is gone), and the
        records read to learn them, by upload id.

        Listing sorts by key, which only the records hold. A record never changes once
        created, so the key of every upload read before is remembered: a listing reads
        the uploads it has not seen, then the page it returns."""
        with zookeeper_errors("list uploads"):
            await self.zk.fresh_view()
            try:
                children = await self.zk.get_children(path)
            except NoNodeError:
                raise NoSuchBucketError(bucket) from None
            keys = {c: self._upload_keys.get((bucket, c)) for c in children}
            unseen = [c for c, key in keys.items() if key is None]
            records = {
                record.upload_id: record
                for record in await _gather_bounded([self._read(path, c) for c in unseen])
                if record is not None
            }
        for record in records.values():
            keys[record.upload_id] = record.key
            self._remember_key(bucket, record.upload_id, record.key)
        return keys, records

    async def _read(self, path: str, upload_id: str) -> UploadRecord | None:
        value = await self._get_versioned(f"{path}/{upload_id}")
        return None if value is None else UploadRecord.decode(value[0])

    def _remember_key(self, bucket: str, upload_id: str, key: str) -> None:
        keys = self._upload_keys
        keys[(bucket, upload_id)] = key
        keys.move_to_end((bucket, upload_id))
        while len(keys) > UPLOAD_KEYS_REMEMBERED_MAX:
            keys.popitem(last=False)

    def cleanup_operations(
        self, bucket: str, upload_id: str, upload_version: int, parts: dict[int, VersionedPart]
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """Multi operations deleting every part and the upload, all version-checked."""
        operations: list[tuple[str, tuple[Any, ...]]] = [
            ("delete", (self.paths.part(bucket, upload_id, n), version))
            for n, (_, version) in sorted(parts.items())
        ]
        operations.append(("delete", (self.paths.upload(bucket, upload_id), upload_version)))
        return operations

    async def abort(self, bucket: str, upload_id: str) -> list[PartRecord]:
        retry = self.retry_policy.start()
        while True:
            _, version = await self.get(bucket, upload_id)
            parts = await self.parts(bucket, upload_id)
            with zookeeper_errors("abort upload"):
                try:
                    await self.zk.multi(self.cleanup_operations(bucket, upload_id, version, parts))
                except (BadVersionError, NoNodeError, NotEmptyError):
                    if not await retry.backoff("abort"):
                        raise CatalogBusyError(f"upload {upload_id!r} kept changing") from None
                    continue
            return [p for _, (p, _) in sorted(parts.items())]


async def _gather_bounded(coroutines: list[Any]) -> list[Any]:
    semaphore = asyncio.Semaphore(_READ_CONCURRENCY)

    async def one(coroutine: Any) -> Any:
        async with semaphore:
            return await coroutine

    return list(await asyncio.gather(*(one(c) for c in coroutines)))
