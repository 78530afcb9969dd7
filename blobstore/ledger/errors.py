"""Errors of the ledger client. Each carries the ledger id it concerns (when known)."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every ledger client error."""

    def __init__(self, message: str, *, ledger_id: int | None = None) -> None:
        super().__init__(message)
        self.ledger_id = ledger_id


class AddOutcomeUnknownError(LedgerError):
    """An add whose fate is unknown: it may or may not be part of the ledger once the
    ledger is closed (by its writer or by a recovery). Never read it as "not written"."""


class LedgerFencedError(AddOutcomeUnknownError):
    """The ledger was fenced by a recovery (or closed by another client): this handle may
    not write any more. Adds in flight at that moment have an unknown outcome."""


class LedgerClosedError(LedgerError):
    """A write on a ledger (or handle) that is closed."""


class NotEnoughBookiesError(LedgerError):
    """Fewer writable bookies than the ensemble (or a replacement) needs; `read_only`
    names the registered bookies that refuse writes (full or failing disks)."""

    def __init__(
        self,
        message: str,
        *,
        read_only: tuple[str, ...] = (),
        ledger_id: int | None = None,
    ) -> None:
        super().__init__(message, ledger_id=ledger_id)
        self.read_only = read_only


class NoSuchLedgerError(LedgerError):
    """No metadata for this ledger id (never created, or deleted)."""


class EntryNotFoundError(LedgerError):
    """The entry does not exist (beyond the readable end, or on no replica)."""


class ReadFailedError(LedgerError):
    """No replica returned the entry (bookies unavailable or every copy corrupt)."""


class BadLedgerConfigError(LedgerError):
    """Invalid E/WQ/AQ, password, entry size or client configuration."""


class LedgerUnauthorizedError(LedgerError):
    """The password does not match the ledger's."""


class PendingAddsFullError(LedgerError):
    """`append` refused: the handle's bound of adds in flight is reached (await
    `add_entry` or `wait_for_capacity` instead of queueing without bound)."""


class MetadataVersionConflictError(LedgerError):
    """A compare-and-set on ledger metadata lost against another update."""


class LedgerRecoveryError(LedgerError):
    """Recovery could not decide the end of the ledger (too many bookies unavailable);
    retry later. The ledger stays IN_RECOVERY and fenced; nothing was lost."""
