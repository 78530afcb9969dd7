"""Object ledgers' passwords (blobstore/ledger/passwords.py): the rule, without processes.

With a cluster key, ledger N's password is HMAC-SHA256(key, "blobstore-ledger-password:"
+ N): pinned here byte for byte, since every ledger ever written depends on it. Opening
picks the known password whose hash the metadata keeps: the derived one, the fixed one
(ledgers written before the cluster had a key), the foreign ones; none for another key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from blobstore.ledger.config import OBJECT_LEDGER_PASSWORD
from blobstore.ledger.ledger_metadata import password_hash
from blobstore.ledger.passwords import LedgerPasswords, derive_ledger_password
from blobstore.runtime.errors import UsageError
from blobstore.runtime.sealing import CLUSTER_KEY_ENV, CLUSTER_KEY_FILE_ENV, ClusterKey

KEY = ClusterKey(bytes(range(32)))
OTHER_KEY = ClusterKey(bytes(range(1, 33)))


def test_the_password_is_the_hmac_of_the_labelled_ledger_id() -> None:
    expected = hmac.new(bytes(range(32)), b"blobstore-ledger-password:7", hashlib.sha256)
    assert derive_ledger_password(KEY, 7) == expected.digest()
    assert len(derive_ledger_password(KEY, 7)) == 32


def test_passwords_differ_by_ledger_and_by_key_and_are_not_the_key() -> None:
    passwords = {derive_ledger_password(KEY, n) for n in range(1000)}
    assert len(passwords) == 1000
    assert KEY.key not in passwords
    assert derive_ledger_password(OTHER_KEY, 7) != derive_ledger_password(KEY, 7)


def test_new_ledgers_get_the_derived_password_with_a_key_and_the_fixed_one_without() -> None:
    assert LedgerPasswords(KEY).derived is True
    assert LedgerPasswords(KEY).for_new_ledger(5) == derive_ledger_password(KEY, 5)
    assert LedgerPasswords(None).derived is False
    assert LedgerPasswords(None).for_new_ledger(5) == OBJECT_LEDGER_PASSWORD


def test_opening_picks_the_password_whose_hash_the_metadata_keeps() -> None:
    passwords = LedgerPasswords(KEY, foreign=(b"theirs",))
    derived = derive_ledger_password(KEY, 9)
    assert passwords.matching(9, password_hash(derived)) == derived
    assert passwords.matching(9, password_hash(OBJECT_LEDGER_PASSWORD)) == OBJECT_LEDGER_PASSWORD
    assert passwords.matching(9, password_hash(b"theirs")) == b"theirs"
    # Another ledger's password, another key's, or none known: no match.
    assert passwords.matching(9, password_hash(derive_ledger_password(KEY, 10))) is None
    assert passwords.matching(9, password_hash(derive_ledger_password(OTHER_KEY, 9))) is None
    assert LedgerPasswords(None).matching(9, password_hash(derived)) is None
    assert LedgerPasswords(None).matching(9, password_hash(b"")) is None


def test_what_was_tried_is_described_without_any_password() -> None:
    passwords = LedgerPasswords(KEY, foreign=(b"hunter2",))
    text = f"{passwords.describe()} {passwords!r}"
    assert KEY.key_id in text
    assert "hunter2" not in text
    assert derive_ledger_password(KEY, 1).hex() not in text
    assert base64.b64encode(KEY.key).decode() not in text
    assert LedgerPasswords(None).describe() == "the fixed password"


def test_the_key_comes_from_the_environment_and_a_broken_one_is_refused() -> None:
    text = base64.b64encode(KEY.key).decode()
    assert LedgerPasswords.from_env(environ={CLUSTER_KEY_ENV: text}).cluster_key == KEY
    assert LedgerPasswords.from_env(environ={}).derived is False
    with pytest.raises(UsageError):
        LedgerPasswords.from_env(environ={CLUSTER_KEY_ENV: "not base64!"})
    with pytest.raises(UsageError):
        LedgerPasswords.from_env(environ={CLUSTER_KEY_FILE_ENV: "/nonexistent/cluster.key"})
