"""List the registered (live) bookies: id, writable or read-only, free space, ledgers, rack."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kazoo.exceptions import NoNodeError

from blobstore.admin._output import (
    Output,
    add_common_arguments,
    admin_session,
    human_bytes,
    run_async,
)
from blobstore.zk import ZooKeeperClient
from bookie import zk_layout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)


async def registered_bookies(zk: ZooKeeperClient) -> list[dict[str, Any]]:
    """One dict per registration znode, sorted by bookie id (unreadable ones flagged)."""
    try:
        children = await zk.get_children(zk_layout.AVAILABLE_PATH)
    except NoNodeError:
        return []
    result = []
    for bookie_id in sorted(children):
        try:
            raw = (await zk.get(zk_layout.available_path(bookie_id))).value
        except NoNodeError:
            continue  # went away meanwhile
        try:
            info = dict(json.loads(raw))
        except (ValueError, TypeError):
            info = {"error": "unreadable registration"}
        info["bookie_id"] = bookie_id
        info["state"] = "read-only" if info.get("read_only") else "writable"
        result.append(info)
    return result


def run(args: argparse.Namespace) -> int:
    output = Output(bool(args.json))

    async def main() -> list[dict[str, Any]]:
        async with admin_session(args.zk) as zk:
            return await registered_bookies(zk)

    bookies = run_async(main)
    if output.json_mode:
        output.emit_json(bookies)
        return 0
    rows = [
        (
            b["bookie_id"],
            b["state"],
            human_bytes(int(b.get("free_bytes", 0))),
            human_bytes(int(b.get("total_bytes", 0))),
            b.get("ledger_count", ""),
            b.get("rack", ""),
        )
        for b in bookies
    ]
    output.table(
        f"{len(bookies)} bookie(s) registered",
        ["bookie", "state", "free", "total", "ledgers", "rack"],
        rows,
        right_align=["free", "total", "ledgers"],
    )
    return 0
