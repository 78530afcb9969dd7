"""The pure decisions of listings: which uploads a page of ListMultipartUploads returns,
and where a listing of versions starts and resumes."""

from __future__ import annotations

from typing import TypedDict

import pytest

from blobstore.catalog.listing import _after_version, _versions_start
from blobstore.catalog.records import ObjectRecord
from blobstore.catalog.uploads import UploadPage, choose_uploads

# (key, upload id), sorted as the catalog passes them.
KEYED = [
    ("a/1", "u1"),
    ("a/2", "u2"),
    ("b", "u3"),
    ("b", "u4"),
    ("c/x/1", "u5"),
    ("c/y", "u6"),
    ("d", "u7"),
]


def _choose(
    keyed: list[tuple[str, str]] = KEYED,
    *,
    prefix: str = "",
    delimiter: str = "",
    key_marker: str = "",
    upload_id_marker: str = "",
    max_uploads: int = 1000,
) -> UploadPage:
    return choose_uploads(
        keyed,
        prefix=prefix,
        delimiter=delimiter,
        key_marker=key_marker,
        upload_id_marker=upload_id_marker,
        max_uploads=max_uploads,
    )


class _Selection(TypedDict, total=False):
    prefix: str
    delimiter: str
    key_marker: str
    upload_id_marker: str


ALL = ["u1", "u2", "u3", "u4", "u5", "u6", "u7"]


@pytest.mark.parametrize(
    ("keyed", "options", "upload_ids", "common_prefixes"),
    [
        pytest.param([], {}, [], [], id="no-upload-empty-page"),
        pytest.param(KEYED, {}, ALL, [], id="everything-in-key-order"),
        pytest.param(KEYED, {"prefix": "a/"}, ["u1", "u2"], [], id="only-under-the-prefix"),
        pytest.param(KEYED, {"prefix": "z"}, [], [], id="nothing-under-the-prefix"),
        pytest.param(
            KEYED,
            {"delimiter": "/"},
            ["u3", "u4", "u7"],
            ["a/", "c/"],
            id="delimiter-rolls-up-common-prefixes",
        ),
        pytest.param(
            KEYED,
            {"prefix": "c/", "delimiter": "/"},
            ["u6"],
            ["c/x/"],
            id="common-prefixes-below-the-prefix",
        ),
        pytest.param(
            KEYED,
            {"prefix": "a/", "delimiter": "/"},
            ["u1", "u2"],
            [],
            id="no-delimiter-after-the-prefix-no-roll-up",
        ),
        pytest.param(
            KEYED, {"key_marker": "a/2"}, ["u3", "u4", "u5", "u6", "u7"], [], id="after-key-marker"
        ),
        pytest.param(
            KEYED,
            {"key_marker": "b"},
            ["u5", "u6", "u7"],
            [],
            id="key-marker-alone-skips-every-upload-of-its-key",
        ),
        pytest.param(
            KEYED,
            {"key_marker": "b", "upload_id_marker": "u3"},
            ["u4", "u5", "u6", "u7"],
            [],
            id="upload-id-marker-resumes-within-the-key",
        ),
        pytest.param(
            KEYED,
            {"key_marker": "b", "upload_id_marker": "u4"},
            ["u5", "u6", "u7"],
            [],
            id="upload-id-marker-at-the-last-upload-of-the-key",
        ),
        pytest.param(
            KEYED,
            {"key_marker": "a/", "delimiter": "/"},
            ["u3", "u4", "u7"],
            ["c/"],
            id="common-prefix-at-the-marker-was-returned-already",
        ),
        pytest.param(
            KEYED,
            {"key_marker": "a/1", "delimiter": "/"},
            ["u3", "u4", "u7"],
            ["c/"],
            id="marker-inside-a-common-prefix-skips-it",
        ),
        pytest.param(
            KEYED,
            {"upload_id_marker": "u3"},
            ALL,
            [],
            id="upload-id-marker-without-key-marker-is-ignored",
        ),
    ],
)
def test_choose_uploads_selects_by_prefix_markers_and_delimiter(
    keyed: list[tuple[str, str]],
    options: _Selection,
    upload_ids: list[str],
    common_prefixes: list[str],
) -> None:
    """Uploads under the prefix, after the markers, those under a common prefix rolled
    up into it once; an untruncated page has no next markers."""
    page = _choose(keyed, **options)
    assert page == UploadPage(upload_ids, common_prefixes)


