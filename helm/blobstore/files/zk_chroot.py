"""Wait for ZooKeeper and create the cluster's chroot (an init container of every pod that
uses ZooKeeper).

    zk_chroot.py --zk HOST:PORT[,HOST:PORT...][/chroot] [--timeout-s 300]

Bookies refuse a `--zk .../chroot` whose path does not exist (a typo must not start an
empty cluster), so the chart creates it here; creating an existing path is a no-op.
With BLOBSTORE_ZK_DIGEST_FILE set (zookeeper.auth), the session authenticates with that
credential and the znodes it creates are ACL'd to it, as the program's own are
(blobstore.runtime.zk_auth).
Exits 0 once the path exists, 1 if ZooKeeper did not answer in time (the pod's init
container is then retried), 2 if the credential file is unreadable or malformed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk_auth import ZooKeeperDigest, digest_from_env, znode_acl

CONNECT_TIMEOUT_S = 10.0


def split_connect(connect: str) -> tuple[str, str]:
    """(hosts, chroot) of a connect string; chroot "" when there is none."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/")


def ensure_chroot(hosts: str, chroot: str, digest: ZooKeeperDigest | None) -> None:
    client = KazooClient(
        hosts=hosts,
        timeout=CONNECT_TIMEOUT_S,
        auth_data=[("digest", digest.credential.decode())] if digest else None,
        default_acl=znode_acl(digest),
    )
    client.start(timeout=CONNECT_TIMEOUT_S)
    try:
        if chroot:
            client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zk", required=True, help="HOST:PORT[,HOST:PORT...][/chroot]")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    return parser


def main(argv: list[str]) -> int:
    args = argument_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    hosts, chroot = split_connect(args.zk)
    try:
        digest = digest_from_env()
    except UsageError as e:
        print(f"zk_chroot: {e}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.timeout_s
    while True:
        try:
            ensure_chroot(hosts, chroot, digest)
        except (KazooTimeoutError, OSError) as e:
            if time.monotonic() >= deadline:
                print(f"zk_chroot: ZooKeeper {hosts} did not answer: {e!r}", file=sys.stderr)
                return 1
            time.sleep(2)
            continue
        print(f"zk_chroot: {hosts}{chroot or '/'} exists", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
