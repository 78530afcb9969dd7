"""Pure pieces of the catalog: naming rules, record and page codecs, versioning rules,
configuration, retry policy."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from blobstore.catalog.catalog import Catalog
from blobstore.catalog.config import CatalogConfig
from blobstore.catalog.errors import (
    InvalidBucketNameError,
    InvalidObjectKeyError,
    NoSuchKeyError,
    PreconditionFailedError,
)
from blobstore.catalog.naming import (
    prefix_successor,
    shortest_separator,
    validate_bucket_name,
    validate_key,
)
from blobstore.catalog.page import IndexPage, PageMap, RootMap, encode_versions
from blobstore.catalog.page_batch import Mutation
from blobstore.catalog.records import (
    BucketRecord,
    DeleteResult,
    Extent,
    ObjectRecord,
    PartInfo,
    PartRecord,
    UploadRecord,
)
from blobstore.catalog.retry import CasRetryPolicy
from blobstore.catalog.versioning import apply_delete, apply_put, new_version_id
from tests.catalog.helpers import object_record


@pytest.mark.parametrize(
    "name",
    ["abc", "my-bucket", "my.bucket.name", "a" * 63, "123", "b1-2.c3", "xn-abc", "s3alias-x"],
)
def test_valid_bucket_names(name: str) -> None:
    validate_bucket_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "ab",
        "a" * 64,
        "MyBucket",
        "my_bucket",
        "my bucket",
        "-bucket",
        "bucket-",
        ".bucket",
        "bucket.",
        "my..bucket",
        "my.-bucket",
        "my-.bucket",
        "192.168.5.4",
        "xn--bucket",
        "sthree-bucket",
        "amzn-s3-demo-bucket",
        "bucket-s3alias",
        "bucket--ol-s3",
        "bucket--x-s3",
        "bucket--table-s3",
        "bucket.mrap",
        "bucket/x",
        "bücket",
    ],
)
def test_invalid_bucket_names(name: str) -> None:
    with pytest.raises(InvalidBucketNameError):
        validate_bucket_name(name)


@pytest.mark.parametrize("key", ["", "a" * 1025, "\udcff", "é" * 513])
def test_invalid_keys(key: str) -> None:
    with pytest.raises(InvalidObjectKeyError):
        validate_key(key)


@pytest.mark.parametrize("key", ["a", "a" * 1024, "é" * 512, "dir/sub/../x", " \t\n"])
def test_valid_keys(key: str) -> None:
    validate_key(key)


def test_code_point_order_is_utf8_byte_order() -> None:
    keys = ["a", "z", "\x7f", "\x80", "é", "\uffff", "\U00010000", "\ue000", "\ud7ff", "a/b", "a0"]
    assert sorted(keys) == sorted(keys, key=lambda k: k.encode("utf-8"))


@pytest.mark.parametrize(
    ("prefix", "successor"),
    [("a/", "a0"), ("abc", "abd"), ("", None), ("a\U0010ffff", "b"), ("\ud7ff", "\ue000")],
)
def test_prefix_successor(prefix: str, successor: str | None) -> None:
    assert prefix_successor(prefix) == successor


@pytest.mark.parametrize(
    ("left", "right", "separator"),
    [("apple", "banana", "b"), ("dir1/a", "dir1/b", "dir1/b"), ("a", "ab", "ab"), ("ab", "b", "b")],
)
def test_shortest_separator(left: str, right: str, separator: str) -> None:
    got = shortest_separator(left, right)
    assert got == separator
    assert left < got <= right


def test_record_codecs_round_trip() -> None:
    record = ObjectRecord(
        "b",
        "k/é",
        "v1",
        size=11,
        etag="abc-2",
        last_modified=1.5,
        content_type="text/plain",
        metadata={"m": "1"},
        system_metadata={"Cache-Control": "no-cache"},
        checksums={"CRC32": "AAAA", "type": "COMPOSITE"},
        storage_class="GLACIER",
        extents=(Extent(1, 0, 3, 11, 4),),
        parts=(PartInfo(1, 5, "e1", {"CRC32": "x"}), PartInfo(2, 6, "e2")),
        owner="o",
        tags={"t": "v"},
        tier_location="file:///x",
        upload_id="u1",
    )
    assert ObjectRecord.decode(record.encode()) == record
    bucket = BucketRecord("b", "o", 1.0, versioning="Enabled", cors=[{"a": 1}], lifecycle=[])
    assert BucketRecord.decode(bucket.encode()) == bucket
    upload = UploadRecord("b", "k", "id", 2.0, tags={"a": "b"})
    assert UploadRecord.decode(upload.encode()) == upload
    part = PartRecord(3, 10, "e", 3.0, {"CRC32C": "y"}, (Extent(2, 1, 1, 10, 10),))
    assert PartRecord.decode(part.encode()) == part
    with pytest.raises(ValueError):
        ObjectRecord.decode(b'{"format_version": 99, "v": "null", "bucket": "b", "key": "k"}')


def test_page_znode_compressed_or_plain() -> None:
    """Pages are stored as zlib streams (deflated by ISA-L, at each of its levels) that
    zlib itself inflates; zlib's own streams (pages written before ISA-L) and plain pages
    (before compression, or page_compression_level 0) still decode; a damaged or
    oversized stream is refused."""
    import zlib

    from blobstore.catalog.config import PAGE_BYTES_HARD_MAX
    from blobstore.catalog.page import pack_page, unpack_page

    page = IndexPage("p1", "", None, [], [], version=4)
    for n in range(150):
        page.set_versions(f"logs/2026/{n:06d}", [object_record("b", f"k{n}", n).to_dict()])
    plain = page.encode()
    packed = pack_page(plain, 1)
    assert packed[:1] != b"{" and len(packed) * 4 < len(plain)
    assert pack_page(plain, 0) == plain
    for level in (1, 2, 3):
        assert zlib.decompress(pack_page(plain, level)) == plain
    for stored in (packed, plain, pack_page(plain, 3), zlib.compress(plain, 1)):
        decoded = IndexPage.decode("p1", stored, 4)
        assert decoded.keys == page.keys and decoded.lines == page.lines
    with pytest.raises(ValueError, match="not a page"):
        unpack_page("p1", b"\x78\x01garbage")
    with pytest.raises(ValueError, match="truncated"):
        unpack_page("p1", packed[:-3])
    with pytest.raises(ValueError, match="junk"):
        unpack_page("p1", packed + b"x")
    bomb = zlib.compress(b"{" + b" " * (PAGE_BYTES_HARD_MAX + 10))
    with pytest.raises(ValueError, match="inflates past"):
        unpack_page("p1", bomb)


def test_page_codec_split_and_merge() -> None:
    keys = [f"key-{i:04d}" for i in range(200)]
    page = IndexPage("p1", "", None, [], [], version=7)
    for n, key in enumerate(keys):
        page.set_versions(key, [object_record("b", key, n).to_dict()])
    decoded = IndexPage.decode("p1", page.encode(), 7)
    assert decoded.keys == keys and decoded.lines == page.lines
    pieces = page.split(len(page.encode()) // 4)
    assert len(pieces) >= 3
    assert pieces[0].page_id == "p1" and pieces[0].version == 7
    assert pieces[0].lo == "" and pieces[-1].hi is None
    assert [k for p in pieces for k in p.keys] == keys
    for left, right in zip(pieces, pieces[1:], strict=False):
        assert left.hi == right.lo and left.keys[-1] < left.hi <= right.keys[0]
        left.check()
    page_map = PageMap(("",), ("p1",), 3).replace(0, pieces)
    for key in keys:
        owner = next(p for p in pieces if key in p.keys)
        assert page_map.page_for(key) == owner.page_id
    merged = pieces[0].merged_with(pieces[1])
    assert merged.page_id == "p1" and merged.hi == pieces[1].hi
    assert PageMap.decode(page_map.encode(), 4).page_ids == page_map.page_ids
    shards = page_map.split(2)
    assert [s.page_ids for s in shards] == [
        page_map.page_ids[: len(pieces) // 2],
        page_map.page_ids[len(pieces) // 2 :],
    ]
    assert shards[0].lo == "" and shards[0].hi == shards[1].lo and shards[1].hi is None
    assert shards[0].version == 3 and shards[1].version == -1
    root = RootMap(("",), ("s0",)).replace(0, shards)
    for key in keys:
        shard = next(s for s in shards if s.contains(key))
        assert root.shard_for(key) == shard.shard_id
        assert shard.page_for(key) == page_map.page_for(key)
    assert RootMap.decode(root.encode(), 1).shard_ids == root.shard_ids
    assert RootMap.is_single_level(page_map.encode()) and not RootMap.is_single_level(root.encode())
    merged.set_versions(pieces[0].keys[0], [])
    assert pieces[0].keys[0] not in merged.keys
    assert encode_versions([]) == b"[]"


def test_append_split_fills_the_left_page_for_keys_added_at_the_end() -> None:
    def page_with(keys: list[str], hi: str | None = None) -> IndexPage:
        page = IndexPage("p1", "", hi, [], [], version=3)
        for n, key in enumerate(keys):
            page.set_versions(key, [object_record("b", key, n).to_dict()])
        return page

    keys = [f"log-{i:06d}" for i in range(300)]
    before = page_with(keys[:280])
    after = before.copy()
    for n, key in enumerate(keys[280:]):
        after.set_versions(key, [object_record("b", key, n).to_dict()])
    # A new version of an old key may come in the same batch.
    after.set_versions(keys[0], [object_record("b", keys[0], 9).to_dict()])
    fill = after.encoded_size() * 3 // 4
    pieces = after.append_split(before, fill)
    assert pieces is not None and len(pieces) == 2
    left, right = pieces
    # The right page, which takes the next commits, keeps the id (and version for the CAS).
    assert right.page_id == "p1" and right.version == 3 and left.page_id != "p1"
    assert left.version == -1
    assert left.keys + right.keys == keys
    assert fill * 0.9 <= left.encoded_size() <= fill * 1.01  # about fill_bytes
    assert left.hi == right.lo and right.hi is None
    left.check()
    right.check()
    # A page inside the bucket (sequential names under a prefix that sorts before
    # others) splits the same way; its right piece keeps the upper bound.
    inner = page_with(keys, hi="z").append_split(page_with(keys[:280], hi="z"), fill)
    assert inner is not None and len(inner) == 2 and inner[0].keys + inner[1].keys == keys
    assert inner[1].page_id == "p1" and inner[1].hi == "z" and inner[0].hi == inner[1].lo
    # Names arriving slightly out of order (two writers): new keys among the last few
    # old ones still split this way, the new ones all in the right piece.
    near_end = page_with(keys[:270] + keys[275:280])
    mixed = near_end.append_split(page_with(keys[:270] + keys[277:280]), fill)
    assert mixed is not None and mixed[1].page_id == "p1"
    assert {"log-000275", "log-000276"} <= set(mixed[1].keys)
    # Nothing appended, a key inserted before the end, or a tail too big for one page:
    # halves as usual.
    assert after.append_split(after, fill) is None
    inserted = before.copy()
    inserted.set_versions("log-000000a", [object_record("b", "log-000000a").to_dict()])
    inserted.set_versions(keys[290], [object_record("b", keys[290]).to_dict()])
    assert inserted.append_split(before, fill) is None
    assert after.append_split(page_with(keys[:10]), fill // 3) is None


def test_version_ids_unique_and_newest_first() -> None:
    ids = [new_version_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids, reverse=True)
    # A clock behind the newest version still yields an id that sorts first.
    newest = new_version_id()
    late = new_version_id(now_s=1.0)
    record = replace(object_record("b", "k"), version_id=late)
    outcome = apply_put(
        [replace(record, version_id=newest).to_dict()],
        record,
        "Enabled",
        if_match=None,
        if_none_match=None,
    )
    assert outcome.versions[0]["v"] < newest
    # Re-applying finds its own result: no second version.
    again = apply_put(outcome.versions, record, "Enabled", if_match=None, if_none_match="*")
    assert not again.changed and len(again.versions) == 2


def test_conditional_put_rules() -> None:
    existing = [object_record("b", "k", 1).to_dict()]
    new = object_record("b", "k", 2)
    with pytest.raises(PreconditionFailedError):
        apply_put(existing, new, "", if_match=None, if_none_match="*")
    with pytest.raises(NoSuchKeyError):
        apply_put([], new, "", if_match='"x"', if_none_match=None)
    etag = existing[0]["etag"]
    ok = apply_put(existing, new, "", if_match=f'"{etag}"', if_none_match=None)
    assert ok.changed and len(ok.garbage) == 1
    # If-None-Match with an ETag: refused only when the current version has that ETag.
    with pytest.raises(PreconditionFailedError):
        apply_put(existing, new, "", if_match=None, if_none_match=f'"{etag}"')
    other = apply_put(existing, new, "", if_match=None, if_none_match='"0123"')
    assert other.changed
    assert apply_put([], new, "", if_match=None, if_none_match=f'"{etag}"').changed


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("root", "catalog"),
        ("root", "/catalog/"),
        ("page_split_bytes", 1024),
        ("page_split_bytes", 1 << 20),
        ("page_merge_bytes", 200 * 1024),
        ("record_bytes_max", 200 * 1024),
        ("map_shard_split_bytes", 100),
        ("commit_queue_max", 0),
        ("cas_deadline_s", 0),
        ("commit_group_wait_ms", 500),
        ("commit_gather_ms", -1),
        ("commit_watch_s", -1),
        ("page_compression_level", 4),
        ("page_compression_level", -1),
    ],
)
def test_invalid_config(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        CatalogConfig(**{field: value})  # type: ignore[arg-type]


def test_config_from_env() -> None:
    config = CatalogConfig.from_env(
        {"BLOBSTORE_CATALOG_PAGE_SPLIT_BYTES": "262144", "BLOBSTORE_CATALOG_ROOT": "/c"}
    )
    assert config.page_split_bytes == 262144 and config.root == "/c"
    with pytest.raises(ValueError, match="BLOBSTORE_CATALOG_CAS_ATTEMPTS_MAX"):
        CatalogConfig.from_env({"BLOBSTORE_CATALOG_CAS_ATTEMPTS_MAX": "many"})


def test_retry_policy_caps_attempts_and_deadline() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    async def attempts(policy: CasRetryPolicy) -> int:
        retry = policy.start(clock=lambda: now[0], sleep=sleep)
        count = 1
        while await retry.backoff("test"):
            count += 1
        return count

    assert asyncio.run(attempts(CasRetryPolicy(5, 100.0, 1.0, 10.0))) == 5
    assert all(0 <= s <= 0.01 for s in slept)
    now[0] = 0.0
    assert asyncio.run(attempts(CasRetryPolicy(10_000, 0.05, 10.0, 10.0))) < 10_000


def test_a_retried_batch_takes_in_what_arrived_meanwhile() -> None:
    from types import SimpleNamespace

    from blobstore.catalog.page_batch import Mutation
    from blobstore.catalog.page_commit_queue import PageCommitQueue

    async def scenario() -> None:
        index = SimpleNamespace(config=CatalogConfig(commit_batch_max=4))
        queue = PageCommitQueue(index, "b", "p")

        def mutation(key: str, extra: bool = False) -> Mutation:
            operations = (("check", ("/x", 1)),) if extra else ()
            return Mutation("b", key, lambda v, _b: (v, None), operations)

        batch = [mutation("a"), mutation("b")]
        pending = list(batch)
        queue._waiting.extend([mutation("c"), mutation("d"), mutation("e")])
        taken = queue._top_up(batch, pending)
        # Arrival order, up to commit_batch_max; the batch knows them (to fail them).
        assert [m.key for m in taken] == ["c", "d"]
        assert [m.key for m in batch] == ["a", "b", "c", "d"]
        assert [m.key for m in queue._waiting] == ["e"]
        # A mutation with extra operations goes alone: not added, nor added to.
        queue._waiting.appendleft(mutation("x", extra=True))
        assert queue._top_up([mutation("f")], [mutation("f")]) == []
        solo = [mutation("y", extra=True)]
        assert queue._top_up(list(solo), solo) == []
        assert [m.key for m in queue._waiting] == ["x", "e"]

    asyncio.run(scenario())


def test_insertion_split_cuts_right_after_names_inserted_in_order() -> None:
    def page_of(keys: list[str]) -> IndexPage:
        page = IndexPage("p1", "", None, [], [], version=3)
        for n, key in enumerate(keys):
            page.set_versions(key, [object_record("b", key, n).to_dict()])
        return page

    cold_left = [f"a-{i:04d}" for i in range(100)]
    cold_right = [f"w-{i:04d}" for i in range(100)]
    run = [f"logs-{i:06d}" for i in range(30)]
    before = page_of(cold_left + cold_right)
    after = page_of(cold_left + run + cold_right)
    sizes = after._entry_sizes()
    left_and_run = sum(sizes[: len(cold_left) + len(run)])
    # Room for the keys before the point and the run: two pieces, the hot one keeps the id.
    hot, behind = after.insertion_split(before, left_and_run) or []
    assert hot.keys == cold_left + run and behind.keys == cold_right
    assert (hot.page_id, hot.version) == ("p1", 3) and behind.page_id != "p1"
    assert hot.hi == behind.lo and hot.lo == "" and behind.hi is None
    # Not: the run alone gets a page of its own between the two cold ones.
    pieces = after.insertion_split(before, left_and_run - 1)
    assert pieces is not None and [p.keys for p in pieces] == [cold_left, run, cold_right]
    assert [p.page_id == "p1" for p in pieces] == [False, True, False]
    for piece in pieces:
        piece.check()
    # One key shows no order; keys at two points, or after the last key, are other cases.
    assert page_of(cold_left + run[:1] + cold_right).insertion_split(before, 10**6) is None
    two_points = page_of([*cold_left, "a-0049-x", run[0], *cold_right])
    assert two_points.insertion_split(before, 10**6) is None
    assert page_of(cold_left + cold_right + ["x-1", "x-2"]).insertion_split(before, 10**6) is None


def test_a_page_change_drops_what_readers_decoded_from_it() -> None:
    page = IndexPage("p1", "", None, [], [], version=1)
    page.set_line("a", encode_versions([{"v": "null"}]))
    page.memo["a"] = "decoded"
    page.set_line("b", encode_versions([{"v": "null"}]))
    assert page.memo == {}
    assert page.copy().memo == {}


def test_a_conditional_delete_retried_finds_its_own_effect() -> None:
    """A commit's write can fail with an unknown outcome; the queue then applies the same
    mutation again to the page as it finds it, which may hold the first attempt's effect.
    A conditional delete must then answer its own success, not fail its condition on a
    state it made itself (a client told 412/NoSuchKey may delete again)."""
    etag = object_record("b", "k", 1).etag
    current = object_record("b", "k", 1)
    older = replace(object_record("b", "k", 2), version_id=new_version_id(now_s=1.0))
    newest = replace(current, version_id=new_version_id())
    marker_id = new_version_id()
    # Delete markers find their own marker first (Enabled) or on top (Suspended).
    for state, versions in (
        ("Enabled", [newest.to_dict(), older.to_dict()]),
        ("Suspended", [current.to_dict()]),
    ):
        first = apply_delete(versions, "b", "k", None, state, marker_id, 5.0, "o", f'"{etag}"')
        again = apply_delete(
            first.versions, "b", "k", None, state, marker_id, 5.0, "o", f'"{etag}"'
        )
        assert first.changed and not again.changed, state
        assert again.record is not None and first.record is not None
        assert again.record.version_id == first.record.version_id, state

    # A version by id or an unversioned key leaves no trace: the catalog's mutation
    # remembers that an attempt passed its condition, and a retry after an unknown
    # outcome that finds the target gone answers that attempt's result.
    class OneRetryIndex:
        def __init__(self, versions: list[dict[str, object]], bucket_versioning: str) -> None:
            self.versions = versions
            self.bucket = BucketRecord("b", "o", 0.0, versioning=bucket_versioning)

        async def submit(self, mutation: Mutation) -> object:
            written, _ = mutation.apply(self.versions, self.bucket)
            self.versions = written if written is not None else self.versions
            mutation.outcome_unknown = True  # the write happened, its answer was lost
            written, result = mutation.apply(self.versions, self.bucket)
            assert written is None
            return result

    async def delete(index: OneRetryIndex, version_id: str | None) -> object:
        catalog = Catalog.__new__(Catalog)
        catalog.index = index  # type: ignore[assignment]
        return await catalog.delete_object("bkt", "k", version_id, if_match=f'"{etag}"')

    gone = asyncio.run(delete(OneRetryIndex([current.to_dict()], ""), None))
    assert isinstance(gone, DeleteResult) and not gone.delete_marker
    by_id = OneRetryIndex([newest.to_dict(), older.to_dict()], "Enabled")
    removed = asyncio.run(delete(by_id, newest.version_id))
    assert isinstance(removed, DeleteResult) and removed.version_id == newest.version_id
    assert [d["v"] for d in by_id.versions] == [older.version_id]
    # Without an unknown outcome a failed condition stands.
    with pytest.raises(PreconditionFailedError):
        apply_delete(by_id.versions, "b", "k", None, "Enabled", marker_id, 5.0, "o", f'"{etag}"')
