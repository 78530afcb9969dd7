"""List the bookies: registered ones (writable or read-only, free space, ledgers, rack),
then those known by their cookie but not registered: `missing` (since when the auditor
first noticed, from `/auditor`), `decommissioning` or `decommissioned`."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kazoo.exceptions import NoNodeError

from blobstore.admin._output import (
    Output,
    add_common_arguments,
    admin_session,
    human_bytes,
    run_async,
)
from blobstore.recovery.auditor import take_census
from blobstore.runtime.zk import ZooKeeperClient
from blobstore.wire import zk_layout


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


async def known_bookies(zk: ZooKeeperClient) -> list[dict[str, Any]]:
    """Registered bookies, then those with a cookie and no registration."""
    bookies = await registered_bookies(zk)
    census = await take_census(zk)
    for info in bookies:
        decommission = census.decommission_of(info["bookie_id"])
        if decommission is not None:
            info["decommission"] = decommission
    registered = {b["bookie_id"] for b in bookies}
    for bookie_id in sorted(census.known - registered):
        info = {"bookie_id": bookie_id, "state": census.absent_state(bookie_id)}
        if bookie_id in census.missing_since:
            info["missing_since"] = census.missing_since[bookie_id]
        bookies.append(info)
    return bookies


def _state_text(info: dict[str, Any], now: float) -> str:
    text = str(info["state"])
    if "decommission" in info:
        text += f", decommission {info['decommission']}"
    if "missing_since" in info:
        text += f" for {max(0.0, now - float(info['missing_since'])) / 60:.0f} min"
    return text


def run(args: argparse.Namespace) -> int:
    output = Output(bool(args.json))

    async def main() -> list[dict[str, Any]]:
        async with admin_session(args.zk) as zk:
            return await known_bookies(zk)

    bookies = run_async(main)
    if output.json_mode:
        output.emit_json(bookies)
        return 0
    now = time.time()
    rows = [
        (
            b["bookie_id"],
            _state_text(b, now),
            human_bytes(int(b["free_bytes"])) if "free_bytes" in b else "",
            human_bytes(int(b["total_bytes"])) if "total_bytes" in b else "",
            b.get("ledger_count", ""),
            b.get("rack", ""),
        )
        for b in bookies
    ]
    registered = sum(1 for b in bookies if b["state"] in ("writable", "read-only"))
    absent = len(bookies) - registered
    output.table(
        f"{registered} bookie(s) registered" + (f", {absent} not registered" if absent else ""),
        ["bookie", "state", "free", "total", "ledgers", "rack"],
        rows,
        right_align=["free", "total", "ledgers"],
    )
    return 0
