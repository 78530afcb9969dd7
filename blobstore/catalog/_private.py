"""Helpers of the catalog package only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError

from blobstore.catalog.errors import CatalogUnavailableError

# Errors after which the outcome of a ZooKeeper write is unknown.
UNKNOWN_OUTCOME_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    asyncio.TimeoutError,
    TimeoutError,
)


@contextmanager
def zookeeper_errors(what: str) -> Iterator[None]:
    """Turn lost connections and timeouts into CatalogUnavailableError."""
    try:
        yield
    except UNKNOWN_OUTCOME_ERRORS as e:
        raise CatalogUnavailableError(f"{what}: ZooKeeper unavailable ({type(e).__name__})") from e
