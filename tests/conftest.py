"""Session-wide fixtures: a real ZooKeeper server, a chroot per test, a bookie factory.

`BLOBSTORE_TEST_TLS=1` (`make test-tls`) runs them all over mutual TLS (tests/cluster/tls.py)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

import pytest
from kazoo.client import KazooClient

from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, start_zookeeper
from blobstore.runtime.ledger_tls import LedgerTls
from blobstore.runtime.pdeathsig import die_with_parent
from tests.cluster.processes import BookieProcess, ProcessReaper
from tests.cluster.tls import kazoo_client, tls_switch_on, turn_on_cluster_tls, zk_tls

ZK_TIMEOUT_S = 15.0


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (a CI job's timeout, `kill`) unwinds the run as Ctrl-C does: fixture
    # finalizers run, and the ZooKeeper servers, bookies and gateways the tests started
    # are stopped instead of being left running without a parent.
    signal.signal(signal.SIGTERM, _interrupted)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


def _dies_with(run_pid: int) -> None:
    die_with_parent(signal.SIGKILL, run_pid)


@pytest.fixture(scope="session", autouse=True)
def cluster_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerTls | None]:
    """The TLS switch: with BLOBSTORE_TEST_TLS=1, one CA and certificate for the session,
    named in the environment every process and client of the tests reads (the files);
    None when off."""
    if not tls_switch_on():
        yield None
        return
    with pytest.MonkeyPatch.context() as patch:
        settings: dict[str, str] = {}
        turn_on_cluster_tls(tmp_path_factory.mktemp("tls"), settings)
        for name, value in settings.items():
            patch.setenv(name, value)
        yield zk_tls()


@pytest.fixture(scope="session")
def zk_server(
    tmp_path_factory: pytest.TempPathFactory, cluster_tls: LedgerTls | None
) -> Iterator[ZooKeeperServer]:
    data_dir = tmp_path_factory.mktemp("zookeeper")
    run_pid = os.getpid()
    # The kernel kills the server with the run, even where the run stops before the
    # fixture holds it (a SIGTERM while Popen waits for the exec) or by kill -9.
    server = start_zookeeper(
        data_dir,
        free_port(),
        heap_mb=512,
        preexec_fn=lambda: _dies_with(run_pid),
        own_session=True,
        tls=cluster_tls,  # TLS only, when the switch is on
    )
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    """A connect string with a fresh chroot, so tests never see each other's znodes."""
    return zk_server.chroot(f"/t-{uuid.uuid4().hex[:12]}", ZK_TIMEOUT_S)


@pytest.fixture
def zk_client(zk_connect: str) -> Iterator[KazooClient]:
    client = kazoo_client(zk_connect, ZK_TIMEOUT_S)
    client.start(timeout=ZK_TIMEOUT_S)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def reaper(request: pytest.FixtureRequest) -> Iterator[ProcessReaper]:
    """Kills every child a test started, pass or fail; prints their logs on failure."""
    reaper = ProcessReaper()
    yield reaper
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    if failed:
        print(reaper.log_tails())
    reaper.reap_all()


BookieFactory = Callable[..., list[BookieProcess]]


@pytest.fixture
def bookies(zk_connect: str, reaper: ProcessReaper, tmp_path: Path) -> BookieFactory:
    """`bookies(n, extra_args=...)` starts n real bookie processes (all reaped at the end)."""
    started: list[BookieProcess] = []

    def start(count: int, extra_args: Sequence[str] = ()) -> list[BookieProcess]:
        new = []
        for _ in range(count):
            index = len(started)
            bookie = BookieProcess(
                index=index,
                zk=zk_connect,
                root=tmp_path / f"bookie-{index}",
                reaper=reaper,
                extra_args=tuple(extra_args),
            )
            started.append(bookie)
            new.append(bookie.start())
        return new

    return start
