"""Standalone's gateway settings: quorums that fit the bookies, one copy only on request,
the auditor and its replica check on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from blobstore.cli.standalone import check_gateway_settings, standalone_defaults
from blobstore.runtime.errors import UsageError
from tests.cluster.processes import blobstore_command


def test_three_bookies_keep_two_copies_and_audit() -> None:
    config = check_gateway_settings(standalone_defaults(3))
    assert (config.ensemble_size, config.write_quorum, config.ack_quorum) == (3, 2, 2)
    assert config.audit_interval_s > 0, "the auditor runs in the standalone gateway"
    assert 0 < config.replica_check.verify_interval_s <= 3600
    assert config.replica_check.repair
    two = check_gateway_settings(standalone_defaults(2))
    assert (two.ensemble_size, two.write_quorum, two.ack_quorum) == (2, 2, 2)


def test_one_bookie_needs_the_single_copy_opt_in() -> None:
    with pytest.raises(UsageError, match="--bookies 2 or more, or set BLOBSTORE_ALLOW_SINGLE"):
        check_gateway_settings(standalone_defaults(1))
    config = check_gateway_settings({**standalone_defaults(1), "BLOBSTORE_ALLOW_SINGLE_COPY": "1"})
    assert (config.ack_quorum, config.ack_quorum_min) == (1, 1)


def test_settings_given_win_over_the_defaults() -> None:
    environ = {"BLOBSTORE_AUDIT_VERIFY_PERCENT": "100", "BLOBSTORE_AUDIT_INTERVAL_S": "0"}
    config = check_gateway_settings({**standalone_defaults(3), **environ})
    assert (config.audit_verify_percent, config.audit_interval_s) == (100.0, 0.0)


def test_standalone_with_one_bookie_refuses_without_the_opt_in(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBSTORE_")}
    result = subprocess.run(
        blobstore_command("standalone", "--data-dir", str(tmp_path / "d"), "--bookies", "1"),
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
        env=env,
    )
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("blobstore: error: BLOBSTORE_ACK_QUORUM=1: "), lines[0]
    assert "BLOBSTORE_ALLOW_SINGLE_COPY=1" in lines[0], lines[0]
    assert not (tmp_path / "d" / "logs").exists(), "nothing started"
