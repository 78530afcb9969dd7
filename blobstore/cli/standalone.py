"""`blobstore standalone`: a whole cluster on this machine with one command.

Starts a local ZooKeeper, N bookies (separate processes, each with its own journal and
ledger directories) and the S3 gateway, prints the endpoint, the credentials and
ready-to-paste client snippets, then supervises them: a child that dies (ZooKeeper, a
bookie, the gateway) is started again after a backoff, with a line on the console, and
only a child caught in a crash loop stops the cluster (`supervision.py`). Ctrl-C or
SIGTERM stops every child in dependency order within STOP_TOTAL_S: the gateway first
(no request is cut between its last entry and its commit, and it does not wait on
bookies already gone), then the bookies, then ZooKeeper; a child past its share of the
time is killed. Restarting on the same data directory keeps every object:
ports and credentials chosen on the first start are kept in the data directory, so bookie
ids (and their cookies) stay the same.

Data directory layout::

    DATA/cluster.json          ports chosen on first start (ZooKeeper, bookies, admin ports)
    DATA/credentials.json      access and secret key (mode 0600), generated once
    DATA/cluster.key           the cluster key users' secrets are sealed under (mode 0600,
                               generated once; unless BLOBSTORE_CLUSTER_KEY[_FILE] is set)
    DATA/zookeeper/            ZooKeeper snapshots and logs
    DATA/bookie-N/journal/     bookie N's journal
    DATA/bookie-N/ledgers/     bookie N's entry logs and index
    DATA/logs/                 one log file per child; maintenance.log for every run
    DATA/maintenance-last.json the last maintenance run's JSON report
    DATA/maintenance.prom      its metrics (node_exporter textfile collector format)
    DATA/.lock                 held by the running supervisor (its pid inside)

Every child is started with PR_SET_PDEATHSIG so it dies with this process even when the
supervisor itself is killed with -9, and stays in this process group so `kill -9 -PGID`
takes the whole cluster down at once. Children ignore SIGINT and SIGHUP: a Ctrl-C (or a
closed terminal) reaches the whole foreground group, and the supervisor, not the
terminal, decides the order in which children stop (the gateway catches SIGINT itself
and starts its stop at once, which is the first step of that order anyway). One supervisor at a time holds a
lock on `DATA/.lock`; processes a supervisor killed alone left behind are stopped by the
next start (see `_reap_leftovers`).

A data directory that already holds more bookies than `--bookies` asks for starts all of
them: their entries are part of the cluster until they are decommissioned.

Maintenance (`blobstore maintain`: ledger GC, compaction, lifecycle expiration) runs
`--maintenance-interval` seconds after the cluster serves, then that long after each run
ends: one run at a time, as a child in a process group of its own (the driver and its
Spark JVM), killed whole when it runs past MAINTENANCE_RUN_S_MAX or the cluster stops.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import secrets
import signal
import string
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from blobstore.cli.maintenance_schedule import (
    MAINTENANCE_GRACE_S_DEFAULT,
    MAINTENANCE_INTERVAL_S_DEFAULT,
    MaintenanceRunner,
    MaintenanceSchedule,
    last_error_line,
    maintenance_schedule,
)
from blobstore.cli.supervision import Supervisor
from blobstore.cli.zookeeper_server import ZooKeeperServer, free_port, port_is_free, start_zookeeper
from blobstore.objects.config import ObjectStoreConfig
from blobstore.runtime.errors import UsageError, check_ready_file
from blobstore.runtime.ledger_tls import (
    LEDGER_TLS_DIR_ENV,
    ZK_TLS_DIR_ENV,
    ledger_tls_from_env,
    write_cluster_tls,
)
from blobstore.runtime.pdeathsig import die_with_parent
from blobstore.runtime.sealing import (
    CLUSTER_KEY_ENV,
    CLUSTER_KEY_FILE_ENV,
    load_cluster_key,
    write_cluster_key_file,
)
from blobstore.runtime.zk_auth import DIGEST_FILE_ENV, read_digest_file, write_digest_file

READY_TIMEOUT_S = 90.0
# How often the auditor checks the copies of closed ledgers (one cluster, one machine).
STANDALONE_VERIFY_INTERVAL_S = 3600.0
STOP_TIMEOUT_S = 30.0  # for processes of an earlier run (`_reap_leftovers`)
# A stop's whole budget, and the shares of the gateway and of ZooKeeper (the bookies get
# what the gateway leaves, less ZooKeeper's share).
STOP_TOTAL_S = 10.0
STOP_GATEWAY_S = 5.0
STOP_ZOOKEEPER_S = 2.0
# The gateway's own graceful stop, unless the environment sets it: inside its share.
GATEWAY_GRACEFUL_SHUTDOWN_S = 4
assert STOP_GATEWAY_S + STOP_ZOOKEEPER_S < STOP_TOTAL_S, "the bookies get some time too"
assert GATEWAY_GRACEFUL_SHUTDOWN_S < STOP_GATEWAY_S, "the gateway stops on its own"
# After an unclean stop, processes of the earlier run may still be exiting (their kernel
# teardown closes their sockets): a taken port is looked at again for this long.
PORT_RELEASE_WAIT_S = 5.0
CLUSTER_FORMAT_VERSION = 1
ZK_PORT_PREFERRED = 2181
ZOOKEEPER_HEAP_MB = 256


BOOKIES_MAX = 32
# Set in every child's environment to this cluster's data directory (see _reap_leftovers).
STANDALONE_ENV = "BLOBSTORE_STANDALONE_DATA_DIR"
TLS_DIR = "tls"  # DATA/tls: the CA and certificate of --ledger-tls and --zk-tls
ZK_DIGEST_FILE = "zk.digest"  # DATA/zk.digest: the --zk-auth credential (zk_auth_settings)


class _StopRequested(Exception):
    """SIGINT/SIGTERM/SIGHUP arrived while the cluster was still starting."""


def _die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGKILL this child when its parent dies, and leave
    SIGINT and SIGHUP (terminal gone) to the supervisor (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL)


def _reap_leftovers(data_dir: Path) -> int:
    """Kill processes a previous supervisor of this data directory left behind.

    Only possible when that supervisor was killed with -9 alone (not its whole group):
    its children die with it (PR_SET_PDEATHSIG), but that setting is not inherited by
    their own children, e.g. the gateway's worker processes, which would keep the S3
    port. Every process started for this data directory carries its path in
    STANDALONE_ENV; the data directory lock proves no live supervisor owns them.
    """
    marker = f"{STANDALONE_ENV}={data_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            found.append(int(entry))
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(_alive(pid) for pid in found) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(found)


def _port_released(host: str, port: int) -> bool:
    """Whether the port is free, allowing PORT_RELEASE_WAIT_S for the processes of an
    earlier run (the ones just reaped, or children still dying with their supervisor)
    to finish exiting."""
    deadline = time.monotonic() + PORT_RELEASE_WAIT_S
    while not port_is_free(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _lock_data_dir(data_dir: Path) -> int:
    """An exclusive lock on DATA/.lock for this process's lifetime (fd closed at exit)."""
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise UsageError(
            f"data directory {data_dir} is in use by another blobstore standalone (pid {holder})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


@dataclass
class ClusterLayout:
    format_version: int
    zk_port: int
    bookie_ports: list[int]
    bookie_http_ports: list[int]
    gateway_metrics_note: str = "gateway serves /metrics on its S3 port"
    extra: dict[str, object] = field(default_factory=dict)


def load_or_create_layout(
    data_dir: Path, bookie_count: int, zk_port: int | None = None
) -> ClusterLayout:
    """The ports kept in DATA/cluster.json (chosen and saved on the first start).

    `zk_port` (from --zk-port) overrides the saved ZooKeeper port: no id depends on it.
    """
    path = data_dir / "cluster.json"
    if path.exists():
        try:
            raw = json.loads(path.read_bytes())
            layout = ClusterLayout(**raw)
        except (OSError, TypeError, ValueError) as e:
            raise UsageError(f"broken data directory: {path} is not a cluster layout ({e})") from e
        if layout.format_version != CLUSTER_FORMAT_VERSION:
            raise UsageError(f"{path}: unknown format_version {layout.format_version}")
        if not (
            isinstance(layout.bookie_ports, list) and isinstance(layout.bookie_http_ports, list)
        ):
            raise UsageError(f"broken data directory: {path} holds invalid ports")
        ports = [layout.zk_port, *layout.bookie_ports, *layout.bookie_http_ports]
        if (
            len(layout.bookie_ports) != len(layout.bookie_http_ports)
            or not layout.bookie_ports
            or not all(isinstance(p, int) and 0 < p < 65536 for p in ports)
        ):
            raise UsageError(f"broken data directory: {path} holds invalid ports")
        if zk_port and zk_port != layout.zk_port:
            layout.zk_port = zk_port
            _write_json(path, asdict(layout))
        if len(layout.bookie_ports) < bookie_count:
            # Adding bookies to an existing cluster is fine: new ports for the new ones.
            for _ in range(bookie_count - len(layout.bookie_ports)):
                layout.bookie_ports.append(free_port())
                layout.bookie_http_ports.append(free_port())
            _write_json(path, asdict(layout))
        return layout
    if not zk_port:
        preferred_free = port_is_free("127.0.0.1", ZK_PORT_PREFERRED)
        zk_port = ZK_PORT_PREFERRED if preferred_free else free_port()
    layout = ClusterLayout(
        format_version=CLUSTER_FORMAT_VERSION,
        zk_port=zk_port,
        bookie_ports=[free_port() for _ in range(bookie_count)],
        bookie_http_ports=[free_port() for _ in range(bookie_count)],
    )
    _write_json(path, asdict(layout))
    return layout


def _write_json(path: Path, value: object, mode: int = 0o644) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_or_create_credentials(
    data_dir: Path, access_key: str | None, secret_key: str | None
) -> tuple[str, str]:
    """The data directory's credentials, kept in credentials.json: generated on the first
    start unless given, and given ones are kept too, so a later start without them
    still serves the buckets (they belong to the access key's user). A later start may
    give a new secret for the same access key; another access key is refused, since
    every existing bucket would answer its user AccessDenied."""
    if bool(access_key) != bool(secret_key):
        raise UsageError("give both --access-key and --secret-key, or neither")
    path = data_dir / "credentials.json"
    saved = _saved_credentials(path) if path.exists() else None
    if access_key and secret_key:
        if saved is not None and saved[0] != access_key:
            raise UsageError(
                f"{data_dir} belongs to access key {saved[0]} (its buckets are that user's): "
                "start it with that key, or without one"
            )
        if saved != (access_key, secret_key):
            _write_json(path, {"access_key": access_key, "secret_key": secret_key}, mode=0o600)
        return access_key, secret_key
    if saved is not None:
        return saved
    alphabet = string.ascii_uppercase + string.digits
    access_key = "BS" + "".join(secrets.choice(alphabet) for _ in range(18))
    secret_key = secrets.token_urlsafe(30)[:40]
    _write_json(path, {"access_key": access_key, "secret_key": secret_key}, mode=0o600)
    return access_key, secret_key


def _saved_credentials(path: Path) -> tuple[str, str]:
    try:
        raw = json.loads(path.read_bytes())
        access_key, secret_key = raw["access_key"], raw["secret_key"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"broken data directory: {path} is unreadable ({e})") from e
    if not (
        isinstance(access_key, str) and access_key and isinstance(secret_key, str) and secret_key
    ):
        raise UsageError(f"broken data directory: {path} holds no access key and secret key")
    return access_key, secret_key


def cluster_key_settings(data_dir: Path, environ: dict[str, str]) -> tuple[dict[str, str], str]:
    """(what the children's environment gets, where the key is) for the cluster key:
    the one the environment gives (BLOBSTORE_CLUSTER_KEY_FILE or BLOBSTORE_CLUSTER_KEY),
    else DATA/cluster.key, created on the first start (mode 0600) and kept: the users'
    secrets kept in ZooKeeper open only with it. UsageError when it is malformed."""
    if environ.get(CLUSTER_KEY_FILE_ENV) or environ.get(CLUSTER_KEY_ENV):
        load_cluster_key(environ=environ)  # checked now, not in every child
        if environ.get(CLUSTER_KEY_ENV):
            return {}, f"${CLUSTER_KEY_ENV}"
        return {}, environ[CLUSTER_KEY_FILE_ENV]
    path = data_dir / "cluster.key"
    if not path.exists():
        write_cluster_key_file(path)
    load_cluster_key(path)
    return {CLUSTER_KEY_FILE_ENV: str(path)}, str(path)


def zk_auth_settings(
    data_dir: Path, requested: bool, environ: MutableMapping[str, str]
) -> Path | None:
    """The digest credential file of the cluster's ZooKeeper sessions, set in `environ`
    for this process and every child (blobstore.runtime.zk_auth); None: no ZooKeeper
    auth. BLOBSTORE_ZK_DIGEST_FILE when set, else DATA/zk.digest: created by the first
    start with --zk-auth, then used by every later start (the znodes are ACL'd to it).
    UsageError when it is malformed."""
    given = environ.get(DIGEST_FILE_ENV)
    path = Path(given) if given else data_dir / ZK_DIGEST_FILE
    if not given and not path.exists():
        if not requested:
            return None
        write_digest_file(path)
    read_digest_file(path)  # checked now, not in every child
    environ[DIGEST_FILE_ENV] = str(path)
    return path


def tls_settings(
    data_dir: Path, requested: bool, variable: str, environ: MutableMapping[str, str]
) -> Path | None:
    """The mutual-TLS files (blobstore.runtime.ledger_tls) of the traffic `variable` names
    (BLOBSTORE_LEDGER_TLS_DIR: ledger client <-> bookies; BLOBSTORE_ZK_TLS_DIR: sessions
    <-> ZooKeeper), set in `environ` for this process and every child; None: plain TCP.
    The variable's directory when set, else DATA/tls when asked for (--ledger-tls,
    --zk-tls): a CA and one certificate for every process, made by the first start that
    asks and kept."""
    given = environ.get(variable)
    if not given and not requested:
        return None
    path = Path(given) if given else data_dir / TLS_DIR
    if not given and not (path / "ca.crt").exists():
        write_cluster_tls(path)
    environ[variable] = str(path)
    tls = ledger_tls_from_env(environ, variable)
    assert tls is not None
    tls.server_context()  # checked now, not in every child
    return path


class Child:
    """A supervised child process with a ready file (`supervision.SupervisedProcess`)."""

    def __init__(
        self,
        name: str,
        command: list[str],
        log_path: Path,
        env: dict[str, str],
        ready_file: Path,
    ) -> None:
        self.name = name
        self.command = command
        self.log_path = log_path
        self.env = env
        self.ready_file = ready_file
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.ready_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, no locks
            )

    def restart(self) -> None:
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"--- blobstore standalone: restarting {self.name}\n".encode())
        self.start()

    def ready(self) -> bool:
        return self.ready_file.exists()

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                try:
                    return dict(json.loads(self.ready_file.read_text()))
                except json.JSONDecodeError:
                    pass
            if self.process is None or self.process.poll() is not None:
                raise UsageError(
                    f"{self.name} failed to start: {self.last_error_line()} (log: {self.log_path})"
                )
            time.sleep(0.05)
        raise UsageError(f"{self.name} not ready within {timeout_s:.0f}s (log: {self.log_path})")

    def last_error_line(self) -> str:
        try:
            return last_error_line(self.log_path.read_text(errors="replace"))
        except FileNotFoundError:
            return "no log"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> None:
        """Wait for it to exit; killed (and a line printed) when it is not done in time."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            print(f"{self.name} did not stop in time: killed", flush=True)
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)


class _ZooKeeperChild:
    """The ZooKeeper server as a supervised child: a restart starts a new server on the
    same directory and port, and returns once it serves."""

    name = "ZooKeeper"

    def __init__(self, server: ZooKeeperServer, enforce_auth: bool = False) -> None:
        self.server = server
        self.enforce_auth = enforce_auth  # a restart serves as the first start did
        self.log_path = server.data_dir / "zookeeper.log"

    def alive(self) -> bool:
        return self.server.process.poll() is None

    def exit_code(self) -> int | None:
        return self.server.process.poll()

    def last_error_line(self) -> str:
        try:
            return last_error_line(self.log_path.read_text(errors="replace"))
        except FileNotFoundError:
            return "no log"

    def restart(self) -> None:
        """A server that fails to start counts as one more exit (its process is gone)."""
        try:
            self.server = start_zookeeper(
                self.server.data_dir,
                self.server.port,
                heap_mb=ZOOKEEPER_HEAP_MB,
                preexec_fn=_die_with_parent,
                enforce_auth=self.enforce_auth,
                tls=self.server.tls,
            )
        except UsageError as e:
            print(f"blobstore: warning: ZooKeeper did not start again: {e}", file=sys.stderr)

    def ready(self) -> bool:
        return True  # `restart` returns once it serves


def _python_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "blobstore.cli", *args]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("./data"),
        help="where everything is kept (default ./data)",
    )
    parser.add_argument("--bookies", type=int, default=3, help="number of bookies (default 3)")
    parser.add_argument("--host", default="127.0.0.1", help="gateway address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9000, help="gateway port (default 9000)")
    parser.add_argument(
        "--workers", type=int, default=1, help="gateway worker processes (default 1)"
    )
    parser.add_argument(
        "--zk-port",
        type=int,
        help="ZooKeeper client port (default: kept in the data dir; first start 2181 if free)",
    )
    parser.add_argument(
        "--access-key",
        default=os.environ.get("BLOBSTORE_ACCESS_KEY"),
        help="access key (env BLOBSTORE_ACCESS_KEY; generated once when absent)",
    )
    parser.add_argument(
        "--secret-key",
        default=os.environ.get("BLOBSTORE_SECRET_KEY"),
        help="secret key (env BLOBSTORE_SECRET_KEY)",
    )
    parser.add_argument(
        "--ready-file", type=Path, help="write JSON {endpoint, zk, access_key} here once serving"
    )
    parser.add_argument(
        "--zk-auth",
        action="store_true",
        help="ZooKeeper digest authentication: ZooKeeper refuses sessions without the "
        f"credential, every znode is ACL'd to it (DATA/{ZK_DIGEST_FILE}, made once and kept; "
        f"or env {DIGEST_FILE_ENV})",
    )
    parser.add_argument(
        "--ledger-tls",
        action="store_true",
        help="mutual TLS between the ledger client and the bookies, with a CA and "
        f"certificate made once in DATA/{TLS_DIR} and kept (or env {LEDGER_TLS_DIR_ENV})",
    )
    parser.add_argument(
        "--zk-tls",
        action="store_true",
        help="ZooKeeper serves mutual TLS only, with the certificate of DATA/"
        f"{TLS_DIR} (or env {ZK_TLS_DIR_ENV})",
    )
    parser.add_argument(
        "--maintenance-interval",
        type=float,
        metavar="SECONDS",
        help="run `blobstore maintain` this long after the cluster serves and after each run "
        "ends; 0: never (env BLOBSTORE_MAINTENANCE_INTERVAL_S; default "
        f"{MAINTENANCE_INTERVAL_S_DEFAULT:g})",
    )
    parser.add_argument(
        "--maintenance-grace",
        type=float,
        metavar="SECONDS",
        help="the runs' --grace: how long an unreferenced ledger stays condemned before it "
        "is deleted; 0: a run looks twice and deletes (env BLOBSTORE_MAINTENANCE_GRACE_S; "
        f"default {MAINTENANCE_GRACE_S_DEFAULT:g})",
    )


def _check_data_dir(data_dir: Path) -> None:
    if data_dir.exists() and not data_dir.is_dir():
        raise UsageError(f"broken data directory: {data_dir} is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"data directory {data_dir} is not writable: {e.strerror}") from e
    for name in ("zookeeper", "logs"):
        path = data_dir / name
        if path.exists() and not path.is_dir():
            raise UsageError(f"broken data directory: {path} is not a directory")


def _bookie_child(
    index: int, layout: ClusterLayout, data_dir: Path, zk: str, env: dict[str, str]
) -> Child:
    root = data_dir / f"bookie-{index}"
    if root.exists() and not root.is_dir():
        raise UsageError(f"broken data directory: {root} is not a directory")
    return Child(
        f"bookie-{index}",
        _python_cli(
            "bookie",
            "--zk",
            zk,
            "--host",
            "127.0.0.1",
            "--port",
            str(layout.bookie_ports[index]),
            "--http-port",
            str(layout.bookie_http_ports[index]),
            "--journal-dir",
            str(root / "journal"),
            "--ledger-dir",
            str(root / "ledgers"),
            "--ready-file",
            str(root / "ready.json"),
        ),
        data_dir / "logs" / f"bookie-{index}.log",
        env,
        root / "ready.json",
    )


def standalone_defaults(bookie_count: int) -> dict[str, str]:
    """Settings of the gateway that differ from its defaults here (each unless set):
    fewer bookies than the default E3/W2/A2 needs shrink the quorums (one bookie: AQ 1,
    which the gateway refuses without BLOBSTORE_ALLOW_SINGLE_COPY=1); the auditor checks
    every closed ledger's copies hourly (first and last entry of each segment: a copy
    gone is found within the hour) and repairs them (the bookies' scrubbers read all)."""
    return {
        "BLOBSTORE_ENSEMBLE_SIZE": str(min(3, bookie_count)),
        "BLOBSTORE_WRITE_QUORUM": str(min(2, bookie_count)),
        "BLOBSTORE_ACK_QUORUM": str(min(2, bookie_count)),
        "BLOBSTORE_AUDIT_INTERVAL_S": "60",
        "BLOBSTORE_AUDIT_VERIFY_INTERVAL_S": str(STANDALONE_VERIFY_INTERVAL_S),
        "BLOBSTORE_AUDIT_VERIFY_PERCENT": "0",
        "BLOBSTORE_REPLICA_REPAIR": "1",
    }


def check_gateway_settings(env: Mapping[str, str]) -> ObjectStoreConfig:
    """The gateway's object settings as the children will read them, checked before
    anything starts: a bad one (or AQ 1 without the opt-in) is one clear line, not a
    gateway that fails to start. With BLOBSTORE_ALLOW_SINGLE_COPY=1 a WARNING says so."""
    try:
        return ObjectStoreConfig.from_env(env)
    except UsageError as e:
        if env.get("BLOBSTORE_ACK_QUORUM") == "1" and "ALLOW_SINGLE_COPY" in str(e):
            raise UsageError(
                f"{e} (one bookie keeps one copy of each object: run --bookies 2 or more, "
                "or set BLOBSTORE_ALLOW_SINGLE_COPY=1 to accept losing objects with it)"
            ) from None
        raise


def _child_env(zk: str, access_key: str, secret_key: str, bookie_count: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "BLOBSTORE_ZK": zk,
            "BLOBSTORE_ACCESS_KEY": access_key,
            "BLOBSTORE_SECRET_KEY": secret_key,
            "PYTHONUNBUFFERED": "1",
        }
    )
    for name, value in standalone_defaults(bookie_count).items():
        env.setdefault(name, value)
    # The gateway's graceful stop fits in its share of the cluster's stop (STOP_TOTAL_S).
    env.setdefault("BLOBSTORE_GATEWAY_GRACEFUL_SHUTDOWN_S", str(GATEWAY_GRACEFUL_SHUTDOWN_S))
    return env


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.bookies <= BOOKIES_MAX:
        raise UsageError(f"--bookies must be 1..{BOOKIES_MAX}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a TCP port")
    if args.zk_port is not None and not 0 < args.zk_port <= 65535:
        raise UsageError(f"--zk-port {args.zk_port} is not a TCP port")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if bool(args.access_key) != bool(args.secret_key):
        raise UsageError("give both --access-key and --secret-key, or neither")
    check_ready_file(args.ready_file)
    schedule = maintenance_schedule(args.maintenance_interval, args.maintenance_grace, os.environ)
    data_dir: Path = args.data_dir.resolve()
    _check_data_dir(data_dir)
    lock_fd = _lock_data_dir(data_dir)
    try:
        return _run_locked(args, data_dir, schedule)
    finally:
        os.close(lock_fd)


