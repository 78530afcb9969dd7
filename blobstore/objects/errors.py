"""Errors of the object layer. The gateway maps each, by class, to its S3 error in one
table (`s3api/errors.py`)."""

from __future__ import annotations


class ObjectLayerError(Exception):
    """Base of the object layer's errors. `details`: what S3 names beside the error
    code in its answer (PartNumber, ETag, ...), in order."""

    def __init__(self, message: str = "", **details: str | int) -> None:
        super().__init__(message)
        self.details: dict[str, str | int] = details


class EntityTooLargeError(ObjectLayerError):
    """The body passed the size limit of the operation (S3 names it MaxSizeAllowed)."""

    def __init__(self, size_max: int) -> None:
        super().__init__(f"body larger than {size_max} bytes", MaxSizeAllowed=size_max)
        self.size_max = size_max


class IncompleteBodyError(ObjectLayerError):
    """The body ended before the length the client announced."""


class InvalidPartListError(ObjectLayerError):
    """A part named in CompleteMultipartUpload is missing or its ETag does not match."""


class InvalidPartOrderError(ObjectLayerError):
    """Parts of CompleteMultipartUpload not in ascending order."""


class EntityTooSmallError(ObjectLayerError):
    """A part other than the last is smaller than the minimum part size."""


class RestoreNotAllowedError(ObjectLayerError):
    """RestoreObject of a version that is not on a cold tier (S3: InvalidObjectState)."""


class ObjectChangedError(ObjectLayerError):
    """The object was replaced while it was being read (the response is cut short)."""


class SseKeyRequiredError(ObjectLayerError):
    """An object stored with a customer's key (SSE-C) read or copied without it."""


class SseKeyMismatchError(ObjectLayerError):
    """The customer's key given does not open the object (S3: 403 AccessDenied)."""


class SseNotApplicableError(ObjectLayerError):
    """A customer's key given for an object that is not stored with one."""


class SseKmsError(ObjectLayerError):
    """The key service refused: no such key, no cluster key, a wrapped key that does not
    open (S3: KMS.NotFoundException for a key that is not there)."""

    not_found = False

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found
