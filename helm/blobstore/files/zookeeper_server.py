"""Start one server of the chart's ZooKeeper ensemble (the command of its StatefulSet).

`blobstore zookeeper` runs a single server with the configuration it writes itself; an
ensemble needs every server listed in zoo.cfg and each server's id in `<dataDir>/myid`.
This script supplies those and starts the server as `blobstore zookeeper` does: the
same Java, classpath and JVM flags (serial collector, no socket worker pool,
jute.maxbuffer of 4 MiB; blobstore.cli.zookeeper_server).

The server id is the pod's StatefulSet ordinal + 1 (`<name>-0` is server.1), the zoo.cfg
comes from the chart's ConfigMap (read-only: reconfiguration is off, so ZooKeeper never
rewrites it) and log4j.properties is copied beside the data, where the JVM flags expect it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from blobstore.cli import zookeeper_server


def server_id(pod_name: str) -> int:
    """The ZooKeeper server id of a StatefulSet pod: its ordinal + 1."""
    _, _, ordinal = pod_name.rpartition("-")
    if not ordinal.isdigit():
        raise SystemExit(f"zookeeper_server: pod name {pod_name!r} has no ordinal")
    return int(ordinal) + 1


def data_dir_of(config: Path) -> Path:
    """The `dataDir` of a zoo.cfg."""
    for line in config.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "dataDir":
            return Path(value.strip())
    raise SystemExit(f"zookeeper_server: {config} sets no dataDir")


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the ensemble's zoo.cfg")
    parser.add_argument("--log4j", type=Path, required=True, help="log4j.properties to use")
    parser.add_argument("--pod-name", required=True, help="this pod's name (<name>-<ordinal>)")
    parser.add_argument("--heap-mb", type=int, required=True, help="JVM heap in MiB")
    return parser


def main(argv: list[str]) -> None:
    args = argument_parser().parse_args(argv)
    data = data_dir_of(args.config)
    # The volume's root holds log4j.properties and the server's log dir; dataDir is below.
    root = data.parent
    data.mkdir(parents=True, exist_ok=True)
    (data / "myid").write_text(f"{server_id(args.pod_name)}\n")
    shutil.copyfile(args.log4j, root / "log4j.properties")
    command = zookeeper_server._server_command(
        zookeeper_server.find_java(),
        zookeeper_server.zookeeper_classpath(),
        args.heap_mb,
        root,
        args.config,
    )
    sys.stdout.flush()
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
