"""`blobstore admin`: inspect and repair the cluster. Every command takes `--zk` (or
BLOBSTORE_ZK) and `--json` for scripts. Each command is a module in this package with
`add_arguments(parser)` and `run(args) -> int` (or an object of a module holding them,
named `module:object`, when one module serves several commands).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os

from blobstore.runtime.errors import UsageError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bookies": ("blobstore.admin.bookies", "registered bookies: state, free space, rack"),
    "fsck": ("blobstore.admin.fsck", "check every extent is stored, readable and replicated"),
    "buckets": ("blobstore.admin.du", "buckets with their objects, bytes and ledgers"),
    "du": ("blobstore.admin.du", "logical and stored (replicated) bytes per bucket"),
    "decommission": ("blobstore.admin.decommission", "move every entry off a bookie"),
    "ledgers": ("blobstore.admin.ledgers", "ledgers: state, E/WQ/AQ, last entry, length, bookies"),
    "simpletest": (
        "blobstore.admin.simpletest",
        "write, read back and verify N entries; throughput",
    ),
    "underreplicated": (
        "blobstore.admin.underreplicated",
        "copies known bad or missing on a bookie, waiting for repair",
    ),
    "scrub": (
        "blobstore.admin.scrub",
        "verify every stored entry on every bookie now, then repair what was found",
    ),
    "maintenance": (
        "blobstore.admin.maintenance",
        "status: the last runs of `blobstore maintain`, and the one running now",
    ),
    "user": (
        "blobstore.admin.users:UserCommand",
        "users and their access keys: add, ls, rm, rotate-key, disable, enable, attach, detach",
    ),
    "group": ("blobstore.admin.users:GroupCommand", "groups of users: add, rm, ls, members"),
    "policy": ("blobstore.admin.users:PolicyCommand", "identity policies: add, ls, rm, show"),
    "tier": (
        "blobstore.admin.tiers",
        "cold tiers lifecycle rules move objects to: add, ls, rm",
    ),
    "kms": (
        "blobstore.admin.kms",
        "master keys of the built-in key service: key create, key ls, key rotate",
    ),
    "public-access-block": (
        "blobstore.admin.public_access",
        "the cluster's public access block, over every bucket's: show, set, rm",
    ),
}


def add_arguments(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> None:
    parser.add_argument(
        "--zk",
        default=os.environ.get("BLOBSTORE_ZK"),
        help="ZooKeeper connect string host:port[/chroot] (env BLOBSTORE_ZK)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="admin_command", metavar="COMMAND")
    argv = argv or []
    chosen = next((w for w in argv if not w.startswith("-") and w in COMMANDS), None)
    for name, (module_name, help_text) in COMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=help_text)
            continue
        module_path, _, attribute = module_name.partition(":")
        module = importlib.import_module(module_path)
        if attribute:
            module = getattr(module, attribute)
        command = sub.add_parser(
            name,
            help=help_text,
            description=inspect.getdoc(module),
            # Module docs hold examples and lists laid out by line: kept as written.
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(admin_run=module.run)


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "admin_run", None):
        raise UsageError("admin needs a command; see `blobstore admin --help`")
    if not args.zk:
        raise UsageError("no ZooKeeper address: pass --zk HOST:PORT or set BLOBSTORE_ZK")
    return int(args.admin_run(args) or 0)
