"""List ledgers (id, state, E/WQ/AQ, last entry, length, bookies), or show one in full.

blobstore admin --zk Z ledgers            # table of every ledger
blobstore admin --zk Z ledgers show ID    # metadata and ensemble segments of one
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from blobstore.admin._output import (
    Output,
    add_common_arguments,
    admin_session,
    human_bytes,
    run_async,
)
from blobstore.ledger.errors import NoSuchLedgerError
from blobstore.ledger.ledger_manager import LedgerManager
from blobstore.ledger.ledger_metadata import LedgerMetadata, MetadataFormatError
from blobstore.runtime.errors import UsageError

READ_CONCURRENCY_MAX = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("action", nargs="?", choices=["show"], help="show one ledger")
    parser.add_argument("ledger_id", nargs="?", help="ledger id (with show)")


def _row(metadata: LedgerMetadata) -> dict[str, Any]:
    return {
        "ledger_id": metadata.ledger_id,
        "state": metadata.state,
        "ensemble_size": metadata.ensemble_size,
        "write_quorum": metadata.write_quorum,
        "ack_quorum": metadata.ack_quorum,
        "last_entry_id": metadata.last_entry_id,
        "length": metadata.length,
        "bookies": metadata.all_bookies(),
        "segments": len(metadata.ensembles),
    }


async def _list(zk_hosts: str) -> list[dict[str, Any]]:
    async with admin_session(zk_hosts) as zk:
        manager = LedgerManager(zk)
        ids = await manager.list_ledger_ids()
        semaphore = asyncio.Semaphore(READ_CONCURRENCY_MAX)

        async def read(ledger_id: int) -> dict[str, Any] | None:
            async with semaphore:
                try:
                    return _row((await manager.read(ledger_id)).value)
                except NoSuchLedgerError:
                    return None  # deleted meanwhile
                except MetadataFormatError as e:
                    return {"ledger_id": ledger_id, "state": "UNREADABLE", "error": str(e)}

        rows = await asyncio.gather(*(read(i) for i in ids))
        return [row for row in rows if row is not None]


async def _show(zk_hosts: str, ledger_id: int) -> dict[str, Any]:
    async with admin_session(zk_hosts) as zk:
        try:
            versioned = await LedgerManager(zk).read(ledger_id)
        except NoSuchLedgerError:
            raise UsageError(f"no ledger {ledger_id}") from None
        except MetadataFormatError as e:
            raise UsageError(f"ledger {ledger_id} has unreadable metadata: {e}") from None
    document = versioned.value.to_json()
    document["znode_version"] = versioned.version
    return document


_SHOWN_FIELDS = (
    "ledger_id",
    "state",
    "ensemble_size",
    "write_quorum",
    "ack_quorum",
    "last_entry_id",
    "length",
    "digest_type",
    "ctime",
    "znode_version",
)


def run(args: argparse.Namespace) -> int:
    output = Output(bool(args.json))
    if args.action == "show":
        ledger_id = _ledger_id_argument(args.ledger_id)
        document = run_async(lambda: _show(args.zk, ledger_id))
        if output.json_mode:
            output.emit_json(document)
        else:
            _render_show(output, document)
        return 0
    if args.ledger_id is not None:
        raise UsageError(f"unexpected argument {args.ledger_id!r}; did you mean `ledgers show ID`?")
    rows = run_async(lambda: _list(args.zk))
    if output.json_mode:
        output.emit_json(rows)
    else:
        _render_list(output, rows)
    return 0


def _ledger_id_argument(ledger_id: object) -> int:
    text = str(ledger_id)
    if ledger_id is None or not (text.isascii() and text.isdigit()) or int(text) >= 1 << 63:
        raise UsageError("ledgers show needs a ledger id (an integer in [0, 2^63))")
    return int(text)


def _render_show(output: Output, document: dict[str, Any]) -> None:
    fields = [(key, document[key]) for key in _SHOWN_FIELDS]
    fields += [(f"custom.{k}", v) for k, v in sorted(document["custom"].items())]
    output.table(f"ledger {document['ledger_id']}", ["field", "value"], fields)
    output.table(
        "ensembles",
        ["first entry", "bookies"],
        [(first, ", ".join(bookies)) for first, bookies in document["ensembles"]],
        right_align=["first entry"],
    )


def _render_list(output: Output, rows: list[dict[str, Any]]) -> None:
    output.table(
        f"{len(rows)} ledger(s)",
        ["id", "state", "E/WQ/AQ", "last entry", "length", "bookies"],
        [
            (
                r["ledger_id"],
                r["state"],
                f"{r.get('ensemble_size', '?')}/{r.get('write_quorum', '?')}/{r.get('ack_quorum', '?')}",
                r.get("last_entry_id", ""),
                human_bytes(r["length"]) if "length" in r else "",
                ", ".join(r.get("bookies", [])),
            )
            for r in rows
        ],
        right_align=["id", "last entry", "length"],
    )