def _run_locked(args: argparse.Namespace, data_dir: Path, schedule: MaintenanceSchedule) -> int:
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # Progress goes to stdout as plain lines; stderr is kept for the one error line.
        logging.getLogger("blobstore.cli.zookeeper_server").setLevel(logging.WARNING)
    layout, bookie_count = _claim_ports(args, data_dir)
    check_gateway_settings({**standalone_defaults(bookie_count), **os.environ})
    access_key, secret_key = load_or_create_credentials(data_dir, args.access_key, args.secret_key)
    key_env, key_place = cluster_key_settings(data_dir, dict(os.environ))
    zk_digest = zk_auth_settings(data_dir, args.zk_auth, os.environ)
    ledger_tls = tls_settings(data_dir, args.ledger_tls, LEDGER_TLS_DIR_ENV, os.environ)
    zk_tls = tls_settings(data_dir, args.zk_tls, ZK_TLS_DIR_ENV, os.environ)
    _check_kept_ports(layout, bookie_count, data_dir)
    signals = _StopSignals()
    (data_dir / "logs").mkdir(exist_ok=True)
    cluster = _Cluster()
    maintenance: MaintenanceRunner | None = None
    try:
        zk = cluster.start_zookeeper(
            data_dir, layout.zk_port, enforce_auth=zk_digest is not None, tls=zk_tls
        )
        env = {**_child_env(zk, access_key, secret_key, bookie_count), **key_env}
        cluster.start_bookies(layout, bookie_count, data_dir, zk, env)
        endpoint = cluster.start_gateway(args, data_dir, zk, env)
        maintenance = MaintenanceRunner(schedule, data_dir, zk, env)
        _print_banner(
            endpoint,
            zk,
            (access_key, secret_key),
            key_place,
            data_dir,
            maintenance.describe(),
            zk_digest,
            (ledger_tls, zk_tls),
        )
        if args.ready_file:
            _write_json(args.ready_file.resolve(), cluster.ready_document(endpoint, zk, access_key))
        signals.starting = False
        if signals.stopping:  # a signal raced with the line above
            return 0
        assert cluster.zookeeper is not None
        return _supervise(
            Supervisor([cluster.zookeeper, *cluster.children]),
            lambda: signals.stopping,
            maintenance.tick,
        )
    except _StopRequested:
        return 0
    finally:
        signals.starting = False
        if maintenance is not None:
            maintenance.stop()  # first: it works through the bookies and ZooKeeper
        _stop_all(cluster.children, cluster.zookeeper.server if cluster.zookeeper else None)
        if signals.stopping:
            print("stopped", flush=True)


