"""Condemned ledgers (blobstore/catalog/condemned.py): no commit adds a reference to a
ledger the maintenance job condemned, whatever a gateway read before the condemnation.

The races, played out on one ZooKeeper by two real `Catalog`s, `gateway` (an S3
gateway's) and `job` (the maintenance job's):

1. gateway reads object `src`, whose extents lie in ledger L (its copy of the condemned
   set, generation g, does not name L);
2. job condemns L: the set's generation becomes g + 1;
3. gateway commits what it prepared from step 1: a COPY (`put_object` with src's
   extents), an UploadPartCopy (`put_part`), a completion of parts in L. Its multi
   checks generation g and fails; it reads the set again and refuses the commit
   (LedgerCondemnedError): nothing is written.

A record that already names L may still be rewritten (tags) or deleted: only a new
reference is refused. The first tests cover the pure decision (`page_batch`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from blobstore.catalog import Catalog
from blobstore.catalog.condemned import CondemnedView
from blobstore.catalog.errors import LedgerCondemnedError, NoSuchKeyError
from blobstore.catalog.page import IndexPage, encode_versions
from blobstore.catalog.page_batch import BatchOnPage, Mutation, apply_batch, ledgers_of
from blobstore.catalog.records import (
    BucketRecord,
    Extent,
    ObjectRecord,
    PartInfo,
    PartRecord,
    UploadRecord,
)
from tests.catalog.helpers import TEST_TIMEOUT_S, open_catalog

BUCKET = "races"
CONDEMNED = 7001  # the ledger the job condemns
ALSO_CONDEMNED = 7002
LIVE = 7100  # a ledger nobody condemns
ENTRY_BYTES = 1 << 20


def _extent(ledger_id: int, size: int = 10) -> Extent:
    return Extent(ledger_id, 0, 0, size, ENTRY_BYTES)


def _object(key: str, ledger_id: int, n: int = 0) -> ObjectRecord:
    return ObjectRecord(
        bucket=BUCKET,
        key=key,
        size=10,
        etag=f"{n:032x}",
        last_modified=1_700_000_000.0 + n,
        extents=(_extent(ledger_id),),
    )


def _copy(source: ObjectRecord, key: str) -> ObjectRecord:
    """What a COPY commits: a new key sharing the source's entries."""
    return replace(source, key=key, is_latest=False)


def _part(part_number: int, ledger_id: int) -> PartRecord:
    return PartRecord(part_number, 10, f"{part_number:032x}", extents=(_extent(ledger_id),))


def _retries(reason: str) -> float:
    """Catalog writes retried for `reason` in this process so far."""
    value = REGISTRY.get_sample_value("blobstore_catalog_retries_total", {"reason": reason})
    return value or 0.0


def _run(zk_connect: str, body: Callable[[Catalog, Catalog], Awaitable[None]]) -> None:
    """`body(gateway, job)`: two catalogs, each on its own ZooKeeper session."""

    async def main() -> None:
        async with open_catalog(zk_connect) as gateway, open_catalog(zk_connect) as job:
            await gateway.create_bucket(BUCKET, "alice")
            await asyncio.wait_for(body(gateway, job), TEST_TIMEOUT_S)

    asyncio.run(main())


async def _absent(catalog: Catalog, key: str) -> bool:
    try:
        await catalog.get_object(BUCKET, key)
    except NoSuchKeyError:
        return True
    return False


# ------------------------------------------------------------------ the decision (pure)


@pytest.mark.parametrize(
    ("versions", "ledgers"),
    [
        ([], set()),
        ([{"v": "null"}], set()),  # a delete marker, an empty object
        ([{"v": "a", "ext": [[5, 0, 1, 10, 8], [6, 0, 0, 2, 8]]}], {5, 6}),
        ([{"v": "a", "mf": [[9, 3, 3, 100, 100]], "mfl": [5, 6]}], {5, 6, 9}),
        ([{"v": "b", "ext": [[5, 0, 0, 1, 8]]}, {"v": "a", "mf": [[9, 0, 0, 1, 8]]}], {5, 9}),
    ],
)
def test_ledgers_of_names_extents_manifests_and_the_ledgers_a_manifest_names(
    versions: list[dict[str, Any]], ledgers: set[int]
) -> None:
    assert ledgers_of(versions) == ledgers


