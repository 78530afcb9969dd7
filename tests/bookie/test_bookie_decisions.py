"""The bookie's pure decisions, as tables: which rule a configuration breaks first, and
what a journal file's bad tail is."""

from __future__ import annotations

import dataclasses

import pytest

from blobstore.runtime.errors import UsageError
from bookie.config import RULES, BookieConfig, first_broken_rule
from bookie.journal import bad_tail_kind

VALID = BookieConfig(zk="127.0.0.1:2181", journal_dir="/j", ledger_dir="/l")


def test_a_valid_config_breaks_no_rule() -> None:
    assert first_broken_rule(VALID) is None
    assert VALID.validate() is VALID


@pytest.mark.parametrize(
    ("changes", "setting", "why"),
    [
        ({"zk": ""}, "zk", "a ZooKeeper connect string HOST:PORT[/chroot] is required"),
        ({"port": 65536}, "port", "must be in [0, 65535]"),
        ({"journal_max_group_wait_ms": 1001}, "journal_max_group_wait_ms", "in [0, 1000]"),
        (
            {"journal_zero_ahead_bytes": 1},
            "journal_zero_ahead_bytes",
            "0 (off) or in [64 KiB, 1 GiB]",
        ),
        ({"journal_zero_ahead_bytes": 0}, None, None),
        # Two broken settings: the first rule in order is named.
        ({"zk": "", "port": -1}, "zk", "a ZooKeeper connect string HOST:PORT[/chroot] is required"),
        ({"port": -1, "journal_max_group_wait_ms": -1}, "port", "must be in [0, 65535]"),
    ],
)
def test_the_first_broken_rule_is_named(
    changes: dict[str, object], setting: str | None, why: str | None
) -> None:
    config = dataclasses.replace(VALID, **changes)  # type: ignore[arg-type]
    broken = first_broken_rule(config)
    assert broken == (None if setting is None else (setting, why))
    if setting is not None:
        with pytest.raises(UsageError, match=f"bad bookie setting {setting}="):
            config.validate()


def test_every_rule_names_a_setting_of_the_config() -> None:
    fields = {f.name for f in dataclasses.fields(BookieConfig)}
    assert {setting for setting, _, _ in RULES} <= fields


@pytest.mark.parametrize(
    ("data", "offset", "newest", "kind"),
    [
        (b"record" + bytes(10), 6, True, "zeros"),  # zero-ahead past the last record
        (b"record" + b"\x00\x07" + bytes(8), 6, True, "torn"),  # a torn last write
        (b"record" + bytes(10), 6, False, "corrupt"),  # a complete file damaged
        (b"record" + b"garbage", 6, False, "corrupt"),
        (b"record", 6, True, "zeros"),  # nothing follows
    ],
)
def test_a_bad_tail_is_told_apart(data: bytes, offset: int, newest: bool, kind: str) -> None:
    assert bad_tail_kind(data, len(data), offset, newest) == kind