@pytest.mark.parametrize(
    ("delimiter", "max_uploads", "page"),
    [
        pytest.param("", 7, UploadPage(ALL), id="exactly-max-uploads-is-not-truncated"),
        pytest.param("", 8, UploadPage(ALL), id="one-under-the-limit-is-not-truncated"),
        pytest.param(
            "",
            6,
            UploadPage(ALL[:6], [], True, "c/y", "u6"),
            id="one-past-the-limit-is-truncated-after-the-last-upload",
        ),
        pytest.param(
            "",
            3,
            UploadPage(["u1", "u2", "u3"], [], True, "b", "u3"),
            id="truncated-between-two-uploads-of-one-key",
        ),
        pytest.param(
            "",
            1,
            UploadPage(["u1"], [], True, "a/1", "u1"),
            id="one-upload-per-page",
        ),
        pytest.param(
            "/", 5, UploadPage(["u3", "u4", "u7"], ["a/", "c/"]), id="prefixes-count-exactly-full"
        ),
        pytest.param(
            "/",
            1,
            UploadPage([], ["a/"], True, "a/", ""),
            id="truncated-after-a-common-prefix-names-it-without-upload-id",
        ),
        pytest.param(
            "/",
            4,
            UploadPage(["u3", "u4"], ["a/", "c/"], True, "c/", ""),
            id="common-prefixes-count-toward-the-limit",
        ),
    ],
)
def test_choose_uploads_truncates_only_when_more_remain(
    delimiter: str, max_uploads: int, page: UploadPage
) -> None:
    """A page holds at most max_uploads uploads and prefixes; it is truncated only when
    another one follows, and then names the last it returned as the next markers."""
    assert _choose(delimiter=delimiter, max_uploads=max_uploads) == page


@pytest.mark.parametrize("delimiter", ["", "/"])
@pytest.mark.parametrize("max_uploads", [1, 2, 3, 7])
def test_choose_uploads_pages_resume_where_the_last_stopped(
    delimiter: str, max_uploads: int
) -> None:
    """Following the next markers page by page returns what one page returns, once each."""
    whole = _choose(delimiter=delimiter)
    upload_ids: list[str] = []
    common_prefixes: list[str] = []
    key_marker = upload_id_marker = ""
    for _ in range(len(KEYED) + 1):
        page = _choose(
            delimiter=delimiter,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            max_uploads=max_uploads,
        )
        upload_ids += page.upload_ids
        common_prefixes += page.common_prefixes
        if not page.truncated:
            break
        key_marker, upload_id_marker = page.next_key_marker, page.next_upload_id_marker
    assert not page.truncated
    assert (upload_ids, common_prefixes) == (whole.upload_ids, whole.common_prefixes)


# ------------------------------------------------------------------ listing versions


@pytest.mark.parametrize(
    ("prefix", "delimiter", "key_marker", "start"),
    [
        pytest.param("", "", "", "", id="no-marker-starts-at-the-beginning"),
        pytest.param("p/", "/", "", "p/", id="no-marker-starts-at-the-prefix"),
        pytest.param("p/", "", "a", "p/", id="marker-before-the-prefix-starts-at-the-prefix"),
        pytest.param("p/", "", "p/k", "p/k", id="marker-under-the-prefix-starts-at-it"),
        pytest.param("p/", "", "p/", "p/", id="marker-equal-to-the-prefix"),
        pytest.param("p/", "/", "q", "q", id="marker-after-the-prefix-starts-at-it"),
        pytest.param("", "/", "abc", "abc", id="marker-without-delimiter-starts-at-it"),
        pytest.param("", "/", "a/", "a0", id="marker-a-common-prefix-starts-after-it"),
        pytest.param("", "/", "a/b/c", "a0", id="marker-inside-a-common-prefix-starts-after-it"),
        pytest.param("p/", "/", "p/a/b", "p/a0", id="common-prefix-below-the-prefix"),
        pytest.param("p/", "/", "p/k", "p/k", id="no-delimiter-after-the-prefix"),
        pytest.param(
            "",
            "\U0010ffff",
            "\U0010ffff",
            "\U0010ffff" * 2,
            id="common-prefix-with-no-successor-starts-past-every-key",
        ),
    ],
)
def test_versions_start(prefix: str, delimiter: str, key_marker: str, start: str) -> None:
    """Start at the prefix, at a key marker under it, or past the common prefix the
    marker was rolled up into."""
    assert _versions_start(prefix, delimiter, key_marker) == start


def _versions(*version_ids: str) -> list[ObjectRecord]:
    """The versions of one key, newest first (as an index page holds them)."""
    return [ObjectRecord("b", "k", version_id=v) for v in version_ids]


@pytest.mark.parametrize(
    ("records", "version_id_marker", "after"),
    [
        pytest.param([], "v1", [], id="no-version"),
        pytest.param(["v3", "v2", "v1"], "v3", ["v2", "v1"], id="after-the-newest"),
        pytest.param(["v3", "v2", "v1"], "v2", ["v1"], id="after-a-middle-version"),
        pytest.param(["v3", "v2", "v1"], "v1", [], id="the-oldest-leaves-none"),
        pytest.param(["v3", "v2", "v1"], "v9", [], id="a-version-gone-leaves-none"),
        pytest.param(["v3"], "", [], id="an-empty-marker-matches-no-version"),
    ],
)
def test_after_version_returns_the_versions_past_the_marker(
    records: list[str], version_id_marker: str, after: list[str]
) -> None:
    """The versions listed after the marker's version, none when that version is gone."""
    found = _after_version(_versions(*records), version_id_marker)
    assert [r.version_id for r in found] == after