def test_a_view_refuses_exactly_its_ledgers_sorted() -> None:
    view = CondemnedView(3, frozenset({9, 4}))
    assert view.refused([9, 1, 4]) == [4, 9]
    assert view.refused([1, 2]) == []


def _put_version(key: str, version: dict[str, Any]) -> Mutation:
    """A mutation putting `version` on top of the key's versions."""

    def apply(versions: list[dict[str, Any]], _bucket: BucketRecord) -> tuple[Any, Any]:
        return [version, *versions], key

    return Mutation(BUCKET, key, apply)


def _rewrite(key: str, **changes: Any) -> Mutation:
    """A mutation rewriting the key's newest version (tags, say) in place."""

    def apply(versions: list[dict[str, Any]], _bucket: BucketRecord) -> tuple[Any, Any]:
        return [{**versions[0], **changes}, *versions[1:]], key

    return Mutation(BUCKET, key, apply)


def _delete(key: str) -> Mutation:
    return Mutation(BUCKET, key, lambda _versions, _bucket: ([], key))


def _page_holding(key: str, version: dict[str, Any]) -> IndexPage:
    return IndexPage("p1", "", None, [key], [encode_versions([version])], version=4)


MutationFactory = Callable[[], Mutation]


def _decide(
    page: IndexPage, factories: list[MutationFactory], view: CondemnedView | None
) -> tuple[BatchOnPage, list[Mutation]]:
    """The batch of the mutations the factories make (a mutation's future needs a
    running loop), applied to `page` with `view`."""

    async def main() -> tuple[BatchOnPage, list[Mutation]]:
        mutations = [make() for make in factories]
        bucket = BucketRecord(BUCKET, "alice", 0.0)
        return apply_batch(page, mutations, bucket, 1 << 20, view), mutations

    return asyncio.run(main())


SOURCE = {"v": "null", "size": 10, "ext": [[CONDEMNED, 0, 0, 10, ENTRY_BYTES]]}
VIEW = CondemnedView(5, frozenset({CONDEMNED}))


@pytest.mark.parametrize(
    "version",
    [
        {"v": "null", "ext": [[LIVE, 0, 0, 5, 8], [CONDEMNED, 0, 0, 5, 8]]},  # COPY, part copy
        {"v": "null", "mf": [[CONDEMNED, 0, 0, 50, 50]]},  # a completion's manifest
        {"v": "null", "mf": [[LIVE, 0, 0, 50, 50]], "mfl": [CONDEMNED]},  # named in one
    ],
)
def test_a_mutation_naming_a_condemned_ledger_anew_is_refused_alone(
    version: dict[str, Any],
) -> None:
    other_version = {"v": "null", "ext": [[LIVE, 1, 1, 5, 8]]}
    batch, (copy, other) = _decide(
        _page_holding("src", SOURCE),
        [lambda: _put_version("dst", version), lambda: _put_version("other", other_version)],
        VIEW,
    )
    assert [m for m, _ in batch.refused] == [copy]
    error = batch.refused[0][1]
    assert isinstance(error, LedgerCondemnedError)
    assert error.ledger_ids == [CONDEMNED]
    assert batch.applied_mutations() == [other]
    assert batch.work.versions("dst") == []
    assert batch.references_new_ledgers, "the other names a new ledger: the write checks"


KEEPING_REFERENCES: dict[str, MutationFactory] = {
    "tagging": lambda: _rewrite("src", tags={"team": "storage"}),  # PutObjectTagging
    "delete": lambda: _delete("src"),
    "same-key-version": lambda: _put_version("src", {**SOURCE, "v": "b"}),
}


@pytest.mark.parametrize("name", sorted(KEEPING_REFERENCES))
def test_a_mutation_keeping_its_keys_references_is_applied_without_a_generation_check(
    name: str,
) -> None:
    batch, (mutation,) = _decide(_page_holding("src", SOURCE), [KEEPING_REFERENCES[name]], VIEW)
    assert batch.refused == []
    assert batch.applied_mutations() == [mutation]
    assert batch.changed
    assert not batch.references_new_ledgers


