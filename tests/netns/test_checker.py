"""The history checker's pure logic, on histories written by hand: ones that must pass,
and ones that must fail it (a lost acknowledged PUT, a stale read, a torn object, a
listing that omits an acknowledged key, a search cut short)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.netns.checker import (
    DELETE,
    FAIL,
    GET,
    INFO,
    LIST,
    OK,
    PUT,
    Op,
    check,
    foreign_reads,
    linearizable,
    listing_omissions,
    nonlinearizable_keys,
    settle_unknown_writes,
)
from tests.netns.nemesis import CORRUPT, KINDS, SESSION_EXPIRY, SPLIT, Topology, plan
from tests.netns.suite import load_history, save_history


def put(t0: float, t1: float, value: str, outcome: str = OK, key: str = "k", p: int = 0) -> Op:
    return Op(p, PUT, key, value, t0, t1, outcome)


def delete(t0: float, t1: float, outcome: str = OK, key: str = "k", p: int = 0) -> Op:
    return Op(p, DELETE, key, None, t0, t1, outcome)


def get(t0: float, t1: float, value: str | None, key: str = "k", p: int = 1) -> Op:
    return Op(p, GET, key, value, t0, t1, OK)


def listing(t0: float, t1: float, *keys: str) -> Op:
    return Op(9, LIST, "", None, t0, t1, OK, frozenset(keys))


def test_sequential_history_passes() -> None:
    history = [put(0, 1, "a"), get(2, 3, "a"), delete(4, 5), get(6, 7, None), put(8, 9, "b")]
    assert check([*history, get(10, 11, "b")]) == []


def test_acknowledged_put_lost_fails() -> None:
    history = [put(0, 1, "a"), get(2, 3, None)]
    assert linearizable(history) is False
    [finding] = nonlinearizable_keys(history)
    assert finding.check == "not linearizable" and finding.key == "k"


def test_stale_read_after_overwrite_fails() -> None:
    assert linearizable([put(0, 1, "a"), put(2, 3, "b"), get(4, 5, "a")]) is False


def test_concurrent_write_may_be_read_either_way() -> None:
    history = [put(0, 1, "a"), put(2, 6, "b"), get(3, 4, "b"), get(4.5, 5, "a")]
    # b took effect before the first read, so the second can no longer see a.
    assert linearizable(history) is False
    assert linearizable([put(0, 1, "a"), put(2, 6, "b"), get(3, 4, "a"), get(4.5, 5, "b")])


def test_unknown_write_may_take_effect_late_or_never() -> None:
    unknown = put(1, 2, "b", outcome=INFO)
    assert linearizable([put(0, 0.5, "a"), unknown, get(3, 4, "a"), get(10, 11, "b")])
    assert linearizable([put(0, 0.5, "a"), unknown, get(3, 4, "a"), get(10, 11, "a")])
    # ... but once seen, it cannot be unseen.
    assert linearizable([put(0, 0.5, "a"), unknown, get(3, 4, "b"), get(10, 11, "a")]) is False


def test_unknown_delete_and_failed_reads() -> None:
    history = [put(0, 1, "a"), delete(2, 3, outcome=INFO), get(4, 5, "a"), get(6, 7, None)]
    failed_read = Op(1, GET, "k", "zzz", 8, 9, FAIL)
    assert check([*history, failed_read]) == []
    assert linearizable([*history, get(8, 9, "a")]) is False


def test_foreign_or_partial_body_fails() -> None:
    history = [put(0, 1, "5:abc"), get(2, 3, "3:ab")]
    [finding] = foreign_reads(history)
    assert finding.check == "foreign read"
    assert [f.check for f in check(history)] == ["foreign read", "not linearizable"]


def test_another_keys_bytes_are_foreign() -> None:
    history = [put(0, 1, "a", key="x"), get(2, 3, "a", key="y")]
    assert [f.key for f in foreign_reads(history)] == ["y"]


def test_listing_omitting_an_acknowledged_key_fails() -> None:
    history = [put(0, 1, "a", key="x"), put(0, 1, "b", key="y"), listing(2, 3, "x")]
    [finding] = listing_omissions(history)
    assert (finding.check, finding.key) == ("listing omits", "y")


def test_listing_may_omit_a_key_being_deleted_or_not_yet_acknowledged() -> None:
    history = [
        put(0, 1, "a", key="x"),
        delete(1.5, 9, outcome=INFO, key="x"),  # may take effect before the listing
        put(2, 5, "b", key="y"),  # acknowledged after the listing began
        listing(3, 4),
    ]
    assert listing_omissions(history) == []


def test_listing_after_a_completed_delete_and_a_new_put_must_list() -> None:
    history = [
        put(0, 1, "a", key="x"),
        delete(2, 3, key="x"),
        put(4, 5, "b", key="x"),
        listing(6, 7),
    ]
    assert [f.check for f in listing_omissions(history)] == ["listing omits"]


def test_listing_inventing_a_key_fails() -> None:
    history = [put(5, 6, "a", key="x"), listing(1, 2, "x", "ghost")]
    assert sorted(f.key for f in listing_omissions(history)) == ["ghost", "x"]


def test_search_cut_short_is_undecided_not_passed() -> None:
    rng = random.Random(1)
    # Bodies sent twice each: nothing to settle, so the search itself must decide.
    history = [put(0, 100, f"v{i % 6}", outcome=INFO, p=i) for i in range(12)]
    history += [get(101 + i, 101.5 + i, f"v{rng.randrange(6)}") for i in range(6)]
    assert settle_unknown_writes(history) == history
    assert linearizable(history, states_max=10) is None
    [finding] = nonlinearizable_keys(history, states_max=10)
    assert finding.check == "undecided"


def test_unknown_writes_of_unique_bodies_are_settled() -> None:
    never_read = put(1, 2, "x", outcome=INFO)
    read_later = put(1, 2, "y", outcome=INFO)
    deleted = delete(1, 2, outcome=INFO)
    reads = [get(5, 6, "y"), get(7, 8, "y")]
    settled = settle_unknown_writes([never_read, read_later, deleted, *reads])
    assert never_read not in settled
    assert deleted in settled
    [made_ok] = [op for op in settled if op.value == "y" and op.kind == PUT]
    assert (made_ok.outcome, made_ok.complete_s) == (OK, 6)


def test_many_unknown_writes_are_decided_within_a_small_budget() -> None:
    # As after a gateway's kill: every worker's PUT without an answer, then reads.
    history = [put(0, 1, "a")]
    history += [put(2 + i, 3 + i, f"u{i}", outcome=INFO, p=i) for i in range(40)]
    history += [get(50, 51, "u7"), get(52, 53, "u7"), get(54, 55, "u30")]
    assert check(history, states_max=500) == []
    lost = [*history, get(56, 57, "u7")]  # u7 again after u30 was read: never rewritten
    assert [f.check for f in check(lost, states_max=500)] == ["not linearizable"]


def test_a_write_failure_is_never_certain() -> None:
    with pytest.raises(AssertionError):
        Op(0, PUT, "k", "a", 0, 1, FAIL)


TOPOLOGY = Topology(("zk1", "zk2", "zk3"), ("b1", "b2", "b3", "b4"), ("g1", "g2", "g3"))


def test_plan_is_seeded_and_covers_every_kind() -> None:
    faults = plan(random.Random(7), 2 * len(KINDS), TOPOLOGY, "b2")
    assert faults == plan(random.Random(7), 2 * len(KINDS), TOPOLOGY, "b2")
    assert sorted(f.kind for f in faults) == sorted(KINDS * 2)
    for fault in faults:
        if fault.kind == CORRUPT:
            assert fault.targets == ("b2",)
        if fault.kind == SPLIT:
            assert 1 <= len(fault.targets) <= len(TOPOLOGY.hosts) // 2
        if fault.kind == SESSION_EXPIRY:
            assert fault.targets[0] not in TOPOLOGY.zookeepers


def test_a_saved_history_loads_as_it_was(tmp_path: Path) -> None:
    history = [put(0, 1, "a"), delete(1, 2, outcome=INFO), get(2, 3, None), listing(3, 4, "k")]
    save_history(history, tmp_path / "history.jsonl")
    assert load_history(tmp_path / "history.jsonl") == history
