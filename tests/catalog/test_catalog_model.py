"""Stateful property test: random operations on the catalog (real ZooKeeper) and on a plain
in-memory model; every record and every listing must equal the model's.

Pages are made tiny (16 KiB split, records padded with metadata) so the runs go through
page splits and merges. Seeded by BLOBSTORE_TEST_SEED (printed on failure).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from prometheus_client import REGISTRY

from blobstore.catalog import Catalog, CatalogConfig
from blobstore.catalog.errors import (
    DeleteMarkerError,
    NoSuchKeyError,
    NoSuchVersionError,
    PreconditionFailedError,
    RecordTooLargeError,
)
from blobstore.catalog.page import encode_versions
from blobstore.catalog.records import (
    NULL_VERSION_ID,
    ObjectRecord,
    ObjectSummary,
    PartInfo,
    PartRecord,
    UploadRecord,
)
from blobstore.runtime.zk import ZooKeeperClient
from tests.catalog.helpers import object_record, seed

SMALL_PAGES = CatalogConfig(
    page_split_bytes=16 * 1024,
    page_merge_bytes=7 * 1024,
    page_merge_target_bytes=12 * 1024,
    page_fill_bytes=8 * 1024,
    record_bytes_max=8 * 1024,
    map_shard_split_bytes=512,
)
KEYS = st.text(alphabet="ab/é", min_size=1, max_size=5)
PREFIXES = st.text(alphabet="ab/", max_size=2)
MARKERS = st.text(alphabet="ab/é", max_size=4)
DELIMITERS = st.sampled_from(["", "/", "b"])
_bucket_numbers = itertools.count()


def stored(record: ObjectRecord) -> dict[str, Any]:
    """The stored form; a delete marker's timestamp is the catalog's, not the model's."""
    d = record.to_dict()
    if record.is_delete_marker:
        d.pop("mtime", None)
    return d


def summary(record: ObjectRecord) -> ObjectSummary:
    """What a listing returns of a record."""
    return ObjectSummary.of(record)


class CatalogModel:
    """The S3 semantics, written the obvious way."""

    def __init__(self) -> None:
        self.versioning = ""
        self.objects: dict[str, list[ObjectRecord]] = {}  # newest first

    def live(self) -> dict[str, ObjectRecord]:
        return {k: v[0] for k, v in self.objects.items() if v and not v[0].is_delete_marker}

    def list_objects(
        self, prefix: str, delimiter: str, start_after: str
    ) -> list[tuple[str, ObjectRecord | None]]:
        entries: list[tuple[str, ObjectRecord | None]] = []
        seen: set[str] = set()
        live = self.live()
        for key in sorted(live, key=lambda k: k.encode("utf-8")):
            if not key.startswith(prefix) or key <= start_after:
                continue
            common = _common(prefix, delimiter, key)
            if common is not None:
                if start_after.startswith(common) or common in seen:
                    continue
                seen.add(common)
                entries.append((common, None))
            else:
                entries.append((key, live[key]))
        return entries

    def list_versions(
        self, prefix: str, delimiter: str, key_marker: str, version_id_marker: str
    ) -> list[tuple[str, ObjectRecord | None]]:
        entries: list[tuple[str, ObjectRecord | None]] = []
        seen: set[str] = set()
        for key in sorted(self.objects, key=lambda k: k.encode("utf-8")):
            versions = self.objects[key]
            if not versions or not key.startswith(prefix):
                continue
            if key_marker and (key < key_marker or (key == key_marker and not version_id_marker)):
                continue
            common = _common(prefix, delimiter, key)
            if common is not None:
                if (key_marker and key_marker.startswith(common)) or common in seen:
                    continue
                seen.add(common)
                entries.append((common, None))
                continue
            if key == key_marker and version_id_marker:
                ids = [v.version_id for v in versions]
                versions = (
                    versions[ids.index(version_id_marker) + 1 :] if version_id_marker in ids else []
                )
            for n, version in enumerate(self.objects[key]):
                if version in versions:
                    entries.append((key, replace(version, is_latest=(n == 0))))
        return entries


def _line_bytes(record: ObjectRecord, versions: list[ObjectRecord]) -> int:
    new = replace(record, version_id="f" * 24).to_dict()
    return len(encode_versions([new, *(v.to_dict() for v in versions)]))


def _common(prefix: str, delimiter: str, key: str) -> str | None:
    if not delimiter:
        return None
    j = key.find(delimiter, len(prefix))
    return None if j < 0 else key[: j + len(delimiter)]


