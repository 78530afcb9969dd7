"""One copy of an entry on one bookie, read and verified: what fsck checks and what
recovery copies from."""

from __future__ import annotations

import logging

from blobstore.ledger.bookie_client import (
    BookieClientPool,
    BookieError,
    BookieUnavailableError,
    NoSuchEntryError,
    NoSuchLedgerOnBookieError,
)
from blobstore.wire.protocol import CorruptEntryError, Entry

logger = logging.getLogger(__name__)

# Outcomes of reading one copy of an entry from one bookie.
OK = "ok"
MISSING = "missing"
CORRUPT = "corrupt"
UNAVAILABLE = "unavailable"
ERROR = "error"


async def read_verified(
    pool: BookieClientPool, bookie_id: str, ledger_id: int, entry_id: int
) -> tuple[str, bytes | None]:
    """(outcome, verified entry bytes or None) of one copy of an entry on one bookie."""
    try:
        response = await pool.read_entry(bookie_id, ledger_id, entry_id)
    except (NoSuchEntryError, NoSuchLedgerOnBookieError):
        return MISSING, None
    except BookieUnavailableError:
        return UNAVAILABLE, None
    except BookieError as e:
        logger.warning(
            "event=replica_read_error bookie=%s ledger_id=%d entry_id=%d error=%r",
            bookie_id,
            ledger_id,
            entry_id,
            e,
        )
        return ERROR, None
    try:
        entry = Entry.decode(response.entry)
    except CorruptEntryError as e:
        logger.warning(
            "event=replica_corrupt bookie=%s ledger_id=%d entry_id=%d error=%s",
            bookie_id,
            ledger_id,
            entry_id,
            e,
        )
        return CORRUPT, None
    if entry.ledger_id != ledger_id or entry.entry_id != entry_id:
        return CORRUPT, None
    return OK, bytes(response.entry)  # kept by the caller: its own bytes
