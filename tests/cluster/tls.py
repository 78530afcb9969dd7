"""The test suite's TLS switch: `BLOBSTORE_TEST_TLS=1` (`make test-tls`) runs every shared
fixture's cluster with mutual TLS between the ledger clients and the bookies, and to
ZooKeeper (blobstore.runtime.ledger_tls).

On, the session makes one CA and certificate (`write_cluster_tls`, what `blobstore
standalone --ledger-tls --zk-tls` makes) and names its directory in the test process's
environment as `BLOBSTORE_LEDGER_TLS_DIR` and `BLOBSTORE_ZK_TLS_DIR`, as an operator
gives them to every process: bookies, gateways, `blobstore maintain` and `blobstore
admin` inherit them, and the ledger clients and ZooKeeper sessions the tests open
in-process read them. The fixtures' ZooKeeper serves TLS only; tests open kazoo clients
with `kazoo_client`, which follows the same variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from blobstore.runtime.ledger_tls import (
    LEDGER_TLS_DIR_ENV,
    ZK_TLS_DIR_ENV,
    LedgerTls,
    ledger_tls_from_env,
    write_cluster_tls,
)

TEST_TLS_ENV = "BLOBSTORE_TEST_TLS"


def tls_switch_on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the suite runs with TLS; a value other than 0 or 1 is refused."""
    value = (os.environ if environ is None else environ).get(TEST_TLS_ENV, "0")
    if value not in ("0", "1", ""):
        raise ValueError(f"{TEST_TLS_ENV}={value!r}: 1 (TLS on) or 0 (off)")
    return value == "1"


def turn_on_cluster_tls(directory: Path, environ: MutableMapping[str, str]) -> None:
    """One CA and certificate for every process, in `directory`, named in `environ` for
    the ledger traffic and for ZooKeeper's."""
    write_cluster_tls(directory)
    environ[LEDGER_TLS_DIR_ENV] = str(directory)
    environ[ZK_TLS_DIR_ENV] = str(directory)


def tls_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The TLS variables of `environ` (the process's), for a child started with an
    environment of its own."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in (LEDGER_TLS_DIR_ENV, ZK_TLS_DIR_ENV) if env.get(name)}


def zk_tls(environ: Mapping[str, str] | None = None) -> LedgerTls | None:
    """The files ZooKeeper's clients (and a fixture's server) use; None: plain TCP."""
    return ledger_tls_from_env(os.environ if environ is None else environ, ZK_TLS_DIR_ENV)


def kazoo_tls_args(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """KazooClient's TLS arguments for `zk_tls` (none when it is off)."""
    tls = zk_tls(environ)
    if tls is None:
        return {}
    return {
        "use_ssl": True,
        "ca": str(tls.ca),
        "certfile": str(tls.cert),
        "keyfile": str(tls.key),
        "check_hostname": False,  # peers are known by address; the CA is the trust
    }


def kazoo_client(hosts: str, timeout: float, **kwargs: Any) -> KazooClient:
    """A KazooClient (not started) that speaks TLS when the suite does."""
    return KazooClient(hosts=hosts, timeout=timeout, **kazoo_tls_args(), **kwargs)
