"""`blobstore autorecovery`: the bookie auditor as a process of its own (BookKeeper's
autorecovery daemon).

Every gateway runs the auditor too (`BLOBSTORE_AUDIT_INTERVAL_S`; 0 turns it off
there), and all auditors share one lock in ZooKeeper: one pass per interval runs for
the whole cluster, in whichever process holds the lock. Run this command where
gateways should not spend CPU and bandwidth copying a lost bookie's entries: start one
or two of these, and the gateways with `BLOBSTORE_AUDIT_INTERVAL_S=0`.

A bookie unregistered for longer than `--lost-bookie-delay-s` has everything it held
copied to other bookies (at most `--recovery-rate-mb-s`) and is taken out of every
ledger's ensembles, as `blobstore admin decommission` does; then it is listed under
`/ledgers/decommissioned`, safe to wipe. Settings default to the gateway's
`BLOBSTORE_*` variables. SIGTERM or SIGINT stops it between copies of entries; a pass
cut short is taken up by the next holder of the lock.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import signal
import socket
import uuid

import uvloop
from prometheus_client import start_http_server

from blobstore.objects.config import ObjectStoreConfig
from blobstore.recovery.auditor import BookieAuditor
from blobstore.runtime.errors import UsageError
from blobstore.runtime.gc_pauses import freeze_after_startup
from blobstore.runtime.heap import keep_freed_memory
from blobstore.runtime.zk import started_client

logger = logging.getLogger(__name__)

ZK_CONNECT_TIMEOUT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zk",
        default=os.environ.get("BLOBSTORE_ZK"),
        help="ZooKeeper connect string host:port[/chroot] (env BLOBSTORE_ZK)",
    )
    parser.add_argument(
        "--audit-interval-s",
        type=float,
        default=None,
        help="seconds between passes (env BLOBSTORE_AUDIT_INTERVAL_S; default 60)",
    )
    parser.add_argument(
        "--lost-bookie-delay-s",
        type=float,
        default=None,
        help="how long a bookie may be unregistered before what it held is copied "
        "elsewhere (env BLOBSTORE_LOST_BOOKIE_DELAY_S; default 1800)",
    )
    parser.add_argument(
        "--recovery-rate-mb-s",
        type=float,
        default=None,
        help="most entry bytes per second copied, in MB/s; 0: no limit "
        "(env BLOBSTORE_RECOVERY_RATE_MB_S; default 50)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address of the Prometheus /metrics endpoint (default 127.0.0.1)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="port of the Prometheus /metrics endpoint (default 0: none)",
    )


def _config(args: argparse.Namespace) -> ObjectStoreConfig:
    overrides = {
        name: value
        for name, value in (
            ("audit_interval_s", args.audit_interval_s),
            ("lost_bookie_delay_s", args.lost_bookie_delay_s),
            ("recovery_rate_mb_s", args.recovery_rate_mb_s),
        )
        if value is not None
    }
    config = ObjectStoreConfig.from_env(**overrides)
    if not 0 < config.audit_interval_s < math.inf:  # NaN fails too
        raise UsageError(
            f"audit interval {config.audit_interval_s!r}: autorecovery needs one above 0"
        )
    return config


def run(args: argparse.Namespace) -> int:
    if not args.zk:
        raise UsageError("--zk (or BLOBSTORE_ZK) is required")
    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"--metrics-port {args.metrics_port}: must be in [0, 65535]")
    config = _config(args)
    if args.metrics_port:
        try:
            start_http_server(args.metrics_port, args.metrics_host)
        except OSError as e:
            raise UsageError(
                f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {e.strerror}"
            ) from None
    uvloop.run(_serve(args.zk, config))
    return 0


async def _serve(zk_connect: str, config: ObjectStoreConfig) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    zk = await started_client(
        zk_connect, ZK_CONNECT_TIMEOUT_S, session_timeout_s=config.zk_session_timeout_s
    )
    identity = f"autorecovery-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    auditor = BookieAuditor(
        zk,
        identity,
        config.audit_interval_s,
        config.lost_bookie_delay_s,
        live_bookies_min=config.ensemble_size,
        recovery_rate_bytes_per_s=config.recovery_rate_mb_s * 1e6,
    )
    try:
        freeze_after_startup()
        keep_freed_memory()
        auditor.start()
        logger.info(
            "event=autorecovery_ready id=%s audit_interval_s=%g lost_bookie_delay_s=%g "
            "recovery_rate_mb_s=%g",
            identity,
            config.audit_interval_s,
            config.lost_bookie_delay_s,
            config.recovery_rate_mb_s,
        )
        await stop.wait()
    finally:
        await auditor.close()
        await zk.stop()
    logger.info("event=autorecovery_stopped id=%s", identity)