class CatalogMachine(RuleBasedStateMachine):
    """Shares one event loop and one Catalog (one ZooKeeper session) across examples;
    each example works in a bucket of its own."""

    loop: asyncio.AbstractEventLoop
    catalog: Catalog

    def __init__(self) -> None:
        super().__init__()
        self.bucket = f"model-{next(_bucket_numbers)}"
        self.model = CatalogModel()
        self.sequence = itertools.count(1)
        self.run(self.catalog.create_bucket(self.bucket, "owner"))

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, 60))

    def record(self, key: str, pad: int) -> ObjectRecord:
        n = next(self.sequence)
        return replace(
            object_record(self.bucket, key, n), metadata={"pad": "x" * pad} if pad else {}
        )

    # ------------------------------------------------------------------ writes

    @initialize()
    def start(self) -> None:
        pass

    @rule(
        key=KEYS,
        pad=st.sampled_from([0, 600, 3000, 6000]),
        condition=st.sampled_from(["", "match", "none"]),
    )
    def put(self, key: str, pad: int, condition: str) -> None:
        record = self.record(key, pad)
        versions = self.model.objects.get(key, [])
        latest = versions[0] if versions and not versions[0].is_delete_marker else None
        kwargs: dict[str, Any] = {}
        if condition == "match":
            kwargs["if_match"] = latest.etag if latest is not None and pad != 3000 else "0" * 32
        elif condition == "none":
            kwargs["if_none_match"] = "*"
        expect_fail = (condition == "match" and (latest is None or pad == 3000)) or (
            condition == "none" and latest is not None
        )
        try:
            result = self.run(self.catalog.put_object(record, **kwargs))
        except PreconditionFailedError:
            assert expect_fail and latest is not None, (key, condition)
            return
        except NoSuchKeyError:  # If-Match with no live version
            assert condition == "match" and latest is None, (key, condition)
            return
        except RecordTooLargeError:
            # All versions of one key must fit in 2 x record_bytes_max.
            assert _line_bytes(record, versions) > 2 * SMALL_PAGES.record_bytes_max - 200
            return
        assert not expect_fail, (key, condition)
        self._model_put(key, result.record, result.garbage)

    def _model_put(self, key: str, committed: ObjectRecord, garbage: list[ObjectRecord]) -> None:
        versions = self.model.objects.setdefault(key, [])
        if self.model.versioning == "Enabled":
            assert committed.version_id != NULL_VERSION_ID
            expected_garbage: list[ObjectRecord] = []
        else:
            assert committed.version_id == NULL_VERSION_ID
            expected_garbage = [
                v for v in versions if v.version_id == NULL_VERSION_ID and not v.is_delete_marker
            ]
            versions[:] = [v for v in versions if v.version_id != NULL_VERSION_ID]
        versions.insert(0, replace(committed, is_latest=False))
        assert [stored(g) for g in garbage] == [stored(g) for g in expected_garbage]

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        result = self.run(self.catalog.delete_object(self.bucket, key))
        versions = self.model.objects.setdefault(key, [])
        nulls = [v for v in versions if v.version_id == NULL_VERSION_ID and not v.is_delete_marker]
        if self.model.versioning == "Enabled":
            assert result.delete_marker and result.garbage == []
            marker = ObjectRecord(self.bucket, key, result.version_id or "", is_delete_marker=True)
            versions.insert(0, marker)
        else:
            assert [stored(g) for g in result.garbage] == [stored(g) for g in nulls]
            versions[:] = [v for v in versions if v.version_id != NULL_VERSION_ID]
            if self.model.versioning == "Suspended":
                assert result.delete_marker and result.version_id == NULL_VERSION_ID
                versions.insert(
                    0, ObjectRecord(self.bucket, key, NULL_VERSION_ID, is_delete_marker=True)
                )
            else:
                assert not result.delete_marker and result.version_id is None

    @precondition(lambda self: any(self.model.objects.values()))
    @rule(data=st.data())
    def delete_version(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, v in self.model.objects.items() if v)))
        versions = self.model.objects[key]
        victim = data.draw(st.sampled_from(versions))
        result = self.run(self.catalog.delete_object(self.bucket, key, victim.version_id))
        assert result.version_id == victim.version_id
        assert result.delete_marker == victim.is_delete_marker
        expected = [] if victim.is_delete_marker else [stored(victim)]
        assert [stored(g) for g in result.garbage] == expected
        versions.remove(victim)

    @rule(prefix=PREFIXES)
    def purge(self, prefix: str) -> None:
        """Remove every version under a prefix (as lifecycle expiration does): pages shrink
        and merge."""
        for key, versions in sorted(self.model.objects.items()):
            if not key.startswith(prefix):
                continue
            for version in list(versions):
                self.run(self.catalog.delete_object(self.bucket, key, version.version_id))
                versions.remove(version)

    @rule(state=st.sampled_from(["Enabled", "Suspended"]))
    def set_versioning(self, state: str) -> None:
        self.run(self.catalog.update_bucket(self.bucket, lambda r: replace(r, versioning=state)))
        self.model.versioning = state

    @rule(key=KEYS, part_count=st.integers(1, 3), abort=st.booleans())
    def multipart(self, key: str, part_count: int, abort: bool) -> None:
        upload = self.run(self.catalog.create_upload(UploadRecord(self.bucket, key)))
        parts = [PartRecord(n, 5, f"{next(self.sequence):032x}") for n in range(1, part_count + 1)]
        for part in parts:
            self.run(self.catalog.put_part(self.bucket, upload.upload_id, part))
        listed = self.run(self.catalog.list_uploads(self.bucket))
        assert upload.upload_id in [u.upload_id for u in listed.uploads]
        if abort:
            assert self.run(self.catalog.abort_upload(self.bucket, upload.upload_id)) == parts
            return
        record = replace(
            self.record(key, 0),
            etag=f"{next(self.sequence):032x}-{part_count}",
            parts=tuple(PartInfo(p.part_number, p.size, p.etag) for p in parts[:1]),
        )
        result = self.run(self.catalog.complete_upload(self.bucket, upload.upload_id, record))
        unused = result.garbage[len(result.garbage) - (part_count - 1) :] if part_count > 1 else []
        assert sorted(g.size for g in unused) == [5] * (part_count - 1)
        garbage = result.garbage[: len(result.garbage) - len(unused)]
        self._model_put(key, result.record, garbage)

    # ------------------------------------------------------------------ reads

    @rule(key=KEYS)
    def get(self, key: str) -> None:
        versions = self.model.objects.get(key) or []
        try:
            got = self.run(self.catalog.get_object(self.bucket, key))
        except NoSuchKeyError:
            assert not versions
            return
        except DeleteMarkerError as e:
            assert versions and versions[0].is_delete_marker
            assert e.record.version_id == versions[0].version_id
            return
        assert versions and stored(got) == stored(versions[0]) and got.is_latest

    @precondition(lambda self: any(self.model.objects.values()))
    @rule(data=st.data())
    def get_version(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, v in self.model.objects.items() if v)))
        version = data.draw(st.sampled_from(self.model.objects[key]))
        try:
            got = self.run(self.catalog.get_object(self.bucket, key, version.version_id))
        except DeleteMarkerError as e:
            assert version.is_delete_marker and e.record.version_id == version.version_id
            return
        assert stored(got) == stored(version)
        try:
            self.run(self.catalog.get_object(self.bucket, key, "0" * 24))
        except NoSuchVersionError:
            pass
        else:
            raise AssertionError("a version that never existed was found")

    @rule(prefix=PREFIXES, delimiter=DELIMITERS, start_after=MARKERS, max_keys=st.integers(1, 6))
    def list_objects(self, prefix: str, delimiter: str, start_after: str, max_keys: int) -> None:
        expected = self.model.list_objects(prefix, delimiter, start_after)
        result = self.run(
            self.catalog.list_objects(
                self.bucket,
                prefix=prefix,
                delimiter=delimiter,
                start_after=start_after,
                max_keys=max_keys,
            )
        )
        head = expected[:max_keys]
        assert result.contents == [summary(r) for _, r in head if r is not None]
        assert all(
            r.is_latest and r.key == k
            for (k, _), r in zip([e for e in head if e[1]], result.contents, strict=True)
        )
        assert result.common_prefixes == [k for k, r in head if r is None]
        assert result.is_truncated == (len(expected) > max_keys)
        if result.is_truncated:
            assert result.next_start_after == head[-1][0]
            # The continuation walks the rest, exactly.
            collected = [k for k, _ in head]
            marker = result.next_start_after
            for _ in range(1000):
                page = self.run(
                    self.catalog.list_objects(
                        self.bucket,
                        prefix=prefix,
                        delimiter=delimiter,
                        start_after=marker,
                        max_keys=max_keys,
                    )
                )
                collected += [r.key for r in page.contents] + page.common_prefixes
                if not page.is_truncated:
                    break
                marker = page.next_start_after
            assert sorted(collected, key=lambda k: k.encode()) == [k for k, _ in expected]

    @rule(prefix=PREFIXES, delimiter=DELIMITERS, max_keys=st.integers(1, 6), data=st.data())
    def list_versions(
        self, prefix: str, delimiter: str, max_keys: int, data: st.DataObject
    ) -> None:
        key_marker, version_id_marker = "", ""
        if data.draw(st.booleans()) and any(self.model.objects.values()):
            key_marker = data.draw(
                st.sampled_from(sorted(k for k, v in self.model.objects.items() if v))
            )
            if data.draw(st.booleans()):
                version_id_marker = data.draw(
                    st.sampled_from(self.model.objects[key_marker])
                ).version_id
        expected = self.model.list_versions(prefix, delimiter, key_marker, version_id_marker)
        collected: list[tuple[str, dict[str, Any] | None, bool]] = []
        for _ in range(1000):
            page = self.run(
                self.catalog.list_object_versions(
                    self.bucket,
                    prefix=prefix,
                    delimiter=delimiter,
                    key_marker=key_marker,
                    version_id_marker=version_id_marker,
                    max_keys=max_keys,
                )
            )
            assert len(page.versions) + len(page.common_prefixes) <= max_keys
            entries: list[tuple[str, dict[str, Any] | None, bool]] = [
                (v.key, stored(v), v.is_latest) for v in page.versions
            ]
            entries += [(c, None, False) for c in page.common_prefixes]
            collected += sorted(entries, key=lambda e: e[0].encode())  # stable: versions keep order
            if not page.is_truncated:
                break
            key_marker, version_id_marker = page.next_key_marker, page.next_version_id_marker
        want = [(k, stored(r) if r else None, r.is_latest if r else False) for k, r in expected]
        assert collected == want

    @invariant()
    def every_key_reads_back(self) -> None:
        if next(self.sequence) % 7:
            return
        records = self.run(_all_versions(self.catalog, self.bucket))
        model = [
            (k, stored(v))
            for k in sorted(self.model.objects, key=lambda k: k.encode())
            for v in self.model.objects[k]
        ]
        assert [(r.key, stored(r)) for r in records] == model