@pytest.mark.parametrize("view", [VIEW, None], ids=["a-view", "no-view"])
def test_a_new_reference_to_a_ledger_not_condemned_makes_the_write_check_the_generation(
    view: CondemnedView | None,
) -> None:
    version = {"v": "null", "ext": [[LIVE, 0, 0, 5, 8]]}
    batch, (put,) = _decide(
        _page_holding("src", SOURCE), [lambda: _put_version("dst", version)], view
    )
    assert batch.applied_mutations() == [put]
    assert batch.references_new_ledgers


def test_a_key_that_dropped_its_reference_takes_it_anew_only_through_a_refusal() -> None:
    """Within one batch each mutation sees the ones before it: once `src` is deleted, a
    put naming its ledger again is a new reference."""
    batch, (delete, again) = _decide(
        _page_holding("src", SOURCE),
        [lambda: _delete("src"), lambda: _put_version("src", SOURCE)],
        VIEW,
    )
    assert batch.applied_mutations() == [delete]
    assert [m for m, _ in batch.refused] == [again]
    assert batch.work.versions("src") == []


# ------------------------------------------------------------------ two catalogs, one ZooKeeper


def test_a_copy_of_a_record_read_before_its_ledger_was_condemned_is_refused(
    zk_connect: str,
) -> None:
    async def body(gateway: Catalog, job: Catalog) -> None:
        await gateway.put_object(_object("src", CONDEMNED))  # reads the set (generation g)
        source = await gateway.get_object(BUCKET, "src")
        before = await gateway.index.condemned.view()
        assert CONDEMNED not in before.ids
        generation = await job.index.condemned.condemn([CONDEMNED], time.time())
        assert generation > before.generation
        checks_failed = _retries("condemned")

        with pytest.raises(LedgerCondemnedError) as refused:
            await gateway.put_object(_copy(source, "dst"))

        assert refused.value.ledger_ids == [CONDEMNED]
        assert _retries("condemned") == checks_failed + 1, "decided on g, again on g + 1"
        after = await gateway.index.condemned.view()
        assert (after.generation, CONDEMNED in after.ids) == (generation, True)
        assert await _absent(gateway, "dst") and await _absent(job, "dst")
        with pytest.raises(LedgerCondemnedError):  # refused at once on the set it holds
            await gateway.put_object(_copy(source, "dst"))
        assert _retries("condemned") == checks_failed + 1
        assert await _absent(job, "dst")

    _run(zk_connect, body)


def test_a_copy_prepared_before_a_condemnation_and_its_absolution_commits(
    zk_connect: str,
) -> None:
    async def body(gateway: Catalog, job: Catalog) -> None:
        await gateway.put_object(_object("src", CONDEMNED))
        source = await gateway.get_object(BUCKET, "src")
        await job.index.condemned.condemn([CONDEMNED], time.time())
        generation = await job.index.condemned.absolve([CONDEMNED])
        checks_failed = _retries("condemned")

        await gateway.put_object(_copy(source, "dst"))

        assert _retries("condemned") == checks_failed + 1, "its check of g failed"
        assert (await gateway.index.condemned.view()).generation == generation
        copied = await job.get_object(BUCKET, "dst")
        assert copied.extents == source.extents

    _run(zk_connect, body)


def test_a_refused_copy_commits_as_soon_as_its_ledger_is_absolved(zk_connect: str) -> None:
    """The gateway's copy of the set is kept up to VIEW_TTL_S, but a refusal is checked
    against the set's current generation: the first commit after the absolution goes."""

    async def body(gateway: Catalog, job: Catalog) -> None:
        await gateway.put_object(_object("src", CONDEMNED))
        source = await gateway.get_object(BUCKET, "src")
        await job.index.condemned.condemn([CONDEMNED], time.time())
        with pytest.raises(LedgerCondemnedError):
            await gateway.put_object(_copy(source, "dst"))
        assert await _absent(job, "dst")

        await job.index.condemned.absolve([CONDEMNED])

        await gateway.put_object(_copy(source, "dst"))
        assert (await job.get_object(BUCKET, "dst")).extents == source.extents

    _run(zk_connect, body)


