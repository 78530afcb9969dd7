"""The standalone data directory's credentials (pure logic over a temporary directory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blobstore.cli.standalone import load_or_create_credentials
from blobstore.runtime.errors import UsageError


def test_given_credentials_are_kept_for_a_start_without_them(tmp_path: Path) -> None:
    assert load_or_create_credentials(tmp_path, "AKEY", "secret-1") == ("AKEY", "secret-1")
    assert load_or_create_credentials(tmp_path, None, None) == ("AKEY", "secret-1")
    # A new secret for the same access key: the same user, so its buckets stay its own.
    assert load_or_create_credentials(tmp_path, "AKEY", "secret-2") == ("AKEY", "secret-2")
    assert load_or_create_credentials(tmp_path, None, None) == ("AKEY", "secret-2")
    # Another access key would be another user, to whom every bucket answers AccessDenied.
    with pytest.raises(UsageError, match="belongs to access key AKEY"):
        load_or_create_credentials(tmp_path, "OTHER", "secret-3")
    assert load_or_create_credentials(tmp_path, None, None) == ("AKEY", "secret-2")


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"access_key": None, "secret_key": None}).encode(),
        json.dumps({"access_key": "A"}).encode(),
        json.dumps(["A", "B"]).encode(),
        b"\xff\xfe not json",
    ],
)
def test_a_broken_credentials_file_is_one_clear_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "credentials.json").write_bytes(content)
    with pytest.raises(UsageError, match="broken data directory"):
        load_or_create_credentials(tmp_path, None, None)
