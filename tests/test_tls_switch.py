"""The suite's TLS switch (tests/cluster/tls.py, `make test-tls`) cannot rot unseen: a
pytest run with BLOBSTORE_TEST_TLS=1 of tests/tls_switch_probe.py, whose fixture-started
ZooKeeper and bookies refuse plain TCP and whose gateway serves S3 over them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.tls import TEST_TLS_ENV, tls_switch_on

PROBE = Path(__file__).with_name("tls_switch_probe.py")
REPOSITORY = Path(__file__).parent.parent


def test_the_switch_reads_one_variable() -> None:
    assert tls_switch_on({TEST_TLS_ENV: "1"})
    assert not tls_switch_on({TEST_TLS_ENV: "0"})
    assert not tls_switch_on({})
    with pytest.raises(ValueError, match="BLOBSTORE_TEST_TLS='yes'"):
        tls_switch_on({TEST_TLS_ENV: "yes"})


def test_fixtures_under_the_switch_speak_mutual_tls_only(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"),
            *("-m", "not soak", f"--basetemp={tmp_path / 'probe'}", str(PROBE)),
        ],
        cwd=REPOSITORY,
        env={**os.environ, TEST_TLS_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout, run.stdout[-2000:]
