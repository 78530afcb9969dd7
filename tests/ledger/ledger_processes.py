"""Child processes for recovery tests: a writer that prints every acknowledged entry id,
and a recoverer that opens a ledger with recovery and prints where it closed.

    python -m tests.ledger.ledger_processes write ZK LEDGER_COUNT_MAX ENTRY_BYTES
        prints "LEDGER <id>", then "ACK <entry_id>" per acknowledged entry (in order),
        "FENCED" and exit 3 once its adds are rejected by a recovery.
    python -m tests.ledger.ledger_processes recover ZK LEDGER_ID
        prints one JSON line {"last_entry_id": ..., "length": ...}
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sys

from blobstore.ledger import AddOutcomeUnknownError, LedgerClient, LedgerConfig, LedgerFencedError
from blobstore.runtime.zk import ZooKeeperClient

PASSWORD = b"recovery-test"
WINDOW = 16


def entry_payload(entry_id: int, size: int) -> bytes:
    block = hashlib.sha256(b"entry-%d" % entry_id).digest()
    return (block * (size // len(block) + 1))[:size]


def _config() -> LedgerConfig:
    return LedgerConfig(bookie_request_timeout_s=10.0, bookie_connect_timeout_s=2.0)


async def write(zk_connect: str, entry_count: int, entry_bytes: int) -> int:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    client = LedgerClient(zk, config=_config())
    await client.start()
    handle = await client.create_ledger(3, 2, 2, PASSWORD)
    print(f"LEDGER {handle.ledger_id}", flush=True)
    in_flight: list[asyncio.Future[int]] = []
    try:
        for entry_id in range(entry_count):
            await handle.wait_for_capacity()
            in_flight.append(handle.append(entry_payload(entry_id, entry_bytes)))
            while len(in_flight) >= WINDOW or (in_flight and in_flight[0].done()):
                print(f"ACK {await in_flight.pop(0)}", flush=True)
            await asyncio.sleep(0)
        for future in in_flight:
            print(f"ACK {await future}", flush=True)
    except LedgerFencedError:
        print("FENCED", flush=True)
        return 3
    except AddOutcomeUnknownError as e:
        print(f"UNKNOWN {e}", flush=True)
        return 4
    await handle.close()
    print("CLOSED", flush=True)
    return 0


async def recover(zk_connect: str, ledger_id: int) -> int:
    zk = ZooKeeperClient(zk_connect)
    await zk.start()
    client = LedgerClient(zk, config=_config())
    await client.start()
    handle = await client.open_ledger(ledger_id, PASSWORD, recovery=True)
    metadata = handle.metadata
    print(
        json.dumps({"last_entry_id": metadata.last_entry_id, "length": metadata.length}), flush=True
    )
    await client.close()
    await zk.stop()
    return 0


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    if argv[0] == "write":
        return asyncio.run(write(argv[1], int(argv[2]), int(argv[3])))
    if argv[0] == "recover":
        return asyncio.run(recover(argv[1], int(argv[2])))
    raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
