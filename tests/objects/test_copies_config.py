"""The object layer's settings of acknowledged copies and of the auditor's replica check."""

from __future__ import annotations

import logging

import pytest

from blobstore.objects import ObjectStoreConfig
from blobstore.recovery.replica_verifier import ReplicaCheckSettings
from blobstore.runtime.errors import UsageError


def test_one_acknowledged_copy_needs_the_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(UsageError, match="BLOBSTORE_ACK_QUORUM=1: .*ALLOW_SINGLE_COPY=1"):
        ObjectStoreConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
    with pytest.raises(UsageError, match="BLOBSTORE_ALLOW_SINGLE_COPY=2: must be 0 or 1"):
        ObjectStoreConfig(allow_single_copy=2)
    assert ObjectStoreConfig().ack_quorum_min == 2
    assert "single_copy" not in caplog.text
    with caplog.at_level(logging.WARNING):
        config = ObjectStoreConfig.from_env(
            {"BLOBSTORE_ACK_QUORUM": "1", "BLOBSTORE_ALLOW_SINGLE_COPY": "1"}
        )
    assert (config.ack_quorum, config.ack_quorum_min) == (1, 1)
    assert "event=single_copy_allowed" in caplog.text


def test_replica_check_settings_read_like_the_others() -> None:
    assert ObjectStoreConfig().replica_check == ReplicaCheckSettings()
    config = ObjectStoreConfig.from_env(
        {
            "BLOBSTORE_AUDIT_VERIFY_INTERVAL_S": "60",
            "BLOBSTORE_AUDIT_VERIFY_PERCENT": "12.5",
            "BLOBSTORE_REPLICA_REPAIR": "0",
        }
    )
    assert config.replica_check == ReplicaCheckSettings(60.0, 12.5, repair=False)
    for name, value in [
        ("AUDIT_VERIFY_INTERVAL_S", "-1"),
        ("AUDIT_VERIFY_PERCENT", "101"),
        ("REPLICA_REPAIR", "2"),
    ]:
        with pytest.raises(UsageError, match=f"BLOBSTORE_{name}="):
            ObjectStoreConfig.from_env({f"BLOBSTORE_{name}": value})
