"""Output and session helpers shared by `blobstore admin` commands.

Every command prints either rich tables for people or, with `--json`, exactly one JSON
document on stdout for scripts. Progress bars and notes go to stderr, so stdout stays
parseable; in JSON mode progress is not drawn at all. Commands run one asyncio loop
(uvloop) and one ZooKeeper session, opened by `admin_session`, which turns an unreachable
ZooKeeper into a one-line `UsageError`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import uvloop
from kazoo.exceptions import KazooException, NoAuthError, SessionClosedRequireSaslError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from blobstore.runtime.errors import UsageError
from blobstore.runtime.zk import ZooKeeperClient, started_client
from blobstore.runtime.zk_auth import DIGEST_FILE_ENV

T = TypeVar("T")

ZK_CONNECT_TIMEOUT_S = 10.0


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """`--zk` and `--json` accepted after the command name too (`admin fsck --json`).

    SUPPRESS keeps a value given before the command (`admin --json fsck`): a sub-parser's
    default would otherwise overwrite it.
    """
    parser.add_argument(
        "--zk", default=argparse.SUPPRESS, help="ZooKeeper connect string (env BLOBSTORE_ZK)"
    )
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """Run one admin coroutine on a fresh uvloop event loop.

    Errors of concurrent work arrive as exception groups: the first leaf is raised, so a
    user mistake stays one line. A ZooKeeper that stops answering mid-run is one line too.
    """

    async def wrapper() -> T:
        return await main()

    try:
        return uvloop.run(wrapper())
    except BaseExceptionGroup as group:
        first = _first_leaf(group)
        if isinstance(first, KazooException | UsageError):
            raise _as_usage_error(first) from None
        raise first from group
    except KazooException as e:
        raise _as_usage_error(e) from None


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _as_usage_error(error: BaseException) -> UsageError:
    if isinstance(error, UsageError):
        return error
    if isinstance(error, SessionClosedRequireSaslError | NoAuthError):
        return UsageError(
            "ZooKeeper refused this session: the ensemble wants the cluster's digest "
            f"credential (set {DIGEST_FILE_ENV} to its file)"
        )
    return UsageError(f"ZooKeeper request failed: {error!r}")


@contextlib.asynccontextmanager
async def admin_session(zk_hosts: str) -> AsyncIterator[ZooKeeperClient]:
    """A started ZooKeeper session, stopped on exit; unreachable -> UsageError.

    The session's connection chatter is kept off the operator's terminal unless
    --log-level is DEBUG.
    """
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("blobstore.runtime.zk_session").setLevel(logging.ERROR)
        logging.getLogger("blobstore.runtime.zk").setLevel(logging.WARNING)
    zk = await started_client(zk_hosts, ZK_CONNECT_TIMEOUT_S)
    try:
        if await zk.exists("/") is None:
            # A mistyped /chroot would read as an empty cluster.
            raise UsageError(f"the ZooKeeper path of --zk {zk_hosts} does not exist")
        yield zk
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(zk.stop(), ZK_CONNECT_TIMEOUT_S)


def human_bytes(count: int | float) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


PIPED_WIDTH = 400


class Output:
    """Where an admin command writes: tables and notes, or one JSON document."""

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        # A pipe or a file has no width: rich would assume 80 columns and cut bookie ids,
        # names and dates; tables there take the width their cells need.
        width = None if sys.stdout.isatty() else PIPED_WIDTH
        self.console = Console(highlight=False, soft_wrap=False, width=width)
        self.stderr = Console(stderr=True, highlight=False)

    def emit_json(self, document: Any) -> None:
        assert self.json_mode, "emit_json in table mode"
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
        sys.stdout.flush()

    def table(
        self,
        title: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        right_align: Sequence[str] = (),
    ) -> None:
        """Print a table (table mode only; nothing in JSON mode)."""
        if self.json_mode:
            return
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column, justify="right" if column in right_align else "left")
        for row in rows:
            table.add_row(*("" if cell is None else str(cell) for cell in row))
        self.console.print(table)

    def note(self, message: str) -> None:
        """A line for people (stderr in JSON mode, so stdout stays one document)."""
        (self.stderr if self.json_mode else self.console).print(message, markup=False)

    @contextlib.contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A progress bar on stderr; yields `advance(n)`. Silent in JSON mode or when
        stderr is not a terminal."""
        if self.json_mode or not self.stderr.is_terminal:
            yield lambda _count: None
            return
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.stderr,
            transient=True,
        ) as progress:
            task = progress.add_task(description, total=total)
            yield lambda count: progress.advance(task, count)