def _claim_ports(args: argparse.Namespace, data_dir: Path) -> tuple[ClusterLayout, int]:
    """Stop what an earlier run left behind, check the ports asked for, and load the
    layout: (layout, how many bookies to start)."""
    reaped = _reap_leftovers(data_dir)
    if reaped:
        print(f"note: stopped {reaped} processes left by an earlier run on {data_dir}")
    os.environ[STANDALONE_ENV] = str(data_dir)  # inherited by every child, ZooKeeper too
    if args.port and not _port_released(args.host, args.port):
        raise UsageError(f"port {args.host}:{args.port} for the gateway is already in use")
    if args.zk_port and not _port_released("127.0.0.1", args.zk_port):
        # Checked before it is kept in cluster.json, where a later start would find it.
        raise UsageError(f"--zk-port {args.zk_port}: 127.0.0.1:{args.zk_port} is already in use")
    layout = load_or_create_layout(data_dir, args.bookies, args.zk_port)
    bookie_count = max(args.bookies, len(layout.bookie_ports))
    if bookie_count > args.bookies:
        print(
            f"note: {data_dir} holds {bookie_count} bookies; starting all of them "
            "(decommission one before dropping it)",
            flush=True,
        )
    return layout, bookie_count


def _check_kept_ports(layout: ClusterLayout, bookie_count: int, data_dir: Path) -> None:
    for port in [
        layout.zk_port,
        *layout.bookie_ports[:bookie_count],
        *layout.bookie_http_ports[:bookie_count],
    ]:
        if not _port_released("127.0.0.1", port):
            raise UsageError(
                f"port 127.0.0.1:{port} (kept in {data_dir / 'cluster.json'}) is already in use"
            )


