"""ObjectStore: the object layer the S3 handlers call.

It owns one ZooKeeper session, one ledger client and one catalog per process, plus the
writer pool, the read handle cache, the gateway registration and the ledger sweeper.

Write path (PutObject, UploadPart): `AppendObjectOp` streams the body into entries;
then `finish` (the handler's integrity checks: Content-MD5, x-amz-checksum-*, trailers,
payload hash) runs; only then is the catalog record committed, in one compare-and-set.
A failure anywhere before the commit commits nothing: the entries are garbage.

Copy (CopyObject, CompleteMultipartUpload, aligned UploadPartCopy) shares extents: the
new record names the same acknowledged entries, which never change. This is safe even
while the ledger is still open in some writer pool, since writers only append.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from kazoo.protocol.states import KazooState

from blobstore.catalog import Catalog
from blobstore.catalog.records import (
    CommitResult,
    ObjectRecord,
    PartRecord,
    UploadRecord,
)
from blobstore.kms.keys import KeyStore, KmsError
from blobstore.ledger import LedgerClient
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.objects.append_object_op import AppendObjectOp, WrittenData
from blobstore.objects.config import (
    ENTRY_CACHE_PAYLOAD_BYTES_MAX,
    PART_BYTES_MAX,
    ObjectStoreConfig,
)
from blobstore.objects.encryption import (
    SSE_C,
    SSE_S3_ALIAS,
    SSE_S3_KEY,
    ObjectKeys,
    SealedBody,
    SseSpec,
    decryptor,
    open_range,
    plain_pieces,
    same_sealing,
    sealed,
    stored_range,
    stored_size,
    units,
)
from blobstore.objects.errors import (
    EntityTooSmallError,
    InvalidPartListError,
    ObjectChangedError,
    RestoreNotAllowedError,
)
from blobstore.objects.extents import plan_read, slice_extents
from blobstore.objects.lock import with_default_retention
from blobstore.objects.manifest import (
    MANIFEST_BYTES_MAX,
    ManifestReader,
    encode_manifest,
    part_list_bytes,
)
from blobstore.objects.metrics import (
    ABANDONED_WRITES,
    COMPLETE_COMMITS,
    COPY_COMMITS,
    MANIFEST_OPS,
    PART_COPIES,
    PUT_COMMITS,
    READ_RETRIES,
)
from blobstore.objects.multipart import choose_parts, completed_record
from blobstore.objects.read_object_op import (
    EntryCache,
    ReadHandleCache,
    iter_spans,
    read_entries,
    span_piece,
)
from blobstore.objects.restore import restore_expiry, restored_metadata
from blobstore.objects.sse import ciphertext_size, new_salt
from blobstore.objects.writer_pool import LedgerWriterPool
from blobstore.recovery.auditor import BookieAuditor
from blobstore.recovery.sweeper import GatewayRegistration, LedgerSweeper
from blobstore.runtime.sealing import load_cluster_key
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.tier.reader import TierReader

logger = logging.getLogger(__name__)

READ_RECORD_RETRIES_MAX = 2
HASH_THREADS = 2
KMS_CACHE_S = 10.0


@dataclass(frozen=True, slots=True)
class Sealing:
    """How one unit is sealed as it is written: the object's base key, the unit's salt
    and part number (0 for a single-part object)."""

    base_key: bytes
    salt: bytes
    part_number: int = 0


@dataclass(frozen=True, slots=True)
class VerifiedBody:
    """What the caller's integrity checks say about a body it verified: the checksums to
    store and, when the caller computed it, the body's MD5 (hex)."""

    checksums: dict[str, str]
    md5_hex: str = ""


# finish(written) -> VerifiedBody; raises to refuse the commit.
WriteFinish = Callable[[WrittenData], Awaitable[VerifiedBody]]
CompleteFinish = Callable[[UploadRecord, list[PartRecord]], Awaitable[dict[str, str]]]


