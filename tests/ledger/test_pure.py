"""Pure pieces of the ledger client: striping, ack/fence quorums, recovery decisions,
placement, the metadata codec and the configuration record."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest

from blobstore.ledger.config import LedgerConfig
from blobstore.ledger.distribution_schedule import (
    AckSet,
    FenceQuorum,
    all_write_sets,
    is_entry_missing,
    write_set,
    write_set_bookies,
)
from blobstore.ledger.ensemble_placement import BookieInfo, choose_ensemble, choose_replacement
from blobstore.ledger.errors import BadLedgerConfigError, NotEnoughBookiesError
from blobstore.ledger.ledger_metadata import (
    STATE_CLOSED,
    LedgerMetadata,
    MetadataFormatError,
    check_quorums,
    new_metadata,
)

# --------------------------------------------------------------------------- striping


@pytest.mark.parametrize(
    ("entry_id", "e", "wq", "expected"),
    [
        (0, 3, 2, [0, 1]),
        (1, 3, 2, [1, 2]),
        (2, 3, 2, [2, 0]),
        (3, 3, 2, [0, 1]),
        (4, 5, 3, [4, 0, 1]),
        (7, 5, 3, [2, 3, 4]),
        (5, 3, 3, [2, 0, 1]),
        (9, 1, 1, [0]),
    ],
)
def test_write_set_follows_the_formula(entry_id: int, e: int, wq: int, expected: list[int]) -> None:
    assert write_set(entry_id, e, wq) == expected
    assert write_set_bookies(entry_id, [f"b{i}" for i in range(e)], wq) == [
        f"b{i}" for i in expected
    ]


def test_striping_spreads_evenly() -> None:
    counts = Counter(i for e in range(300) for i in write_set(e, 5, 3))
    assert set(counts.values()) == {180}


@pytest.mark.parametrize(("e", "wq"), [(3, 4), (0, 0), (3, 0)])
def test_write_set_rejects_bad_quorums(e: int, wq: int) -> None:
    with pytest.raises(AssertionError):
        write_set(0, e, wq)


def test_all_write_sets() -> None:
    assert all_write_sets(3, 2) == [[0, 1], [1, 2], [2, 0]]
    assert all_write_sets(3, 3) == [[0, 1, 2]]


# --------------------------------------------------------------------------- quorums


def test_ack_set_completes_at_ack_quorum_and_forgets_unset() -> None:
    acks = AckSet([2, 0, 1], 2)
    assert not acks.ack(0)
    acks.unset(0)
    assert not acks.ack(1)
    assert acks.ack(2)
    assert acks.acked == {1, 2}
    with pytest.raises(AssertionError):
        acks.ack(5)
    with pytest.raises(AssertionError):
        AckSet([0, 1], 3)


@pytest.mark.parametrize(
    ("e", "wq", "aq", "answered", "complete"),
    [
        (3, 2, 2, {0}, False),  # write set {1,2} has 2 unfenced >= AQ
        (3, 2, 2, {0, 1}, True),  # every write set has one answered
        (3, 2, 2, {1}, False),
        (3, 3, 2, {0}, False),
        (3, 3, 2, {0, 1}, True),
        (5, 3, 2, {0, 1}, False),
        (5, 3, 2, {0, 2, 4}, False),  # write set {4,0,1}: 1 unfenced; {1,2,3}: 2 unfenced
        (5, 3, 2, {0, 1, 3}, False),  # write set {2,3,4}: 2 unfenced
        (5, 3, 2, {0, 1, 3, 4}, True),
        (5, 3, 3, {0}, False),
        (5, 3, 3, {0, 2}, True),
        (5, 3, 3, {1}, False),  # write set {2,3,4} has no fenced bookie
        (5, 3, 3, {0, 3}, True),
        (3, 3, 3, {1}, True),
        (3, 2, 1, {0, 1}, False),  # AQ=1: every bookie of a write set must be fenced
        (3, 2, 1, {0, 1, 2}, True),
    ],
)
def test_fence_quorum(e: int, wq: int, aq: int, answered: set[int], complete: bool) -> None:
    quorum = FenceQuorum(e, wq, aq)
    for slot in answered:
        quorum.answered(slot)
    assert quorum.complete is complete


@pytest.mark.parametrize(
    ("missing", "wq", "aq", "expected"),
    [
        (0, 2, 2, False),
        (1, 2, 2, True),  # an entry acked by AQ=2 of 2 cannot be missing anywhere
        (1, 3, 2, False),
        (2, 3, 2, True),
        (2, 3, 3, True),
        (1, 3, 3, True),
        (2, 2, 1, True),
        (1, 2, 1, False),
    ],
)
def test_entry_missing_decision(missing: int, wq: int, aq: int, expected: bool) -> None:
    assert is_entry_missing(missing, wq, aq) is expected


def test_missing_decision_never_drops_an_acknowledged_entry() -> None:
    # Exhaustively: an entry on >= AQ replicas has at most WQ - AQ "missing" answers.
    for wq in range(1, 6):
        for aq in range(1, wq + 1):
            for holders in range(aq, wq + 1):
                assert not is_entry_missing(wq - holders, wq, aq)


# --------------------------------------------------------------------------- placement


def _bookies(count: int, racks: int = 0, read_only: set[int] = frozenset()) -> list[BookieInfo]:  # type: ignore[assignment]
    return [
        BookieInfo(
            f"10.0.0.{i}:3181", f"/rack-{i % racks}" if racks else "/default-rack", i in read_only
        )
        for i in range(count)
    ]


def test_choose_ensemble_distinct_writable() -> None:
    rng = random.Random(1)
    candidates = _bookies(6, read_only={0, 1})
    for _ in range(50):
        ensemble = choose_ensemble(candidates, 3, 2, rng=rng)
        assert len(set(ensemble)) == 3
        assert "10.0.0.0:3181" not in ensemble and "10.0.0.1:3181" not in ensemble
    # The error names the read-only bookies: the usual reason is full disks.
    read_only_note = "2 read-only (disk full or failing): 10.0.0.0:3181, 10.0.0.1:3181"
    with pytest.raises(NotEnoughBookiesError, match="need 5 writable bookies, 4 available"):
        choose_ensemble(candidates, 5, 2, rng=rng)
    with pytest.raises(NotEnoughBookiesError, match=re.escape(read_only_note)):
        choose_ensemble(iter(candidates), 4, 2, exclude={"10.0.0.2:3181"}, rng=rng)
    with pytest.raises(NotEnoughBookiesError, match=re.escape(read_only_note)) as caught:
        choose_replacement(candidates[:4], [c.bookie_id for c in candidates[1:4]], 0, 2)
    assert caught.value.read_only == ("10.0.0.0:3181", "10.0.0.1:3181")
    # A read-only bookie the caller also excludes (unreachable, draining) is still named.
    with pytest.raises(NotEnoughBookiesError, match=re.escape(read_only_note)):
        choose_ensemble(candidates, 4, 2, exclude={"10.0.0.0:3181", "10.0.0.5:3181"}, rng=rng)
    with pytest.raises(NotEnoughBookiesError) as caught:
        choose_ensemble(_bookies(2), 3, 2, rng=rng)
    assert "read-only" not in str(caught.value)


def test_choose_ensemble_spreads_write_sets_over_racks() -> None:
    rng = random.Random(2)
    candidates = _bookies(9, racks=3)
    racks = {c.bookie_id: c.rack for c in candidates}
    for _ in range(50):
        ensemble = choose_ensemble(candidates, 6, 3, rng=rng)
        for indexes in all_write_sets(6, 3):
            assert len({racks[ensemble[i]] for i in indexes}) == 3, ensemble


def test_choose_ensemble_with_uneven_racks_still_valid() -> None:
    rng = random.Random(3)
    candidates = _bookies(5, racks=2)
    for _ in range(20):
        ensemble = choose_ensemble(candidates, 5, 2, rng=rng)
        assert sorted(ensemble) == sorted(c.bookie_id for c in candidates)


def test_choose_replacement() -> None:
    rng = random.Random(4)
    candidates = _bookies(6, racks=3)
    ensemble = ["10.0.0.0:3181", "10.0.0.1:3181", "10.0.0.2:3181"]
    for _ in range(20):
        new = choose_replacement(candidates, ensemble, 1, 2, rng=rng)
        assert new not in ensemble
        # Neighbours of slot 1 are on racks 0 and 2: rack 1 is preferred.
        assert new == "10.0.0.4:3181"
    with pytest.raises(NotEnoughBookiesError):
        choose_replacement(_bookies(3), ensemble, 0, 2, rng=rng)
    assert (
        choose_replacement(_bookies(4), ensemble, 0, 2, exclude={"x"}, rng=rng) == "10.0.0.3:3181"
    )


# --------------------------------------------------------------------------- metadata


def _metadata() -> LedgerMetadata:
    return new_metadata(42, ("a:1", "b:1", "c:1"), 2, 2, b"secret", {"owner": "gw-1"})


def test_metadata_roundtrip_and_transitions() -> None:
    metadata = _metadata()
    assert LedgerMetadata.decode(metadata.encode()) == metadata
    changed = metadata.with_ensemble_change(10, ("a:1", "d:1", "c:1"))
    assert changed.ensemble_for(9) == ("a:1", "b:1", "c:1")
    assert changed.ensemble_for(10) == ("a:1", "d:1", "c:1")
    assert changed.ensemble_for(1000) == ("a:1", "d:1", "c:1")
    # A second change at the same first entry replaces that segment.
    again = changed.with_ensemble_change(10, ("a:1", "e:1", "c:1"))
    assert len(again.ensembles) == 2
    closed = again.in_recovery().closed_at(17, 1234)
    assert closed.state == STATE_CLOSED
    decoded = LedgerMetadata.decode(closed.encode())
    assert decoded == closed
    assert decoded.all_bookies() == ["a:1", "b:1", "c:1", "e:1"]
    with pytest.raises(AssertionError):
        closed.closed_at(18, 0)
    with pytest.raises(AssertionError):
        again.with_ensemble_change(5, ("a:1", "b:1", "c:1"))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda raw: raw.update(format_version=2),
        lambda raw: raw.update(state="HALF"),
        lambda raw: raw.update(write_quorum=4),
        lambda raw: raw.update(ensembles=[[0, ["a:1", "a:1", "c:1"]]]),
        lambda raw: raw.update(ensembles=[[1, ["a:1", "b:1", "c:1"]]]),
        lambda raw: raw.update(ensembles=[]),
        lambda raw: raw.update(digest_type="MD5"),
        lambda raw: raw.pop("ack_quorum"),
        lambda raw: raw.update(custom={"k": 1}),
        lambda raw: raw.update(ensembles=[[0, ["a:1", "b:1", "c:1"]], [0, ["a:1", "b:1", "d:1"]]]),
    ],
)
def test_metadata_decode_rejects_invalid_records(mutate: object) -> None:
    raw = json.loads(_metadata().encode())
    mutate(raw)  # type: ignore[operator]
    with pytest.raises(MetadataFormatError):
        LedgerMetadata.decode(json.dumps(raw).encode())


def test_metadata_decode_rejects_garbage() -> None:
    for data in (b"", b"\xff", b"[]", b'"x"', b"{}"):
        with pytest.raises(MetadataFormatError):
            LedgerMetadata.decode(data)


@pytest.mark.parametrize(
    ("e", "wq", "aq"), [(3, 4, 2), (3, 2, 3), (0, 0, 0), (3, 2, 0), (65, 2, 2)]
)
def test_bad_quorums_rejected(e: int, wq: int, aq: int) -> None:
    with pytest.raises(BadLedgerConfigError):
        check_quorums(e, wq, aq)


# --------------------------------------------------------------------------- config


def test_config_from_env_and_validation() -> None:
    config = LedgerConfig.from_env(
        {"BLOBSTORE_LEDGER_SPECULATIVE_READ_TIMEOUT_MS": "20", "BLOBSTORE_LEDGER_READ_WINDOW": "4"}
    )
    assert config.speculative_read_timeout_ms == 20
    assert config.read_window == 4
    with pytest.raises(BadLedgerConfigError, match="BLOBSTORE_LEDGER_READ_WINDOW"):
        LedgerConfig.from_env({"BLOBSTORE_LEDGER_READ_WINDOW": "many"})
    with pytest.raises(BadLedgerConfigError, match="PENDING_ADDS_MAX"):
        LedgerConfig.from_env({"BLOBSTORE_LEDGER_PENDING_ADDS_MAX": "0"})
    with pytest.raises(BadLedgerConfigError, match="READ_REPLICA_ORDER"):
        LedgerConfig(read_replica_order="sideways").validate()


def test_pending_add_waiter_follows_the_add_and_its_cancellation_leaves_the_add_alone() -> None:
    """The waiter an appender awaits resolves in the same step as the add's own future;
    cancelling it (a timeout, a cancelled request) neither completes nor fails the add,
    whose future the handle's bookkeeping relies on."""
    import asyncio

    from blobstore.ledger.errors import AddOutcomeUnknownError
    from blobstore.ledger.pending_add_op import PendingAddOp

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def op() -> PendingAddOp:
            return PendingAddOp(
                7, (b"entry",), 5, 5, AckSet([0, 1], 2), loop.create_future(), loop.create_future()
            )

        done = op()
        done.succeed()
        assert done.future.result() == 7 and done.waiter is not None
        assert done.waiter.result() == 7

        cancelled = op()
        assert cancelled.waiter is not None
        cancelled.waiter.cancel()
        assert not cancelled.done, "the add is still in flight"
        cancelled.succeed()
        assert cancelled.done and cancelled.future.result() == 7

        failed = op()
        assert failed.waiter is not None
        failed.fail(AddOutcomeUnknownError("ledger_id=1 gone", ledger_id=1))
        for future in (failed.future, failed.waiter):
            assert isinstance(future.exception(), AddOutcomeUnknownError)

    asyncio.run(main())
