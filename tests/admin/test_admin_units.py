"""Pure pieces of the admin tools and the standalone layout file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blobstore.admin._catalog_scan import Holder
from blobstore.admin._output import human_bytes
from blobstore.admin.fsck import _merged_ranges
from blobstore.catalog.records import Extent
from blobstore.cli.standalone import load_or_create_credentials, load_or_create_layout
from blobstore.runtime.errors import UsageError

HOLDER = Holder("b", "k", version_id="null")


def _refs(*ranges: tuple[int, int]) -> list[tuple[Holder, Extent]]:
    return [(HOLDER, Extent(7, first, last, last - first + 1, 1)) for first, last in ranges]


@pytest.mark.parametrize(
    ("ranges", "merged"),
    [
        ([], []),
        ([(0, 3)], [(0, 3)]),
        ([(4, 5), (0, 3)], [(0, 5)]),  # adjacent
        ([(0, 3), (2, 9), (1, 1)], [(0, 9)]),  # overlapping: entries shared by copies
        ([(0, 1), (5, 6)], [(0, 1), (5, 6)]),  # a gap: an entry nothing references
    ],
)
def test_merged_ranges(ranges: list[tuple[int, int]], merged: list[tuple[int, int]]) -> None:
    assert _merged_ranges(_refs(*ranges)) == merged


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (3 << 20, "3.0 MiB"), (5 << 40, "5.0 TiB")],
)
def test_human_bytes(count: int, text: str) -> None:
    assert human_bytes(count) == text


def test_holder_describes_versions_and_parts() -> None:
    part = Holder("b", "k", upload_id="u1", part_number=3)
    assert HOLDER.to_json() == {"bucket": "b", "key": "k", "version_id": "null"}
    assert part.to_json() == {"bucket": "b", "key": "k", "upload_id": "u1", "part_number": 3}
    assert "part 3" in part.describe()


def test_layout_is_kept_and_grows(tmp_path: Path) -> None:
    first = load_or_create_layout(tmp_path, 2, zk_port=12345)
    again = load_or_create_layout(tmp_path, 2)
    assert again == first and again.zk_port == 12345
    grown = load_or_create_layout(tmp_path, 3)
    assert grown.bookie_ports[:2] == first.bookie_ports and len(grown.bookie_ports) == 3
    assert json.loads((tmp_path / "cluster.json").read_text())["bookie_ports"] == grown.bookie_ports


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        json.dumps({"format_version": 1, "zk_port": 1}),
        json.dumps(
            {"format_version": 1, "zk_port": 0, "bookie_ports": [1], "bookie_http_ports": [2]}
        ),
        json.dumps(
            {"format_version": 1, "zk_port": 9, "bookie_ports": [1, 2], "bookie_http_ports": [2]}
        ),
        json.dumps(
            {"format_version": 2, "zk_port": 9, "bookie_ports": [1], "bookie_http_ports": [2]}
        ),
        json.dumps(
            {"format_version": 1, "zk_port": 9, "bookie_ports": None, "bookie_http_ports": None}
        ),
        json.dumps({"format_version": 1, "zk_port": 9, "bookie_ports": 5, "bookie_http_ports": 5}),
        "\udcff not utf-8",
    ],
)
def test_broken_layout_is_a_usage_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "cluster.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(UsageError):
        load_or_create_layout(tmp_path, 1)


def test_credentials_generated_once_and_private(tmp_path: Path) -> None:
    access_key, secret_key = load_or_create_credentials(tmp_path, None, None)
    assert load_or_create_credentials(tmp_path, None, None) == (access_key, secret_key)
    assert (tmp_path / "credentials.json").stat().st_mode & 0o077 == 0
    with pytest.raises(UsageError):  # another access key: another owner (more in tests/standalone)
        load_or_create_credentials(tmp_path, "AK", "SK")
    (tmp_path / "credentials.json").write_text("{}")
    with pytest.raises(UsageError):
        load_or_create_credentials(tmp_path, None, None)


def test_a_table_written_to_a_pipe_keeps_its_cells_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Standard output that is not a terminal (a pipe, a file) has no width to fit: rich
    would cut cells at 80 columns (bookie ids, names, dates)."""
    from blobstore.admin._output import Output

    bookie_id = "bookie-host-with-a-long-name.example.internal:3181"
    rows = [[bookie_id, "decommissioning", "2026-11-27T09:10:18Z", "12.5 GiB", "a" * 40]]
    Output(json_mode=False).table("bookies", ["bookie", "state", "since", "size", "note"], rows)
    out = capsys.readouterr().out
    for cell in rows[0]:
        assert cell in out, out