async def _all_versions(catalog: Catalog, bucket: str) -> list[ObjectRecord]:
    return [r async for r in catalog.iter_objects(bucket)]


class TwoSessionsMachine(CatalogMachine):
    """Every catalog call goes through the other of two catalogs (two ZooKeeper
    sessions, as two gateway workers): each commit queue's page copy goes stale as the
    other writes, so its watch, its expiry and the compare-and-set must keep every
    decision on current state."""

    catalogs: tuple[Catalog, Catalog]
    turns = itertools.count()

    @property
    def catalog(self) -> Catalog:  # type: ignore[override]
        return self.catalogs[next(self.turns) % 2]


@pytest.mark.parametrize(
    ("config", "sessions"),
    [
        (SMALL_PAGES, 1),
        # Caches of two: nearly every read evicts, so watches are removed from the server
        # and armed again all the time; a lost watch would serve a stale page.
        (replace(SMALL_PAGES, page_read_cache_pages=2, map_shard_cache_shards=2), 1),
        # Page copies kept long: only watches and compare-and-sets keep them honest.
        (replace(SMALL_PAGES, page_cache_s=60), 2),
    ],
    ids=["small-pages", "tiny-caches", "two-sessions"],
)
def test_catalog_matches_model(zk_connect: str, config: CatalogConfig, sessions: int) -> None:
    print(f"BLOBSTORE_TEST_SEED={seed()}")
    loop = asyncio.new_event_loop()

    async def open_catalog() -> tuple[ZooKeeperClient, Catalog]:
        zk = ZooKeeperClient(zk_connect)
        await zk.start()
        catalog = Catalog(zk, config)
        await catalog.start()
        return zk, catalog

    opened = [loop.run_until_complete(open_catalog()) for _ in range(sessions)]
    zk, catalog = opened[0]
    base: type[CatalogMachine] = TwoSessionsMachine if sessions == 2 else CatalogMachine

    @hypothesis_seed(seed())
    @settings(
        max_examples=30,
        stateful_step_count=50,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    class Machine(base):  # type: ignore[valid-type,misc]
        pass

    Machine.loop = loop
    if sessions == 2:
        Machine.catalogs = (opened[0][1], opened[1][1])
    else:
        Machine.catalog = catalog
    splits_before = _counter("blobstore_catalog_page_splits_total")
    merges_before = _counter("blobstore_catalog_page_merges_total")
    removed_before = _counter("blobstore_zk_watches_removed_total")
    try:
        Machine.TestCase().runTest()
        if config.page_read_cache_pages == 2:
            assert _counter("blobstore_zk_watches_removed_total") > removed_before
        splits = _counter("blobstore_catalog_page_splits_total") - splits_before
        merges = _counter("blobstore_catalog_page_merges_total") - merges_before
        # How much of the split/merge paths this seed reached (asserted by the dedicated
        # test in test_catalog_scale.py).
        print(f"page splits={splits:.0f} merges={merges:.0f}")
    finally:
        for zk, catalog in opened:
            loop.run_until_complete(catalog.close())
            loop.run_until_complete(zk.stop())
        loop.close()


def _counter(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0
