"""`blobstore gateway`: serve the S3 API over HTTP(S) on uvicorn (uvloop + httptools).

With one worker the server runs in this process on a socket bound here (port 0 picks a
free port). With `--workers N` the supervisor of `s3api.supervisor` reserves the port
and runs N workers, each listening on its own SO_REUSEPORT socket, and restarts any
that dies. The first worker whose object store is up writes the ready file (JSON
{"port", "scheme", "pid"}, renamed into place).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import tempfile
from typing import TYPE_CHECKING

from blobstore.runtime.errors import UsageError, check_ready_file
from s3api.config import CONFIG_ENV, GatewayConfig, config_from_args

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger(__name__)


class _FromEnvironment(str):
    """An option's default taken from an environment variable (argparse hands a string
    default to the option's `type`, which then knows where a bad value came from)."""

    variable: str


def _env_default(variable: str, default: str) -> str:
    value = os.environ.get(variable)
    if value is None:
        return default
    marked = _FromEnvironment(value)
    marked.variable = variable
    return marked


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        source = f" (from {text.variable})" if isinstance(text, _FromEnvironment) else ""
        raise argparse.ArgumentTypeError(f"{text!r}{source} is not an integer") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zk",
        default=os.environ.get("BLOBSTORE_ZK"),
        help="ZooKeeper connect string host:port[/chroot] (env BLOBSTORE_ZK)",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("BLOBSTORE_GATEWAY_HOST", "127.0.0.1"),
        help="address to listen on (env BLOBSTORE_GATEWAY_HOST; default 127.0.0.1)",
    )
    # String defaults go through `type`, so a bad variable is a one-line usage error.
    parser.add_argument(
        "--port",
        type=_integer,
        default=_env_default("BLOBSTORE_GATEWAY_PORT", "9000"),
        help="port (env BLOBSTORE_GATEWAY_PORT; default 9000; 0: any free port)",
    )
    parser.add_argument(
        "--workers",
        type=_integer,
        default=_env_default("BLOBSTORE_GATEWAY_WORKERS", "1"),
        help="worker processes (default 1)",
    )
    parser.add_argument(
        "--tls-cert",
        default=os.environ.get("BLOBSTORE_TLS_CERT"),
        help="PEM certificate chain: serve HTTPS (env BLOBSTORE_TLS_CERT; with --tls-key)",
    )
    parser.add_argument(
        "--tls-key",
        default=os.environ.get("BLOBSTORE_TLS_KEY"),
        help="PEM private key of --tls-cert (env BLOBSTORE_TLS_KEY)",
    )
    parser.add_argument(
        "--domain",
        default=os.environ.get("BLOBSTORE_GATEWAY_DOMAIN", ""),
        help="virtual-hosted-style base domain, e.g. s3.localhost (default: path-style only)",
    )
    parser.add_argument(
        "--region",
        default=os.environ.get("BLOBSTORE_REGION", "us-east-1"),
        help="region of buckets created without a LocationConstraint (signatures may name any)",
    )
    parser.add_argument(
        "--users-file",
        default=os.environ.get("BLOBSTORE_USERS_FILE"),
        help='JSON list of {"access_key", "secret_key", "user"}',
    )
    parser.add_argument(
        "--max-header-bytes",
        type=_integer,
        default=_env_default("BLOBSTORE_MAX_HEADER_BYTES", "8192"),
        help="largest request header section accepted; a larger one gets 400 "
        "RequestHeaderSectionTooLarge (env BLOBSTORE_MAX_HEADER_BYTES; default 8192, "
        "S3's bound; 4096..1048576)",
    )
    parser.add_argument("--ready-file", help="write JSON {port} here once serving")
    parser.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("BLOBSTORE_ACCESS_LOG", "1").lower() not in ("0", "false", "no"),
        help="log one line per request at INFO: request id, operation, path, status, "
        "bytes, duration (default on; env BLOBSTORE_ACCESS_LOG=0 turns it off)",
    )


METRICS_DIR_PREFIX = "blobstore-gateway-metrics-"


