"""Ledger metadata as stored in ZooKeeper, read directly (tests check what the gateways
and the sweeper left behind, without going through the code under test)."""

from __future__ import annotations

import json
from typing import Any

from kazoo.client import KazooClient

from blobstore.wire.zk_layout import ledger_path
from tests.waiting import wait_until


def ledger_metadata(zk: KazooClient) -> dict[int, dict[str, Any]]:
    """ledger id -> decoded metadata, for every ledger."""
    result: dict[int, dict[str, Any]] = {}
    stack = ["/ledgers/meta"]
    while stack:
        path = stack.pop()
        for child in zk.get_children(path):
            child_path = f"{path}/{child}"
            if child.startswith("L"):
                ledger_id = int("".join(child_path.split("/")[-5:-1]) + child[1:])
                assert ledger_path(ledger_id) == child_path, child_path
                result[ledger_id] = json.loads(zk.get(child_path)[0])
            else:
                stack.append(child_path)
    return result


def ledger_writer(metadata: dict[str, Any]) -> str:
    """The gateway (writer id) that created the ledger, "" for others."""
    return str(metadata.get("custom", {}).get("writer", ""))


def ledger_states_of(zk: KazooClient, writer: str) -> dict[int, str]:
    """ledger id -> state, for the ledgers this writer created."""
    return {
        ledger_id: metadata["state"]
        for ledger_id, metadata in ledger_metadata(zk).items()
        if ledger_writer(metadata) == writer
    }


def wait_until_swept(zk: KazooClient, writer: str, deadline_s: float) -> None:
    """Until the writer has ledgers and every one of them is CLOSED."""
    wait_until(
        lambda: _swept(ledger_states_of(zk, writer)),
        deadline_s,
        message=lambda: f"never swept: {ledger_states_of(zk, writer)}",
        interval_s=0.2,
    )


def _swept(states: dict[int, str]) -> bool:
    return bool(states) and all(state == "CLOSED" for state in states.values())