class _StopSignals:
    """SIGTERM, SIGINT and SIGHUP, handled from creation on: they set `stopping`, and
    while the cluster is `starting` also interrupt the start (`_StopRequested`)."""

    def __init__(self) -> None:
        self.stopping = False
        self.starting = True
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._request_stop)

    def _request_stop(self, signum: int, _frame: object) -> None:
        self.stopping = True
        if self.starting:
            raise _StopRequested()


class _Cluster:
    """The children started so far, in start order (gateway last), and ZooKeeper: what
    `_stop_all` stops, however far the start got."""

    def __init__(self) -> None:
        self.zookeeper: _ZooKeeperChild | None = None
        self.children: list[Child] = []

    def start_zookeeper(
        self, data_dir: Path, zk_port: int, enforce_auth: bool = False, tls: Path | None = None
    ) -> str:
        """Start ZooKeeper; its connect string. `enforce_auth`: it refuses sessions
        without the digest credential (--zk-auth); `tls`: it serves mutual TLS only, with
        the files of that directory (--zk-tls)."""
        print(f"starting ZooKeeper on 127.0.0.1:{zk_port} ...", flush=True)
        server = start_zookeeper(
            data_dir / "zookeeper",
            zk_port,
            heap_mb=ZOOKEEPER_HEAP_MB,
            preexec_fn=_die_with_parent,
            enforce_auth=enforce_auth,
            tls=None
            if tls is None
            else ledger_tls_from_env({ZK_TLS_DIR_ENV: str(tls)}, ZK_TLS_DIR_ENV),
        )
        self.zookeeper = _ZooKeeperChild(server, enforce_auth)
        return f"127.0.0.1:{zk_port}"

    def start_bookies(
        self,
        layout: ClusterLayout,
        bookie_count: int,
        data_dir: Path,
        zk: str,
        env: dict[str, str],
    ) -> None:
        """Start every bookie, then wait for each to be ready."""
        for index in range(bookie_count):
            child = _bookie_child(index, layout, data_dir, zk, env)
            self.children.append(child)
            child.start()
        for index, child in enumerate(self.children):
            child.wait_ready()
            print(
                f"bookie-{index} ready on 127.0.0.1:{layout.bookie_ports[index]} "
                f"(metrics http://127.0.0.1:{layout.bookie_http_ports[index]}/metrics)",
                flush=True,
            )

    def start_gateway(
        self, args: argparse.Namespace, data_dir: Path, zk: str, env: dict[str, str]
    ) -> str:
        """Start the gateway and wait for it to be ready; its endpoint."""
        gateway = _gateway_child(args, data_dir, zk, env, data_dir / "gateway-ready.json")
        self.children.append(gateway)
        gateway.start()
        ready = gateway.wait_ready()
        port = int(str(ready.get("port") or args.port))
        # A restart binds the port this start got (`--port 0` picks one only once).
        gateway.command[gateway.command.index("--port") + 1] = str(port)
        return _endpoint(args.host, port)

    def ready_document(self, endpoint: str, zk: str, access_key: str) -> dict[str, object]:
        """What --ready-file gets once the cluster serves."""
        assert self.zookeeper is not None
        return {
            "endpoint": endpoint,
            "zk": zk,
            "access_key": access_key,
            "pid": os.getpid(),
            "child_pids": [c.process.pid for c in self.children if c.process]
            + [self.zookeeper.server.process.pid],
        }


