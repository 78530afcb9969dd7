"""Per-ledger passwords on real ZooKeeper and bookie processes (the object layer and the
auditor in this process, taking the cluster key from the environment as a gateway does):

- with a cluster key, every object ledger gets its own password: the hashes ZooKeeper
  keeps differ from ledger to ledger and from the fixed password's, and each is the
  hash of the password derived from the key and the ledger id;
- ledgers written before the cluster had a key (the fixed password) still read;
- a process with another cluster key cannot open the new ledgers (a clear error), and
  still opens the old ones;
- a bookie killed: the auditor re-replicates derived-password and fixed-password ledgers
  alike (the copies go to the bookies under each ledger's master key), one without the
  key cannot, and every object reads back.
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from blobstore.ledger import LedgerMetadata, LedgerUnauthorizedError
from blobstore.ledger.config import OBJECT_LEDGER_PASSWORD, OBJECT_LEDGER_PURPOSE
from blobstore.ledger.ledger_metadata import password_hash
from blobstore.ledger.passwords import LedgerPasswords, derive_ledger_password
from blobstore.objects.store import ObjectStore
from blobstore.recovery.auditor import BookieAuditor
from blobstore.runtime.sealing import (
    CLUSTER_KEY_ENV,
    CLUSTER_KEY_FILE_ENV,
    ClusterKey,
    generate_cluster_key,
    parse_cluster_key,
)
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout
from tests.admin.test_decommission import _ledgers
from tests.admin.workload import ENTRY_BYTES, put, read_all, store_config
from tests.cluster.processes import BookieProcess
from tests.conftest import BookieFactory
from tests.ledger.conftest import run
from tests.waiting import wait_until_async

SHORT_SESSION = ("--zk-session-timeout-s", "3")  # a killed bookie's registration goes soon
BUCKET = "passwords"
OBJECT_BYTES = 150_000  # three entries
UNREGISTERED_WAIT_S = 60.0
SetKey = Callable[[ClusterKey | None], None]
Bodies = dict[str, bytes]


@pytest.fixture
def set_key(monkeypatch: pytest.MonkeyPatch) -> SetKey:
    """Give this process (as a gateway's environment would) a cluster key, or none."""

    def set_(key: ClusterKey | None) -> None:
        monkeypatch.delenv(CLUSTER_KEY_FILE_ENV, raising=False)
        if key is None:
            monkeypatch.delenv(CLUSTER_KEY_ENV, raising=False)
        else:
            monkeypatch.setenv(CLUSTER_KEY_ENV, base64.b64encode(key.key).decode())

    return set_


def new_key() -> ClusterKey:
    return parse_cluster_key(generate_cluster_key(), "test key")


def bodies(prefix: str, count: int, rng: random.Random) -> Bodies:
    return {f"{prefix}-{i}": rng.randbytes(OBJECT_BYTES + i) for i in range(count)}


async def write(zk_connect: str, objects: Bodies, *, create_bucket: bool = False) -> None:
    """PUT `objects` through a fresh store, each into a ledger of its own."""
    store = ObjectStore(zk_connect, store_config(audit_interval_s=0, ledger_bytes_max=ENTRY_BYTES))
    await store.start()
    try:
        if create_bucket:
            await store.catalog.create_bucket(BUCKET, "tester")
        for key, body in objects.items():
            await put(store, BUCKET, key, body)
    finally:
        await store.close()


async def read(zk_connect: str, keys: list[str]) -> dict[str, bytes | LedgerUnauthorizedError]:
    """Each object's bytes through a fresh store (no cache), or why it was refused."""
    store = ObjectStore(zk_connect, store_config(audit_interval_s=0))
    await store.start()
    try:
        results: dict[str, bytes | LedgerUnauthorizedError] = {}
        for key in keys:
            try:
                results[key] = await read_all(store, BUCKET, key)
            except LedgerUnauthorizedError as e:
                results[key] = e
        return results
    finally:
        await store.close()


def stored_hashes(zk_client: KazooClient, ledger_ids: set[int]) -> dict[int, str]:
    """The password hash each ledger's metadata keeps, read from its znode."""
    return {
        ledger_id: json.loads(zk_client.get(zk_layout.ledger_path(ledger_id))[0])["password_hash"]
        for ledger_id in ledger_ids
    }


def object_ledgers(zk_connect: str) -> dict[int, LedgerMetadata]:
    ledgers = run(_ledgers(zk_connect))
    return {i: m for i, m in ledgers.items() if m.custom.get("purpose") == OBJECT_LEDGER_PURPOSE}


def test_each_ledger_gets_its_own_password_and_old_ledgers_still_read(
    bookies: BookieFactory, zk_connect: str, zk_client: KazooClient, set_key: SetKey
) -> None:
    bookies(3)
    rng = random.Random(36)
    old, new = bodies("old", 2, rng), bodies("new", 3, rng)
    set_key(None)  # the cluster before it had a key: the fixed password
    run(write(zk_connect, old, create_bucket=True))
    old_ledgers = set(object_ledgers(zk_connect))
    key = new_key()
    set_key(key)
    run(write(zk_connect, new))
    new_ledgers = set(object_ledgers(zk_connect)) - old_ledgers

    hashes = stored_hashes(zk_client, old_ledgers | new_ledgers)
    fixed = password_hash(OBJECT_LEDGER_PASSWORD)
    assert {hashes[i] for i in old_ledgers} == {fixed}, hashes
    assert len(new_ledgers) >= 2, new_ledgers
    assert len({hashes[i] for i in new_ledgers}) == len(new_ledgers), hashes
    for ledger_id in new_ledgers:
        assert hashes[ledger_id] != fixed, ledger_id
        assert hashes[ledger_id] == password_hash(derive_ledger_password(key, ledger_id))

    everything = {**old, **new}
    assert run(read(zk_connect, sorted(everything))) == everything

    other = new_key()
    set_key(other)  # a process given another cluster key
    results = run(read(zk_connect, sorted(everything)))
    assert {k: results[k] for k in old} == old  # the fixed password: still opens
    for key_name in new:
        refused = results[key_name]
        assert isinstance(refused, LedgerUnauthorizedError), key_name
        assert "another cluster key" in str(refused), refused
        assert other.key_id in str(refused), refused


async def _until_unregistered(zk_connect: str, bookie_id: str) -> None:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    try:

        async def unregistered() -> bool:
            return await zk.exists(zk_layout.available_path(bookie_id)) is None

        await wait_until_async(
            unregistered, UNREGISTERED_WAIT_S, message=f"{bookie_id} still registered"
        )
    finally:
        await zk.stop()


async def _audit(zk_connect: str, passwords: LedgerPasswords) -> tuple[str | None, bool]:
    """One auditor pass that recovers a bookie at once: (the bookie, safe to remove)."""
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    try:
        auditor = BookieAuditor(zk, "auditor-test", 60.0, 0.0, passwords=passwords)
        result = await auditor.audit_once()
        return result.recovered, result.safe_to_remove
    finally:
        await zk.stop()


def _victim(
    started: list[BookieProcess], ledgers: dict[int, LedgerMetadata], derived: set[int]
) -> BookieProcess:
    """A bookie holding both derived-password and fixed-password ledgers (two
    ensembles of three among four bookies share at least two), the busiest such."""
    named = Counter(b for m in ledgers.values() for b in m.all_bookies())
    both = [
        b
        for b in started
        if any(b.bookie_id in m.all_bookies() for i, m in ledgers.items() if i in derived)
        and any(b.bookie_id in m.all_bookies() for i, m in ledgers.items() if i not in derived)
    ]
    assert both, ledgers
    return max(both, key=lambda b: named[b.bookie_id])


def test_the_auditor_rereplicates_ledgers_under_their_derived_passwords(
    bookies: BookieFactory, zk_connect: str, set_key: SetKey
) -> None:
    started = bookies(4, SHORT_SESSION)
    rng = random.Random(3636)
    old, new = bodies("old", 2, rng), bodies("new", 2, rng)
    set_key(None)
    run(write(zk_connect, old, create_bucket=True))
    fixed_ledgers = set(object_ledgers(zk_connect))
    key = new_key()
    set_key(key)
    run(write(zk_connect, new))
    ledgers = object_ledgers(zk_connect)
    derived = set(ledgers) - fixed_ledgers
    assert derived and fixed_ledgers, ledgers
    victim = _victim(started, ledgers, derived)
    victim.kill()
    run(_until_unregistered(zk_connect, victim.bookie_id))

    # Without the key, the derived-password ledgers cannot be copied: not done.
    keyless = run(_audit(zk_connect, LedgerPasswords(None)))
    assert keyless == (victim.bookie_id, False), keyless
    still_named = {
        i for i, m in object_ledgers(zk_connect).items() if victim.bookie_id in m.all_bookies()
    }
    assert still_named and still_named <= derived, (still_named, derived)

    # With it (from the environment, as autorecovery's), everything moves.
    done = run(_audit(zk_connect, LedgerPasswords.from_env()))
    assert done == (victim.bookie_id, True), done
    after = object_ledgers(zk_connect)
    assert not [i for i, m in after.items() if victim.bookie_id in m.all_bookies()], after
    everything = {**old, **new}
    assert run(read(zk_connect, sorted(everything))) == everything
