"""Probe of a ZooKeeper server of the chart's ensemble, on the client port its zoo.cfg sets.

    zookeeper_probe.py --config zoo.cfg alive     # liveness: `ruok` answers `imok`
    zookeeper_probe.py --config zoo.cfg serving   # readiness: `srvr` names a Mode

A server that is up but not in a quorum answers `ruok` yet serves no client (`srvr`
says "not currently serving requests"): alive, not ready.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blobstore.cli.zookeeper_server import four_letter_word

TIMEOUT_S = 3.0


def client_port(config: Path) -> int:
    for line in config.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "clientPort":
            return int(value)
    raise SystemExit(f"zookeeper_probe: {config} sets no clientPort")


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("check", choices=("alive", "serving"))
    return parser


def main(argv: list[str]) -> int:
    args = argument_parser().parse_args(argv)
    port = client_port(args.config)
    try:
        if args.check == "alive":
            answer = four_letter_word("127.0.0.1", port, b"ruok", TIMEOUT_S)
            ok = answer == b"imok"
        else:
            answer = four_letter_word("127.0.0.1", port, b"srvr", TIMEOUT_S)
            ok = b"Mode: " in answer
    except OSError as e:
        print(f"zookeeper on port {port}: {e}", file=sys.stderr)
        return 1
    if not ok:
        print(f"zookeeper on port {port}: {answer[:200]!r}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