def remove_stale_metrics_dirs(directory: str) -> int:
    """Remove the private metrics directories of gateways that are gone (named after
    the supervisor's pid; one killed with -9 could not remove its own). Returns how many."""
    removed = 0
    for entry in os.scandir(directory):
        if not entry.name.startswith(METRICS_DIR_PREFIX) or not entry.is_dir():
            continue
        pid_text = entry.name[len(METRICS_DIR_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or _process_alive(int(pid_text)):
            continue  # an older unnamed one, or its gateway still runs
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    if removed:
        logger.info("event=gateway_stale_metrics_dirs_removed count=%d", removed)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _check_before_workers(config: GatewayConfig) -> None:
    """What each worker reads at its start (the ZooKeeper address, the catalog's, ledgers'
    and ZooKeeper's variables, the ready file's directory), read once here first: a bad
    value is one line from the command, not a traceback from a worker's startup."""
    from blobstore.catalog.config import CatalogConfig
    from blobstore.ledger.config import LedgerConfig
    from blobstore.ledger.errors import BadLedgerConfigError
    from blobstore.runtime.zk_session import parse_hosts, request_bytes_max_from_env

    try:
        parse_hosts(config.zk)
        CatalogConfig.from_env()
        LedgerConfig.from_env()
        request_bytes_max_from_env()
    except (ValueError, BadLedgerConfigError) as e:
        raise UsageError(str(e)) from None
    check_ready_file(config.ready_file)


def run(args: argparse.Namespace) -> int:
    if not __debug__:
        raise UsageError("the gateway refuses to run with assertions disabled (-O)")
    config = config_from_args(args)
    _check_before_workers(config)
    private_metrics_dir = _private_metrics_dir(config)
    sock = _bound_socket(config)
    port = sock.getsockname()[1]
    os.environ[CONFIG_ENV] = config.to_json()
    os.environ["BLOBSTORE_GATEWAY_BOUND_PORT"] = str(port)
    uvicorn_config = _uvicorn_config(config, port)
    logger.info(
        "event=gateway_starting address=%s://%s:%d workers=%d zk=%s",
        config.scheme,
        config.host,
        port,
        config.workers,
        config.zk,
    )
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; with these handlers
    # installed first, that re-raise lands here and a requested stop exits 0.
    stop_signals: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: stop_signals.append(received))
    try:
        status = _serve(config, uvicorn_config, sock, port, stop_signals)
    finally:
        sock.close()
        if private_metrics_dir:
            shutil.rmtree(private_metrics_dir, ignore_errors=True)
    if status:
        return status
    if stop_signals:
        logger.info("event=gateway_stopped signal=%d", stop_signals[0])
    return 0


def _private_metrics_dir(config: GatewayConfig) -> str | None:
    """The metrics directory this gateway's workers share, created here when there are
    several workers and the environment names none; the caller removes it."""
    if config.workers == 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    remove_stale_metrics_dirs(tempfile.gettempdir())
    directory = tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    return directory


def _bound_socket(config: GatewayConfig) -> socket.socket:
    """The gateway's socket: listening with one worker; with several, it only reserves
    the port and each worker listens on its own."""
    from s3api.supervisor import bound_socket

    try:
        sock = bound_socket(config.host, config.port, reuse_port=config.workers > 1)
    except OSError as e:
        raise UsageError(f"cannot listen on {config.host}:{config.port}: {e.strerror}") from None
    if config.workers == 1:
        sock.listen(config.backlog)
    return sock


def _uvicorn_config(config: GatewayConfig, port: int) -> uvicorn.Config:
    import uvicorn

    return uvicorn.Config(
        "s3api.app:create_app",
        factory=True,
        host=config.host,
        port=port,
        loop="uvloop",
        http="s3api.http_protocol:GatheringHttpToolsProtocol",
        ws="none",
        lifespan="on",
        workers=config.workers,
        limit_concurrency=config.limit_concurrency,
        timeout_graceful_shutdown=config.timeout_graceful_shutdown_s,
        timeout_keep_alive=config.timeout_keep_alive_s,
        backlog=config.backlog,
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        log_config=None,
    )


def _serve(
    config: GatewayConfig,
    uvicorn_config: uvicorn.Config,
    sock: socket.socket,
    port: int,
    stop_signals: list[int],
) -> int:
    """Serve until stopped: in this process with one worker, else from a supervisor of
    worker processes (the signal that stopped it goes to `stop_signals`). Returns the
    exit status."""
    import uvicorn

    from s3api.supervisor import Supervisor

    if config.workers > 1:
        supervisor = Supervisor(uvicorn_config, config.host, port, config.workers)
        status = supervisor.run()
        if supervisor.stop_signal is not None:
            stop_signals.append(supervisor.stop_signal)
        return status
    server = uvicorn.Server(uvicorn_config)
    server.run(sockets=[sock])
    return 0 if server.started else 1
