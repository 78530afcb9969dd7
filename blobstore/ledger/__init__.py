"""The ledger client: BookKeeper-style replicated ledgers over bookies (see docs/ledgers.md)."""

from blobstore.ledger.config import LedgerConfig
from blobstore.ledger.ensemble_placement import BookieInfo
from blobstore.ledger.errors import (
    AddOutcomeUnknownError,
    BadLedgerConfigError,
    EntryNotFoundError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerUnauthorizedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    PendingAddsFullError,
    ReadFailedError,
)
from blobstore.ledger.ledger_client import LedgerClient
from blobstore.ledger.ledger_handle import LedgerHandle
from blobstore.ledger.ledger_metadata import LedgerMetadata

__all__ = [
    "AddOutcomeUnknownError",
    "BadLedgerConfigError",
    "BookieInfo",
    "EntryNotFoundError",
    "LedgerClient",
    "LedgerClosedError",
    "LedgerConfig",
    "LedgerError",
    "LedgerFencedError",
    "LedgerHandle",
    "LedgerMetadata",
    "LedgerRecoveryError",
    "LedgerUnauthorizedError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "PendingAddsFullError",
    "ReadFailedError",
]