def _gateway_child(
    args: argparse.Namespace, data_dir: Path, zk: str, env: dict[str, str], ready_file: Path
) -> Child:
    return Child(
        "gateway",
        _python_cli(
            "gateway",
            "--zk",
            zk,
            "--host",
            args.host,
            "--port",
            str(args.port),
            "--workers",
            str(args.workers),
            "--ready-file",
            str(ready_file),
        ),
        data_dir / "logs" / "gateway.log",
        env,
        ready_file,
    )


def _endpoint(host: str, port: int) -> str:
    """The gateway's URL as clients on this machine reach it (a wildcard address is
    shown as 127.0.0.1)."""
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://{shown_host}:{port}"


def _supervise(
    supervisor: Supervisor, stop_requested: Callable[[], bool], tick: Callable[[], None]
) -> int:
    """Run until a stop request (0) or a child given up on (1), restarting children that
    exit and calling `tick` (the maintenance schedule) on every turn."""
    while not stop_requested():
        tick()
        reason = supervisor.poll()
        if reason is not None:
            print(f"blobstore: error: {reason}", file=sys.stderr, flush=True)
            return 1
        time.sleep(0.2)
    print("stopping ...", flush=True)
    return 0


def _stop_all(children: list[Child], zookeeper: ZooKeeperServer | None) -> None:
    """In dependency order, within STOP_TOTAL_S: the gateway (no new writes; it needs the
    bookies and ZooKeeper to finish what it has), then the bookies together, then
    ZooKeeper. Each step that is not done in its time is killed."""
    started = time.monotonic()
    gateways = [child for child in children if child.name == "gateway"]
    bookies = [child for child in children if child.name != "gateway"]
    for gateway in gateways:
        gateway.terminate()
        gateway.wait(STOP_GATEWAY_S)
        _stopped(gateway.name, started)
    for bookie in bookies:
        bookie.terminate()
    bookies_deadline = started + STOP_TOTAL_S - STOP_ZOOKEEPER_S
    for bookie in bookies:
        bookie.wait(bookies_deadline - time.monotonic())
        _stopped(bookie.name, started)
    if zookeeper is not None:
        zookeeper.stop(timeout_s=max(STOP_TOTAL_S - (time.monotonic() - started), 0.5))
        _stopped("ZooKeeper", started)