def test_a_refused_part_is_accepted_as_soon_as_its_ledger_is_absolved(zk_connect: str) -> None:
    async def body(gateway: Catalog, job: Catalog) -> None:
        upload = await gateway.create_upload(UploadRecord(BUCKET, "big"))
        await job.index.condemned.condemn([CONDEMNED], time.time())
        with pytest.raises(LedgerCondemnedError):
            await gateway.put_part(BUCKET, upload.upload_id, _part(1, CONDEMNED))

        await job.index.condemned.absolve([CONDEMNED])

        await gateway.put_part(BUCKET, upload.upload_id, _part(1, CONDEMNED))
        assert await job.get_parts(BUCKET, upload.upload_id) == [_part(1, CONDEMNED)]

    _run(zk_connect, body)


def test_an_upload_part_copy_naming_a_condemned_ledger_is_refused(zk_connect: str) -> None:
    async def body(gateway: Catalog, job: Catalog) -> None:
        upload = await gateway.create_upload(UploadRecord(BUCKET, "big"))
        upload_id = upload.upload_id
        assert await gateway.put_part(BUCKET, upload_id, _part(1, LIVE)) is None  # reads g
        await job.index.condemned.condemn([CONDEMNED], time.time())
        checks_failed = _retries("part")

        with pytest.raises(LedgerCondemnedError) as refused:  # a new part: create
            await gateway.put_part(BUCKET, upload_id, _part(2, CONDEMNED))

        assert refused.value.ledger_ids == [CONDEMNED]
        assert _retries("part") == checks_failed + 1, "its check of g failed"
        await job.index.condemned.condemn([ALSO_CONDEMNED], time.time())
        with pytest.raises(LedgerCondemnedError) as refused:  # a part replaced: set
            await gateway.put_part(BUCKET, upload_id, _part(1, ALSO_CONDEMNED))
        assert refused.value.ledger_ids == [ALSO_CONDEMNED]
        assert _retries("part") == checks_failed + 2, "its check of g + 1 failed"
        assert await job.get_parts(BUCKET, upload_id) == [_part(1, LIVE)]

    _run(zk_connect, body)


def test_a_completion_of_parts_in_a_condemned_ledger_is_refused_and_the_upload_stays(
    zk_connect: str,
) -> None:
    async def body(gateway: Catalog, job: Catalog) -> None:
        upload = await gateway.create_upload(UploadRecord(BUCKET, "big"))
        part = _part(1, CONDEMNED)
        await gateway.put_part(BUCKET, upload.upload_id, part)  # reads g
        record = replace(
            _object("big", CONDEMNED),
            etag=f"{1:032x}-1",
            parts=(PartInfo(1, part.size, part.etag),),
        )
        await job.index.condemned.condemn([CONDEMNED], time.time())
        checks_failed = _retries("condemned")

        with pytest.raises(LedgerCondemnedError):
            await gateway.complete_upload(BUCKET, upload.upload_id, record)

        assert _retries("condemned") == checks_failed + 1, "its check of g failed"
        assert await _absent(job, "big")
        assert await job.get_parts(BUCKET, upload.upload_id) == [part]
        await job.index.condemned.absolve([CONDEMNED])

        await gateway.complete_upload(BUCKET, upload.upload_id, record)
        assert (await job.get_object(BUCKET, "big")).extents == part.extents

    _run(zk_connect, body)


def test_a_record_already_naming_a_condemned_ledger_may_be_retagged_and_deleted(
    zk_connect: str,
) -> None:
    async def body(gateway: Catalog, job: Catalog) -> None:
        await gateway.put_object(_object("src", CONDEMNED))  # reads g
        source = await gateway.get_object(BUCKET, "src")
        await job.index.condemned.condemn([CONDEMNED], time.time())
        checks_failed = _retries("condemned")

        assert await gateway.swap_object(source, replace(source, tags={"team": "storage"}))
        assert (await job.get_object(BUCKET, "src")).tags == {"team": "storage"}
        await gateway.delete_object(BUCKET, "src")

        assert await _absent(job, "src")
        assert _retries("condemned") == checks_failed, "neither write checked the set"

    _run(zk_connect, body)
