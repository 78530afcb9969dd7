"""Unit tests (pure logic, fakes allowed): which ledgers GC drops, compaction candidates,
read-only hysteresis, configuration validation."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from blobstore.runtime.errors import UsageError
from blobstore.wire import zk_layout
from bookie import config as bookie_config
from bookie.compactor import candidates
from bookie.garbage_collector import GarbageCollector, list_ledger_ids
from bookie.ledger_dirs_monitor import next_read_only


class FakeZooKeeper:
    """Metadata znodes as a set of paths; `created_late` appear only to exists()."""

    def __init__(self, ledger_ids: set[int], created_late: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.paths = {zk_layout.ledger_path(i) for i in ledger_ids}
        self.late = {zk_layout.ledger_path(i) for i in created_late}

    async def get_children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        children = {p[len(prefix) :].split("/")[0] for p in self.paths if p.startswith(prefix)}
        if not children and path != zk_layout.LEDGER_META_ROOT:
            from kazoo.exceptions import NoNodeError

            raise NoNodeError(path)
        return sorted(children)

    async def exists(self, path: str) -> object | None:
        return object() if path in self.paths or path in self.late else None


class FakeStorage:
    def __init__(self, ledger_ids: set[int]) -> None:
        self.states: dict[int, Any] = dict.fromkeys(ledger_ids)
        self.deleted: list[int] = []

    async def delete_ledger(self, ledger_id: int) -> None:
        self.deleted.append(ledger_id)
        del self.states[ledger_id]


def test_list_ledger_ids_walks_the_hierarchy() -> None:
    ids = {0, 1, 9999, 10_000, 123_456_789_012, zk_layout.LEDGER_ID_MAX}
    assert asyncio.run(list_ledger_ids(FakeZooKeeper(ids))) == ids  # type: ignore[arg-type]


def test_gc_confirms_before_dropping_and_spares_late_ledgers() -> None:
    zk = FakeZooKeeper({1, 2}, created_late={4})
    storage = FakeStorage({1, 2, 3, 4})
    gc = GarbageCollector(
        zk,  # type: ignore[arg-type]
        storage,  # type: ignore[arg-type]
        bookie_config.BookieConfig(zk="x", journal_dir="j", ledger_dir="l"),
        lambda: False,
    )
    deleted = asyncio.run(gc.collect_ledgers())
    assert deleted == 1
    assert storage.deleted == [3], "4 was created after the snapshot: exists() saves it"
    assert set(storage.states) == {1, 2, 4}


def test_compaction_candidates() -> None:
    ratios = {1: (10, 100), 2: (50, 100), 3: (0, 0), 4: (100, 100), 5: (100, 100)}
    assert candidates(ratios, 0.2, current_log_id=5) == [3, 1]
    assert candidates(ratios, 0.8, current_log_id=5) == [3, 1, 2]
    assert candidates({5: (10, 100)}, 0.8, current_log_id=5) == [5], (
        "a sparse current log rolls first"
    )


def test_read_only_hysteresis() -> None:
    assert next_read_only(False, 0.94, 0.95, 0.90) is False
    assert next_read_only(False, 0.95, 0.95, 0.90) is True
    assert next_read_only(True, 0.92, 0.95, 0.90) is True, (
        "stays read-only above the warn threshold"
    )
    assert next_read_only(True, 0.89, 0.95, 0.90) is False


def parse(argv: list[str], environ: dict[str, str]) -> bookie_config.BookieConfig:
    parser = argparse.ArgumentParser()
    bookie_config.add_arguments(parser)
    return bookie_config.from_args(parser.parse_args(argv), environ)


BASE = ["--zk", "z:1", "--journal-dir", "j", "--ledger-dir", "l"]


def test_config_from_flags_and_environment() -> None:
    config = parse(
        [*BASE, "--gc-interval-s", "2.5"], {"BLOBSTORE_BOOKIE_JOURNAL_MAX_GROUP_WAIT_MS": "1"}
    )
    assert config.gc_interval_s == 2.5
    assert config.journal_max_group_wait_ms == 1.0
    assert config.journal_buffered_writes_threshold_bytes == 512 * 1024
    flag_wins = parse([*BASE, "--gc-interval-s", "3"], {"BLOBSTORE_BOOKIE_GC_INTERVAL_S": "9"})
    assert flag_wins.gc_interval_s == 3.0


@pytest.mark.parametrize(
    ("argv", "environ", "key"),
    [
        (["--disk-usage-warn-threshold", "0.99"], {}, "disk_usage_warn_threshold"),
        ([], {"BLOBSTORE_BOOKIE_ENTRY_LOG_BYTES_MAX": "1000"}, "entry_log_bytes_max"),
        (["--checkpoint-interval-s", "soon"], {}, "checkpoint_interval_s"),
        (["--checkpoint-write-mb-s", "-1"], {}, "checkpoint_write_mb_s"),
        (["--minor-compaction-threshold", "0.9"], {}, "minor_compaction_threshold"),
        (["--thread-switch-interval-ms", "0"], {}, "thread_switch_interval_ms"),
        (["--journal-zero-ahead-bytes", "4096"], {}, "journal_zero_ahead_bytes"),
        ([], {"BLOBSTORE_BOOKIE_JOURNAL_ZERO_AHEAD_MAX_MB_S": "0"}, "journal_zero_ahead_max_mb_s"),
    ],
)
def test_config_errors_name_the_key(argv: list[str], environ: dict[str, str], key: str) -> None:
    with pytest.raises(UsageError, match=key):
        parse([*BASE, *argv], environ)


def test_boolean_settings_from_flags_and_environment() -> None:
    assert parse(BASE, {}).journal_remove_from_page_cache is True
    env = {"BLOBSTORE_BOOKIE_JOURNAL_REMOVE_FROM_PAGE_CACHE": "false"}
    assert parse(BASE, env).journal_remove_from_page_cache is False
    flag = [*BASE, "--journal-remove-from-page-cache", "no"]
    assert parse(flag, {}).journal_remove_from_page_cache is False
    with pytest.raises(UsageError, match="journal_remove_from_page_cache='maybe'"):
        parse([*BASE, "--journal-remove-from-page-cache", "maybe"], {})
    assert parse(BASE, {}).journal_flush_when_queue_empty is True
    env = {"BLOBSTORE_BOOKIE_JOURNAL_FLUSH_WHEN_QUEUE_EMPTY": "false"}
    assert parse(BASE, env).journal_flush_when_queue_empty is False