def _stopped(name: str, started: float) -> None:
    print(f"{name} stopped after {time.monotonic() - started:.1f}s", flush=True)


def _print_banner(
    endpoint: str,
    zk: str,
    credentials: tuple[str, str],
    cluster_key: str,
    data_dir: Path,
    maintenance: str,
    zk_digest: Path | None = None,
    tls: tuple[Path | None, Path | None] = (None, None),
) -> None:
    access_key, secret_key = credentials
    key_setting = (
        f"{CLUSTER_KEY_FILE_ENV}={cluster_key} " if not cluster_key.startswith("$") else ""
    )
    zk_setting = f"BLOBSTORE_ZK={zk}" + (
        f" {DIGEST_FILE_ENV}={zk_digest}" if zk_digest is not None else ""
    )
    zk_line = f"{zk}      data: {data_dir}" + (
        f"\n  ZooKeeper auth: digest, credential in {zk_digest} (every znode is ACL'd to it)"
        if zk_digest is not None
        else ""
    )
    for name, variable, path in zip(
        ("ledger", "ZooKeeper"), (LEDGER_TLS_DIR_ENV, ZK_TLS_DIR_ENV), tls, strict=True
    ):
        if path is not None:
            zk_line += f"\n  {name} TLS: mutual, CA and certificate in {path}"
            zk_setting += f" {variable}={path}"
    print(
        f"""
blobstore is serving S3 at {endpoint}
  access key:  {access_key}   (the admin user)
  secret key:  {secret_key}
  ZooKeeper:   {zk_line}
  cluster key: {cluster_key}   (keep it: ledger passwords, encryption and users' secrets depend on it)

boto3:
  import boto3
  s3 = boto3.client("s3", endpoint_url="{endpoint}", region_name="us-east-1",
                    aws_access_key_id="{access_key}", aws_secret_access_key="{secret_key}")
  s3.create_bucket(Bucket="demo"); s3.put_object(Bucket="demo", Key="hello", Body=b"hi")

AWS CLI:
  export AWS_ACCESS_KEY_ID={access_key} AWS_SECRET_ACCESS_KEY={secret_key} AWS_DEFAULT_REGION=us-east-1
  aws --endpoint-url {endpoint} s3 mb s3://demo && aws --endpoint-url {endpoint} s3 ls

operator:
  {zk_setting} blobstore admin bookies
  {zk_setting} blobstore admin maintenance status
  {zk_setting} {key_setting}blobstore admin user add alice --policy readwrite

{maintenance}

Ctrl-C stops everything; data stays in {data_dir}.
""",
        flush=True,
    )