class ObjectStore:
    def __init__(
        self,
        zk_hosts: str,
        config: ObjectStoreConfig | None = None,
        gateway_id: str | None = None,
    ) -> None:
        self.config = config or ObjectStoreConfig()
        self.gateway_id = gateway_id or uuid.uuid4().hex
        self._zk_hosts = zk_hosts
        self.zk: ZooKeeperClient | None = None
        self._ledgers: LedgerClient | None = None
        self._catalog: Catalog | None = None
        self._pool: LedgerWriterPool | None = None
        self._read_handles: ReadHandleCache | None = None
        self._tier_reader: TierReader | None = None
        self._entry_cache = EntryCache(0, 0)
        self._manifests: ManifestReader | None = None
        self._registration: GatewayRegistration | None = None
        self._sweeper: LedgerSweeper | None = None
        self._auditor: BookieAuditor | None = None
        self._hash_executor = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="md5")
        self._kms: KeyStore | None = None
        self._keys = ObjectKeys(None)
        self._sse_s3_key_ready = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.zk = ZooKeeperClient(
            self._zk_hosts, session_timeout_s=self.config.zk_session_timeout_s
        )
        await self.zk.start()
        self._catalog = Catalog(self.zk)
        await self._catalog.start()
        self._ledgers = LedgerClient(self.zk)
        await self._ledgers.start()
        self._registration = GatewayRegistration(self.zk, self.gateway_id)
        await self._registration.start()
        self._pool = LedgerWriterPool(self._ledgers, self.config, self.gateway_id)
        self._pool.start()
        self.zk.add_state_listener(self._session_state_changed)
        self._read_handles = ReadHandleCache(self._ledgers, self.config.read_handles_max)
        cluster_key = load_cluster_key(required=False)
        self._tier_reader = TierReader(self.zk, cluster_key)
        if cluster_key is not None:
            self._kms = KeyStore(self.zk, cluster_key, cache_s=KMS_CACHE_S)
            self._keys = ObjectKeys(self._kms, self._ensure_sse_s3_key)
        self._entry_cache = EntryCache(self.config.entry_cache_bytes, ENTRY_CACHE_PAYLOAD_BYTES_MAX)
        self._manifests = ManifestReader(self._read_handles, self.config.read_window_entries)
        self._sweeper = LedgerSweeper(
            self.zk,
            self._ledgers,
            self.gateway_id,
            self.config.sweep_interval_s,
            lambda: self._pool.owned_ledger_ids if self._pool else set(),
        )
        self._sweeper.start()
        if self.config.audit_interval_s > 0:
            self._auditor = BookieAuditor(
                self.zk,
                self.gateway_id,
                self.config.audit_interval_s,
                self.config.lost_bookie_delay_s,
                live_bookies_min=self.config.ensemble_size,
                recovery_rate_bytes_per_s=self.config.recovery_rate_mb_s * 1e6,
                replica_check=self.config.replica_check,
            )
            self._auditor.start()
        logger.info("event=object_store_started gateway_id=%s", self.gateway_id)

    async def close(self) -> None:
        """Stop sweeping and auditing, close writer ledgers, unregister, end the session."""
        if self._auditor is not None:
            await self._auditor.close()
        if self._sweeper is not None:
            await self._sweeper.close()
        if self._pool is not None:
            await self._pool.close()
        if self._registration is not None:
            await self._registration.close()
        if self._read_handles is not None:
            self._read_handles.clear()
        if self._tier_reader is not None:
            self._tier_reader.close()
        self._entry_cache.clear()
        if self._ledgers is not None:
            await self._ledgers.close()
        if self._catalog is not None:
            await self._catalog.close()
        if self.zk is not None:
            self.zk.remove_state_listener(self._session_state_changed)  # ending it: no loss
            await self.zk.stop()
        self._hash_executor.shutdown(wait=False)

    def _session_state_changed(self, state: KazooState) -> None:
        if state != KazooState.LOST:
            return
        # Entries never change, but ledger ids are unique only within one cluster's
        # metadata: after a lost session this process may be talking to a rebuilt one.
        self._entry_cache.clear()
        if self._pool is not None:
            logger.warning(
                "event=zk_session_lost gateway_id=%s: retiring idle writer ledgers", self.gateway_id
            )
            self._pool.retire_idle(reason="session_lost")

    @property
    def catalog(self) -> Catalog:
        assert self._catalog is not None, "ObjectStore not started"
        return self._catalog

    @property
    def ledgers(self) -> LedgerClient:
        assert self._ledgers is not None, "ObjectStore not started"
        return self._ledgers

    @property
    def sweeper(self) -> LedgerSweeper:
        assert self._sweeper is not None, "ObjectStore not started"
        return self._sweeper

    # ------------------------------------------------------------------ writes

    async def write_data(
        self, body: AsyncIterator[bytes | memoryview], size_max: int, *, compute_md5: bool = True
    ) -> WrittenData:
        """Append a body to ledger entries; nothing references them yet."""
        assert self._pool is not None, "ObjectStore not started"
        op = AppendObjectOp(
            self._pool, self.config, self._hash_executor, size_max, compute_md5=compute_md5
        )
        return await op.run(body)

    async def _verified(
        self,
        body: AsyncIterator[bytes | memoryview],
        size_max: int,
        finish: WriteFinish | None,
        compute_md5: bool,
        sealing: Sealing | None = None,
    ) -> tuple[WrittenData, VerifiedBody, int]:
        """Write and verify a body, sealed as `sealing` says when it is given; returns
        the entries, the verdict and the plaintext's size."""
        if sealing is None:
            data = await self.write_data(body, size_max, compute_md5=compute_md5)
            plain_size, md5 = data.size, data.md5
        else:
            counter = SealedBody(hashlib.md5() if compute_md5 else None)
            stored = sealed(body, sealing.base_key, sealing.salt, sealing.part_number, counter)
            data = await self.write_data(stored, ciphertext_size(size_max), compute_md5=False)
            plain_size, md5 = counter.plain_bytes, counter.digest()
        verdict = await finish(data) if finish is not None else VerifiedBody({})
        if not verdict.md5_hex:
            assert md5, "nobody computed the body's MD5"
            verdict = VerifiedBody(verdict.checksums, md5.hex())
        return data, verdict, plain_size

    async def _ensure_sse_s3_key(self) -> None:
        """The key service key SSE-S3 wraps data keys under, made on first use."""
        if self._sse_s3_key_ready:
            return
        assert self._kms is not None
        try:
            await self._kms.get(SSE_S3_KEY)
        except KmsError:
            with contextlib.suppress(KmsError):  # another gateway made it meanwhile
                await self._kms.create(SSE_S3_ALIAS, "data keys of SSE-S3 objects")
            await self._kms.get(SSE_S3_KEY)
            logger.info("event=sse_s3_key_created alias=%s", SSE_S3_ALIAS)
        self._sse_s3_key_ready = True

    async def new_sse(self, spec: SseSpec, bucket: str, key: str) -> tuple[dict[str, Any], bytes]:
        """(the `sse` of a new object or upload, without its unit salt; its base key)."""
        return await self._keys.new(spec, bucket, key)

    async def open_sse(self, sse: dict[str, Any] | None, customer_key: bytes = b"") -> bytes:
        """The base key of bytes sealed as `sse` (b"" for bytes in clear), checking the
        customer's key (SSE-C). Readers call it before answering, so a missing or wrong
        key is refused before any byte is sent."""
        return await self._keys.open(sse, customer_key)

    async def put_object(
        self,
        template: ObjectRecord,
        body: AsyncIterator[bytes | memoryview],
        *,
        size_max: int,
        finish: WriteFinish | None = None,
        compute_md5: bool = True,
        if_match: str | None = None,
        if_none_match: str | None = None,
        owner: str | None = None,
        sse: SseSpec | None = None,
    ) -> CommitResult:
        """Store a body under template's bucket and key, with template's metadata.
        `finish` runs after every entry is acknowledged and before the commit; `owner`:
        commit only while the bucket belongs to it; `sse`: the encryption asked for.
        The new version gets its bucket's default retention unless it names its own
        (every write of a new version: PUT, POST, copy, multipart completion)."""
        sealing, sse_record = None, None
        if sse is not None and sse.mode:
            sse_record, base_key = await self.new_sse(sse, template.bucket, template.key)
            sealing = Sealing(base_key, new_salt())
            sse_record["s"] = sealing.salt.hex()
        data, verdict, plain_size = await self._verified(
            body, size_max, finish, compute_md5, sealing
        )
        record = replace(
            template,
            size=plain_size,
            etag=verdict.md5_hex,
            extents=data.extents,
            parts=(),
            manifest=(),
            checksums=verdict.checksums,
            last_modified=time.time(),
            is_delete_marker=False,
            sse=sse_record,
        )
        result = await self.catalog.put_object(
            record,
            if_match=if_match,
            if_none_match=if_none_match,
            owner=owner,
            completed=with_default_retention,
        )
        PUT_COMMITS.inc()
        self._log_garbage(result)
        return result

    async def copy_object(
        self,
        source: ObjectRecord,
        template: ObjectRecord,
        *,
        checksums: dict[str, str] | None = None,
        if_match: str | None = None,
        if_none_match: str | None = None,
        sse: SseSpec | None = None,
        source_customer_key: bytes = b"",
    ) -> CommitResult:
        """A new object sharing source's entries (no byte is copied), with source's
        checksums or the given ones (of the same bytes); retention as for put_object.
        When the copy asks (`sse`) for another encryption than the source's, or the
        source's bytes are on a cold tier only (a copy lands on the bookies, as a GET
        reads it), the bytes are read, opened (`source_customer_key`: an SSE-C source's
        key) and sealed anew instead."""
        spec = sse or SseSpec()
        if source_customer_key or (source.sse is not None and source.sse["m"] == SSE_C):
            await self.open_sse(source.sse, source_customer_key)  # refused unless right
        tiered_only = source.tier_location is not None and not source.extents and source.size
        if (
            tiered_only
            or not same_sealing(source.sse, spec)
            or (spec.mode == SSE_C and spec.customer_key != source_customer_key)
        ):
            return await self._copy_sealed_anew(
                source,
                template,
                spec,
                source_customer_key,
                checksums,
                (if_match, if_none_match),
            )
        record = replace(
            template,
            size=source.size,
            etag=source.etag,
            extents=source.extents,
            parts=source.parts,
            manifest=source.manifest,  # shared, as the entries it names
            manifest_ledgers=source.manifest_ledgers,
            checksums=dict(source.checksums if checksums is None else checksums),
            tier_location=source.tier_location,
            last_modified=time.time(),
            is_delete_marker=False,
            sse=source.sse,  # the same sealed entries, opened by the same key
        )
        result = await self.catalog.put_object(
            record,
            if_match=if_match,
            if_none_match=if_none_match,
            completed=with_default_retention,
        )
        COPY_COMMITS.inc()
        self._log_garbage(result)
        return result

    async def _copy_sealed_anew(
        self,
        source: ObjectRecord,
        template: ObjectRecord,
        spec: SseSpec,
        source_customer_key: bytes,
        checksums: dict[str, str] | None,
        conditions: tuple[str | None, str | None],
    ) -> CommitResult:
        """A copy whose bytes are read, opened and sealed as `spec` asks (one part)."""
        source = await self.resolve(source)
        source_key = await self.open_sse(source.sse, source_customer_key)
        kept = dict(source.checksums if checksums is None else checksums)
        if source.parts:  # a per-part checksum does not describe the one-part copy
            kept = {a: v for a, v in kept.items() if kept.get("type") == "FULL_OBJECT"}

        async def finish(data: WrittenData) -> VerifiedBody:
            return VerifiedBody(kept)

        if_match, if_none_match = conditions
        return await self.put_object(
            template,
            self.read(source, 0, source.size - 1, key=source_key),
            size_max=source.size + 1,
            finish=finish,
            if_match=if_match,
            if_none_match=if_none_match,
            sse=spec,
        )

    # ------------------------------------------------------------------ reads

    async def restore_object(
        self, record: ObjectRecord, days: int, now: float | None = None
    ) -> tuple[ObjectRecord, bool]:
        """A copy of a tiered version's bytes back on the bookies until `days` have
        passed (the record keeps its tier location; the maintenance job drops the copy
        once it expires, `restore.py`). Returns the record and whether a copy was
        already there (then only its expiry moves). Durable before it returns: the bytes
        are acknowledged by the bookies, and the record swapped by compare-and-set."""
        if record.tier_location is None:
            raise RestoreNotAllowedError(f"object {record.key!r} is not on a cold tier")
        expiry = restore_expiry(time.time() if now is None else now, days)
        restored = bool(record.extents)
        if restored:
            new = replace(record, system_metadata=restored_metadata(record, expiry))
        else:
            stored = stored_size(await self.resolve(record))  # sealed bytes stay sealed
            data = (
                await self.write_data(
                    self._read_stored(record, 0, stored - 1), stored + 1, compute_md5=False
                )
                if stored
                else WrittenData((), 0, b"")
            )
            new = replace(
                record, extents=data.extents, system_metadata=restored_metadata(record, expiry)
            )
        if not await self.catalog.swap_object(record, new):
            raise ObjectChangedError(f"{record.key!r} changed while being restored")
        logger.info(
            "event=object_restored bucket=%s key=%s version_id=%s bytes=%d expiry=%.0f again=%s",
            record.bucket,
            record.key,
            record.version_id,
            record.size,
            expiry,
            restored,
        )
        return new, restored

    async def resolve(self, record: ObjectRecord) -> ObjectRecord:
        """The record with its extents and parts, read from its manifest if they live
        there (blobstore.objects.manifest); the record itself otherwise."""
        assert self._manifests is not None, "ObjectStore not started"
        return await self._manifests.resolve(record)

    async def read_whole(
        self, record: ObjectRecord, start: int, end: int, *, key: bytes | None = None
    ) -> bytes | memoryview:
        """Bytes start..end (inclusive) of the object in one piece, for a body small
        enough to hold (`key`: its base key from `open_sse`, opened here when None). An
        object of one unit is read as its stored bytes in one piece and opened at once."""
        if record.sse is None or end < start:
            return await self._read_whole_stored(record, start, end)
        if key is None:
            key = await self.open_sse(record.sse)
        if record.parts or record.unresolved:
            return b"".join([piece async for piece in self.read(record, start, end, key=key)])
        (unit,) = units(record)
        stored_first, stored_last, span = stored_range(unit, start, end)
        stored = await self._read_whole_stored(record, stored_first, stored_last)
        unit_key = self._keys.unit_key(record.sse, key, unit.salt)
        return open_range(unit_key, unit, span, stored, end - start + 1)

    async def _read_whole_stored(
        self, record: ObjectRecord, start: int, end: int
    ) -> bytes | memoryview:
        """Stored bytes start..end in one piece. Bytes within one entry (every small
        object's case) are read in place: `read`'s generators cost a 4 KiB GET more than
        the read itself. Anything else, and a ledger that vanished under the reader, goes
        through `_read_stored`. A small entry read here is kept in the entry cache and
        read from there next time."""
        if end >= start and not record.unresolved and record.extents:
            spans = plan_read(record.extents, start, end)
            if len(spans) == 1 and spans[0].first_entry == spans[0].last_entry:
                span = spans[0]
                entry_id = span.first_entry
                payload = self._entry_cache.get(span.ledger_id, entry_id)
                if payload is None:
                    assert self._read_handles is not None, "ObjectStore not started"
                    try:
                        (payload,) = await read_entries(
                            self._read_handles, span.ledger_id, entry_id, entry_id
                        )
                    except NoSuchLedgerError:
                        pass  # compaction moved it: `read` looks the record up again
                    else:
                        self._entry_cache.put(span.ledger_id, entry_id, payload)
                if payload is not None:
                    return span_piece(span, entry_id, payload, span.byte_count)
        return b"".join([piece async for piece in self._read_stored(record, start, end)])

    async def read(
        self, record: ObjectRecord, start: int, end: int, *, key: bytes | None = None
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """Bytes start..end (inclusive) of the object, opened when it is encrypted
        (`key`: its base key from `open_sse`; opened here when None, which only an
        SSE-S3 or SSE-KMS object allows)."""
        if end < start:
            return
        sse = record.sse
        if sse is None:
            async for piece in self._read_stored(record, start, end):
                yield piece
            return
        if record.unresolved:
            record = await self.resolve(record)
        if key is None:
            key = await self.open_sse(sse)
        for unit, first, last in plain_pieces(record, start, end):
            unit_key = self._keys.unit_key(sse, key, unit.salt)
            stored_first, stored_last, opener = decryptor(unit_key, unit, first, last)
            async for piece in self._read_stored(record, stored_first, stored_last):
                opened = opener.feed(piece)
                if opened:  # one piece per stored piece, not per chunk
                    yield opened
            tail = opener.finish()
            if tail:
                yield tail

    async def _read_stored(
        self, record: ObjectRecord, start: int, end: int
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """Stored bytes start..end (inclusive) of the object, as they lie on the bookies
        or the tier. When a ledger vanished under the reader (compaction moved the
        object), re-read the record and go on from there."""
        assert self._read_handles is not None, "ObjectStore not started"
        if end < start:
            return
        if record.unresolved:
            record = await self.resolve(record)
        if record.tier_location is not None and not record.extents:
            assert self._tier_reader is not None
            async for tiered in self._tier_reader.read(record.tier_location, start, end):
                yield tiered
            return
        position = start
        retries = 0
        while position <= end:
            spans = plan_read(record.extents, position, end)
            try:
                async for piece in iter_spans(
                    self._read_handles, spans, self.config.read_window_entries
                ):
                    position += len(piece)
                    yield piece
                return
            except NoSuchLedgerError as e:
                retries += 1
                if retries > READ_RECORD_RETRIES_MAX:
                    raise
                READ_RETRIES.labels(reason="record").inc()
                logger.info(
                    "event=read_record_reloaded bucket=%s key=%s version_id=%s error=%r",
                    record.bucket,
                    record.key,
                    record.version_id,
                    e,
                )
                fresh = await self.catalog.get_object(record.bucket, record.key, record.version_id)
                if fresh.etag != record.etag or fresh.size != record.size:
                    raise ObjectChangedError(f"{record.key!r} changed while being read") from e
                record = await self.resolve(fresh)

    # ------------------------------------------------------------------ multipart

    async def upload_part(
        self,
        bucket: str,
        upload_id: str,
        part_number: int,
        body: AsyncIterator[bytes | memoryview],
        *,
        finish: WriteFinish | None = None,
        compute_md5: bool = True,
        customer_key: bytes = b"",
    ) -> PartRecord:
        """A part, sealed as its upload asks (`customer_key`: an SSE-C upload's key)."""
        sealing = await self._part_sealing(
            await self.catalog.get_upload(bucket, upload_id), part_number, customer_key
        )
        data, verdict, plain_size = await self._verified(
            body, PART_BYTES_MAX, finish, compute_md5, sealing
        )
        part = PartRecord(
            part_number=part_number,
            size=plain_size,
            etag=verdict.md5_hex,
            last_modified=time.time(),
            checksums=verdict.checksums,
            extents=data.extents,
            sse_salt=sealing.salt.hex() if sealing is not None else "",
        )
        self._log_replaced(await self.catalog.put_part(bucket, upload_id, part), upload_id)
        return part

    async def upload_part_copy(
        self,
        bucket: str,
        upload_id: str,
        part_number: int,
        source: ObjectRecord,
        start: int,
        end: int,
        *,
        observe: Callable[[bytes | memoryview], None] | None = None,
        finish: WriteFinish | None = None,
        customer_key: bytes = b"",
        source_customer_key: bytes = b"",
    ) -> PartRecord:
        """A part holding bytes start..end of source: shares its entries when the cuts
        fall on entry boundaries and neither side is encrypted, else copies the bytes
        (opened with the source's key, sealed with the upload's). `observe` sees every
        byte."""
        upload = await self.catalog.get_upload(bucket, upload_id)
        source = await self.resolve(source)
        source_key = await self.open_sse(source.sse, source_customer_key)
        sealing = await self._part_sealing(upload, part_number, customer_key)
        in_clear = source.sse is None and sealing is None
        shared = slice_extents(source.extents, start, end) if source.extents and in_clear else None

        async def observed() -> AsyncIterator[bytes | memoryview]:
            async for piece in self.read(source, start, end, key=source_key):
                if observe is not None:
                    observe(piece)
                yield piece

        if shared is None:
            data, verdict, size = await self._verified(
                observed(), PART_BYTES_MAX, finish, True, sealing
            )
            PART_COPIES.labels(mode="copied").inc()
        else:
            md5 = hashlib.md5()
            size = 0
            async for piece in observed():
                md5.update(piece)
                size += len(piece)
            data = WrittenData(extents=shared, size=size, md5=md5.digest())
            checked = await finish(data) if finish is not None else VerifiedBody({})
            verdict = VerifiedBody(checked.checksums, md5.hexdigest())
            PART_COPIES.labels(mode="shared").inc()
        return await self._put_part(bucket, upload_id, part_number, data, verdict, size, sealing)

    async def _put_part(
        self,
        bucket: str,
        upload_id: str,
        part_number: int,
        data: WrittenData,
        verdict: VerifiedBody,
        plain_size: int,
        sealing: Sealing | None,
    ) -> PartRecord:
        part = PartRecord(
            part_number=part_number,
            size=plain_size,
            etag=verdict.md5_hex,
            last_modified=time.time(),
            checksums=verdict.checksums,
            extents=data.extents,
            sse_salt=sealing.salt.hex() if sealing is not None else "",
        )
        self._log_replaced(await self.catalog.put_part(bucket, upload_id, part), upload_id)
        return part

    async def complete_upload(
        self,
        bucket: str,
        upload_id: str,
        requested: Sequence[tuple[int, str]],
        *,
        finish: CompleteFinish | None = None,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> CommitResult:
        """Stitch the named parts' extents into the object record: no byte is copied.
        Retention as for put_object, counted from the completion."""
        upload = await self.catalog.get_upload(bucket, upload_id)
        uploaded = {p.part_number: p for p in await self.catalog.get_parts(bucket, upload_id)}
        try:
            parts = choose_parts(requested, uploaded, self.config.part_bytes_min)
        except (InvalidPartListError, EntityTooSmallError) as e:
            e.details = {"UploadId": upload_id, **e.details}  # as S3 names them
            raise
        checksums = await finish(upload, parts) if finish is not None else {}
        record = replace(
            completed_record(upload_id, bucket, upload, parts, checksums),
            lock_mode=upload.lock_mode,  # the Object Lock asked for at its creation
            lock_until=upload.lock_until,
            legal_hold=upload.legal_hold,
            sse=upload.sse,  # each part sealed under it, with its own salt
        )
        stored = record.without_part_etags()  # as the catalog keeps it
        if part_list_bytes(stored) > min(
            self.config.manifest_bytes_min, self.catalog.config.record_bytes_max // 2
        ):
            record = await self._with_manifest(record, encode_manifest(stored))
        result = await self._commit_completion(upload_id, record, (if_match, if_none_match))
        COMPLETE_COMMITS.inc()
        self._log_garbage(result)
        return result

    async def _commit_completion(
        self,
        upload_id: str,
        record: ObjectRecord,
        conditions: tuple[str | None, str | None],
    ) -> CommitResult:
        """Commit the completed object in the catalog (`conditions`: If-Match and
        If-None-Match). A manifest written for a commit that fails is garbage, like an
        abandoned write."""
        if_match, if_none_match = conditions
        try:
            return await self.catalog.complete_upload(
                record.bucket,
                upload_id,
                record,
                if_match=if_match,
                if_none_match=if_none_match,
                completed=with_default_retention,
            )
        except BaseException as e:
            if record.manifest:
                ABANDONED_WRITES.inc()
                logger.info(
                    "event=manifest_abandoned bucket=%s key=%s ledger_id=%d error=%r",
                    record.bucket,
                    record.key,
                    record.manifest[0].ledger_id,
                    e,
                )
            raise

    async def _part_sealing(
        self, upload: UploadRecord, part_number: int, customer_key: bytes
    ) -> Sealing | None:
        """How a part of `upload` is sealed (None: in clear); refuses a missing or wrong
        customer key before any byte is read."""
        if upload.sse is None and not customer_key:
            return None
        base_key = await self.open_sse(upload.sse, customer_key)
        return Sealing(base_key, new_salt(), part_number)

    # ------------------------------------------------------------------ internals

    async def _with_manifest(self, record: ObjectRecord, encoded: bytes) -> ObjectRecord:
        """The record naming `encoded`, its manifest, written and acknowledged (the record
        keeps its part list in memory: the catalog checks the parts' ETags)."""

        async def body() -> AsyncIterator[bytes]:
            yield encoded

        data = await self.write_data(body(), MANIFEST_BYTES_MAX, compute_md5=False)
        MANIFEST_OPS.labels(op="written").inc()
        logger.info(
            "event=manifest_written bucket=%s key=%s parts=%d bytes=%d ledger_id=%d",
            record.bucket,
            record.key,
            len(record.parts),
            len(encoded),
            data.extents[0].ledger_id,
        )
        named = sorted({extent.ledger_id for extent in record.extents})
        return replace(record, manifest=data.extents, manifest_ledgers=tuple(named))

    @staticmethod
    def _log_replaced(replaced: PartRecord | None, upload_id: str) -> None:
        """A part uploaded again replaces the earlier one (the upload finished last is
        the part, as S3 keeps it); the earlier part's bytes are garbage."""
        if replaced is not None:
            logger.debug(
                "event=part_replaced upload_id=%s part_number=%d size=%d",
                upload_id,
                replaced.part_number,
                replaced.size,
            )

    @staticmethod
    def _log_garbage(result: CommitResult) -> None:
        for old in result.garbage:
            logger.debug(
                "event=object_bytes_unreferenced bucket=%s key=%s version_id=%s size=%d",
                old.bucket,
                old.key,
                old.version_id,
                old.size,
            )


async def drain(iterator: AsyncIterator[bytes | memoryview]) -> bytes:
    """All bytes of an iterator (tests and small internal reads only)."""
    return b"".join([piece async for piece in iterator])


__all__ = ["ObjectStore", "VerifiedBody", "WrittenData", "drain"]
