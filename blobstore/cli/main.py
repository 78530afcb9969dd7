"""The `blobstore` command line. Each subcommand lives in its own module exposing
`add_arguments(parser)` and `run(args) -> int`; this module only wires them up, so that
`blobstore --help` stays fast and one broken subsystem cannot break the others.

Errors a user can fix are one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import sys

from blobstore.runtime.errors import CommandError, UsageError
from blobstore.runtime.logs import configure_logging

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "standalone": (
        "blobstore.cli.standalone",
        "ZooKeeper + bookies + gateway on this machine, one command",
    ),
    "zookeeper": ("blobstore.cli.zookeeper_server", "run a local ZooKeeper server"),
    "bookie": ("bookie.main", "run a bookie (storage server)"),
    "gateway": ("s3api.main", "run the S3 gateway"),
    "admin": ("blobstore.admin.cli", "inspect and repair the cluster"),
    "maintain": (
        "blobstore.cli.maintain",
        "the Spark maintenance job: ledger GC, compaction, lifecycle expiration",
    ),
    "autorecovery": (
        "blobstore.cli.autorecovery",
        "run the bookie auditor on its own (re-replicates lost bookies)",
    ),
}


def _chosen(argv: list[str], names: object) -> str | None:
    """The first positional word of argv when it names a command (only that module loads).
    The value of a global option given as two words (`--log-level DEBUG`) is not one."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in names else None  # type: ignore[operator]
    return None


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(LOG_LEVELS)}")
    return level


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blobstore",
        description="An S3-compatible object store on replicated ledgers.",
    )
    parser.add_argument(
        "--log-level",
        type=_log_level,
        default=os.environ.get("BLOBSTORE_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (env BLOBSTORE_LOG_LEVEL; default INFO)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv, SUBCOMMANDS)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(
            name,
            help=help_text,
            description=(module.__doc__ or help_text).split("\n\n")[0],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if "argv" in inspect.signature(module.add_arguments).parameters:
            # Commands with their own subcommands load only the chosen one, too.
            module.add_arguments(sub_parser, argv=argv[argv.index(name) + 1 :])
        else:
            module.add_arguments(sub_parser)
        sub_parser.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    configure_logging(getattr(logging, str(args.log_level).upper(), logging.INFO))
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except UsageError as e:
        print(f"blobstore: error: {e}", file=sys.stderr)
        return 2
    except CommandError as e:
        logging.getLogger("blobstore").debug("command failed", exc_info=e)
        print(f"blobstore: error: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        # A file, directory, port or value from the environment the command cannot use:
        # the user's to fix, so one line (the traceback with --log-level DEBUG).
        logging.getLogger("blobstore").debug("command failed", exc_info=e)
        print(f"blobstore: error: {_describe(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        return f"{error.strerror}: {error.filename}"
    return str(error) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
