"""DeleteObjects' per-key errors: each key's <Error> entry, and the log line of an
exception the gateway does not map."""

from __future__ import annotations

import logging

import pytest

from blobstore.catalog.errors import NoSuchVersionError
from s3api.handlers.buckets import delete_error
from s3api.xml_requests import ObjectToDelete
from s3api.xml_responses import DeleteError


def _raised(exc: Exception) -> Exception:
    """`exc` with a traceback, as the handler catches it."""
    try:
        raise exc
    except Exception as caught:  # noqa: BLE001 - handed back to the test
        return caught


def test_an_unexpected_exception_is_that_keys_internal_error_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exc = _raised(RuntimeError("boom"))
    with caplog.at_level(logging.INFO, logger="s3api.handlers.buckets"):
        entry = delete_error(exc, ObjectToDelete("k/1", "v1"), request_id="r1", bucket="b")
    assert entry == DeleteError("k/1", "InternalError", entry.message, "v1")
    assert entry.message
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "event=internal_error request_id=r1 resource=/b/k/1"
    assert record.exc_info is not None
    assert record.exc_info[1] is exc


def test_an_expected_error_is_that_keys_error_and_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exc = _raised(NoSuchVersionError("b", "k", "v1"))
    with caplog.at_level(logging.INFO, logger="s3api.handlers.buckets"):
        entry = delete_error(exc, ObjectToDelete("k", "v1"), request_id="r1", bucket="b")
    assert (entry.key, entry.code, entry.version_id) == ("k", "NoSuchVersion", "v1")
    assert caplog.records == []
