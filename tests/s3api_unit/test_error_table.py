"""The table of domain errors: keyed by class, it cannot name a code that does not exist,
a subclass answers like its base, and each answer built from an exception's data (a
message, a header, the requester) stays what S3 clients see."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from blobstore.catalog import errors as catalog_errors
from blobstore.catalog.records import ObjectRecord
from blobstore.ledger import errors as ledger_errors
from blobstore.objects import errors as object_errors
from blobstore.runtime.zk_session import ZooKeeperRequestTooLargeError
from blobstore.tier.fs import TierUnavailableError
from s3api.errors import DOMAIN_ERROR_CODES, ERROR_SPECS, S3Error, to_s3_error

TABLE = sorted(DOMAIN_ERROR_CODES.items(), key=lambda row: row[0].__qualname__)
TABLE_IDS = [cls.__name__ for cls, _ in TABLE]

# Instances of the rows whose answer reads the exception's data; the other rows answer
# from the class alone, so an instance made without its constructor's data will do.
SAMPLES: dict[type[BaseException], Callable[[], BaseException]] = {
    catalog_errors.BucketAlreadyExistsError: lambda: catalog_errors.BucketAlreadyExistsError(
        "b", "o"
    ),
    catalog_errors.DeleteMarkerError: lambda: catalog_errors.DeleteMarkerError(
        ObjectRecord("b", "k", "v", is_delete_marker=True)
    ),
    catalog_errors.ObjectKeyTooLongError: lambda: catalog_errors.ObjectKeyTooLongError(
        "k", 2000, 1024
    ),
    ZooKeeperRequestTooLargeError: lambda: ZooKeeperRequestTooLargeError(2, 1, "Create"),
    TierUnavailableError: lambda: TierUnavailableError("COLD", "read", OSError("unreachable")),
    ledger_errors.NotEnoughBookiesError: lambda: ledger_errors.NotEnoughBookiesError(
        "none", read_only=("b1",)
    ),
}


def _sample(cls: type[BaseException]) -> BaseException:
    """A new instance of cls."""
    make = SAMPLES.get(cls)
    return make() if make is not None else cls.__new__(cls)


def _shape(error: S3Error) -> tuple[object, ...]:
    return (error.code, error.status, error.message, error.fields, error.headers)


@pytest.mark.parametrize(("cls", "code"), TABLE, ids=TABLE_IDS)
def test_every_mapped_class_answers_a_declared_code(cls: type[BaseException], code: str) -> None:
    assert issubclass(cls, BaseException)
    assert code in ERROR_SPECS
    assert code != "InternalError", "an unmapped class answers InternalError already"
    answer = to_s3_error(_sample(cls))
    assert (answer.code, answer.status) == (code, ERROR_SPECS[code].status)


@pytest.mark.parametrize(("cls", "code"), TABLE, ids=TABLE_IDS)
def test_a_subclass_answers_like_its_base(cls: type[BaseException], code: str) -> None:
    base = _sample(cls)
    subclass = type(f"Special{cls.__name__}", (cls,), {})
    derived = subclass.__new__(subclass, *base.args)
    vars(derived).update(vars(base))  # the same data, in the subclass
    assert _shape(to_s3_error(derived)) == _shape(to_s3_error(base))


@pytest.mark.parametrize(("cls", "code"), TABLE, ids=TABLE_IDS)
def test_a_look_alike_by_name_is_not_the_domain_error(cls: type[BaseException], code: str) -> None:
    look_alike = type(cls.__name__, (Exception,), {})
    assert to_s3_error(look_alike()).code == "InternalError"


def _wrapped_in_add_failure(cause: BaseException) -> BaseException:
    wrapper = ledger_errors.AddOutcomeUnknownError("no ensemble change within 10s")
    wrapper.__cause__ = cause
    return wrapper


NO_WRITABLE_BOOKIES = (
    "The cluster cannot store new data now: too few writable bookies. "
    "Retry later; an operator must add bookies or free their disks."
)
READ_ONLY_BOOKIES = (
    "The cluster cannot store new data now: too few writable bookies: 2 read-only "
    "(disk full or failing). Retry later; an operator must add bookies or free their disks."
)


@pytest.mark.parametrize(
    ("exc", "requester", "code", "status", "message", "fields", "headers"),
    [
        pytest.param(
            catalog_errors.BucketAlreadyExistsError("b1", "alice"),
            "alice",
            "BucketAlreadyOwnedByYou",
            409,
            ERROR_SPECS["BucketAlreadyOwnedByYou"].message,
            {},
            {},
            id="own-bucket",
        ),
        pytest.param(
            catalog_errors.BucketAlreadyExistsError("b1", "alice"),
            "bob",
            "BucketAlreadyExists",
            409,
            ERROR_SPECS["BucketAlreadyExists"].message,
            {},
            {},
            id="someone-elses-bucket",
        ),
        pytest.param(
            catalog_errors.BucketAlreadyExistsError("b1", "alice"),
            None,
            "BucketAlreadyExists",
            409,
            ERROR_SPECS["BucketAlreadyExists"].message,
            {},
            {},
            id="bucket-exists-anonymous",
        ),
        pytest.param(
            catalog_errors.DeleteMarkerError(ObjectRecord("b1", "k1", "v9", is_delete_marker=True)),
            None,
            "NoSuchKey",
            404,
            ERROR_SPECS["NoSuchKey"].message,
            {"Key": "k1"},
            {"x-amz-delete-marker": "true", "x-amz-version-id": "v9"},
            id="delete-marker",
        ),
        pytest.param(
            catalog_errors.DeleteMarkerError(ObjectRecord("b1", "", "", is_delete_marker=True)),
            None,
            "NoSuchKey",
            404,
            ERROR_SPECS["NoSuchKey"].message,
            {},
            {"x-amz-delete-marker": "true"},
            id="delete-marker-without-version-or-key",
        ),
        pytest.param(
            ZooKeeperRequestTooLargeError(5 << 20, 4 << 20, "MultiTransaction"),
            None,
            "InvalidRequest",
            400,
            "The request's catalog update is 5242880 bytes; the limit is 4194304",
            {},
            {},
            id="zookeeper-request-too-large",
        ),
        pytest.param(
            ledger_errors.NotEnoughBookiesError("need 3 writable bookies, 0 available"),
            None,
            "ServiceUnavailable",
            503,
            NO_WRITABLE_BOOKIES,
            {},
            {},
            id="not-enough-bookies",
        ),
        pytest.param(
            _wrapped_in_add_failure(
                ledger_errors.NotEnoughBookiesError("2 read-only: b1, b2", read_only=("b1", "b2"))
            ),
            None,
            "ServiceUnavailable",
            503,
            READ_ONLY_BOOKIES,
            {},
            {},
            id="add-failed-for-want-of-bookies",
        ),
        pytest.param(
            _wrapped_in_add_failure(ValueError("unrelated cause")),
            None,
            "SlowDown",
            503,
            ERROR_SPECS["SlowDown"].message,
            {},
            {},
            id="add-failed-for-another-cause",
        ),
        pytest.param(
            catalog_errors.ObjectKeyTooLongError("k" * 1025, 1025, 1024),
            None,
            "KeyTooLongError",
            400,
            "Your key is too long",
            {},
            {},
            id="key-too-long",
        ),
        pytest.param(
            catalog_errors.InvalidObjectKeyError("", "must not be empty"),
            None,
            "InvalidArgument",
            400,
            "Invalid Argument",
            {"Key": ""},
            {},
            id="key-empty",
        ),
        pytest.param(
            object_errors.EntityTooLargeError(5),
            None,
            "EntityTooLarge",
            400,
            ERROR_SPECS["EntityTooLarge"].message,
            {"MaxSizeAllowed": "5"},
            {},
            id="entity-too-large",
        ),
        pytest.param(
            catalog_errors.InvalidBucketNameError("B", "uppercase"),
            None,
            "InvalidBucketName",
            400,
            ERROR_SPECS["InvalidBucketName"].message,
            {"BucketName": "B"},
            {},
            id="invalid-bucket-name",
        ),
        pytest.param(
            catalog_errors.BucketNotEmptyError("b1", "uploads"),
            None,
            "BucketNotEmpty",
            409,
            ERROR_SPECS["BucketNotEmpty"].message,
            {"BucketName": "b1"},
            {},
            id="bucket-not-empty",
        ),
        pytest.param(
            catalog_errors.NoSuchVersionError("b1", "k1", "v1"),
            None,
            "NoSuchVersion",
            404,
            ERROR_SPECS["NoSuchVersion"].message,
            {"BucketName": "b1", "Key": "k1", "VersionId": "v1"},
            {},
            id="no-such-version",
        ),
    ],
)
def test_an_answer_built_from_the_exception_keeps_its_shape(
    exc: BaseException,
    requester: str | None,
    code: str,
    status: int,
    message: str,
    fields: dict[str, str],
    headers: dict[str, str],
) -> None:
    answer = to_s3_error(exc, requester=requester)
    assert (answer.code, answer.status, answer.message) == (code, status, message)
    assert (answer.fields, answer.headers) == (fields, headers)


def test_an_s3_error_is_its_own_answer() -> None:
    error = S3Error("AccessDenied")
    assert to_s3_error(error) is error
