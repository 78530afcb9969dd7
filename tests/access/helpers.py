"""Helpers of the access tests: a ZooKeeper session on the test's chroot, a cluster key,
the `blobstore admin` command run as an operator runs it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from blobstore.access.users import UserStore
from blobstore.runtime.sealing import (
    CLUSTER_KEY_FILE_ENV,
    ClusterKey,
    generate_cluster_key,
    parse_cluster_key,
)
from blobstore.runtime.zk import ZooKeeperClient
from tests.cluster.tls import tls_environment

T = TypeVar("T")
TEST_TIMEOUT_S = 60.0


def new_cluster_key() -> ClusterKey:
    return parse_cluster_key(generate_cluster_key(), "test")


@asynccontextmanager
async def session(zk_connect: str) -> AsyncIterator[ZooKeeperClient]:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    try:
        yield zk
    finally:
        await zk.stop()


def run_with_store(
    zk_connect: str,
    cluster_key: ClusterKey | None,
    body: Callable[[UserStore], Awaitable[T]],
) -> T:
    async def main() -> T:
        async with session(zk_connect) as zk:
            return await asyncio.wait_for(body(UserStore(zk, cluster_key)), TEST_TIMEOUT_S)

    return asyncio.run(main())


class Admin:
    """Runs `blobstore admin ...` against the test's chroot with the cluster key file."""

    def __init__(self, zk_connect: str, key_file: Path) -> None:
        self.zk_connect = zk_connect
        self.key_file = key_file

    def __call__(
        self, *args: str, stdin: str | None = None, key: bool = True, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBSTORE_")}
        env.update(tls_environment())  # `make test-tls`: the cluster's TLS files
        env["BLOBSTORE_ZK"] = self.zk_connect
        if key:
            env[CLUSTER_KEY_FILE_ENV] = str(self.key_file)
        result = subprocess.run(
            [sys.executable, "-m", "blobstore.cli", "admin", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            input=stdin,
        )
        if ok:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)

    def refused(self, *args: str, expected: str, key: bool = True) -> str:
        result = self(*args, key=key, ok=False)
        assert result.returncode == 2, (args, result)
        assert "Traceback" not in result.stderr, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("blobstore: error: "), result.stderr
        assert expected in lines[0], lines[0]
        return lines[0]
