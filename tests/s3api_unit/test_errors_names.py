"""Error documents, the domain error table, and the limits' validation helpers."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest

from blobstore.catalog import errors as catalog_errors
from blobstore.catalog.records import ObjectRecord
from blobstore.ledger import errors as ledger_errors
from blobstore.runtime.zk_session import ZooKeeperRequestTooLargeError
from s3api import limits
from s3api.errors import DOMAIN_ERROR_CODES, ERROR_SPECS, S3Error, render_error, to_s3_error


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AccessDenied", 403),
        ("BadDigest", 400),
        ("BucketAlreadyExists", 409),
        ("BucketAlreadyOwnedByYou", 409),
        ("BucketNotEmpty", 409),
        ("EntityTooLarge", 400),
        ("EntityTooSmall", 400),
        ("IncompleteBody", 400),
        ("InternalError", 500),
        ("InvalidAccessKeyId", 403),
        ("InvalidArgument", 400),
        ("InvalidBucketName", 400),
        ("InvalidDigest", 400),
        ("InvalidPart", 400),
        ("InvalidPartOrder", 400),
        ("InvalidRange", 416),
        ("InvalidRequest", 400),
        ("KeyTooLongError", 400),
        ("MalformedXML", 400),
        ("MetadataTooLarge", 400),
        ("MethodNotAllowed", 405),
        ("MissingContentLength", 411),
        ("NoSuchBucket", 404),
        ("NoSuchKey", 404),
        ("NoSuchUpload", 404),
        ("NoSuchVersion", 404),
        ("NoSuchTagSet", 404),
        ("NoSuchCORSConfiguration", 404),
        ("NoSuchLifecycleConfiguration", 404),
        ("NotImplemented", 501),
        ("NotModified", 304),
        ("PreconditionFailed", 412),
        ("RequestTimeTooSkewed", 403),
        ("SignatureDoesNotMatch", 403),
        ("SlowDown", 503),
        ("XAmzContentSHA256Mismatch", 400),
        ("AuthorizationHeaderMalformed", 400),
        ("AuthorizationQueryParametersError", 400),
        ("InvalidTag", 400),
        ("TooManyParts", 400),
        ("InvalidObjectState", 403),
    ],
)
def test_declared_statuses(code: str, status: int) -> None:
    assert ERROR_SPECS[code].status == status
    assert S3Error(code).status == status


def test_render_error_shape() -> None:
    err = S3Error("NoSuchKey", resource="/b/k<", Key="k<", BucketName="b")
    body = render_error(err, "req-1", host_id="host-1")
    root = ElementTree.fromstring(body)
    assert root.tag == "Error"
    assert [child.tag for child in root] == [
        "Code",
        "Message",
        "Key",
        "BucketName",
        "Resource",
        "RequestId",
        "HostId",
    ]
    assert root.findtext("Code") == "NoSuchKey"
    assert root.findtext("Message") == "The specified key does not exist."
    assert root.findtext("Key") == "k<"
    assert root.findtext("Resource") == "/b/k<"
    assert render_error(S3Error("NotModified"), "r") == b""
    assert (
        ElementTree.fromstring(render_error(S3Error("SlowDown"), "r", "/b")).findtext("Resource")
        == "/b"
    )


def test_undeclared_code_is_a_bug() -> None:
    with pytest.raises(AssertionError):
        S3Error("NoSuchThing")


class SpecialNoSuchBucketError(catalog_errors.NoSuchBucketError):
    pass


def test_domain_errors_map_by_class() -> None:
    assert to_s3_error(catalog_errors.NoSuchBucketError("b1")).code == "NoSuchBucket"
    assert to_s3_error(SpecialNoSuchBucketError("b1")).code == "NoSuchBucket"
    assert to_s3_error(catalog_errors.CatalogBusyError()).status == 503
    assert to_s3_error(ledger_errors.NotEnoughBookiesError("none")).code == "ServiceUnavailable"
    # A class that only shares a domain error's name is not that error.
    assert to_s3_error(type("CatalogBusyError", (Exception,), {})()).code == "InternalError"
    assert to_s3_error(type("NotEnoughBookiesError", (Exception,), {})()).status == 500
    assert to_s3_error(ValueError("boom")).code == "InternalError"
    assert (
        to_s3_error(catalog_errors.BucketAlreadyExistsError("b1", "bob"), requester="alice").code
        == "BucketAlreadyExists"
    )
    assert (
        to_s3_error(catalog_errors.BucketAlreadyExistsError("b1", "alice"), requester="alice").code
        == "BucketAlreadyOwnedByYou"
    )
    marker = to_s3_error(
        catalog_errors.DeleteMarkerError(ObjectRecord("b1", "k1", "v9", is_delete_marker=True))
    )
    assert marker.code == "NoSuchKey"
    assert marker.headers == {"x-amz-delete-marker": "true", "x-amz-version-id": "v9"}
    too_large = to_s3_error(ZooKeeperRequestTooLargeError(5 << 20, 4 << 20, "MultiTransaction"))
    assert (too_large.code, too_large.status) == ("InvalidRequest", 400)
    assert (
        too_large.message == "The request's catalog update is 5242880 bytes; the limit is 4194304"
    )
    original = S3Error("AccessDenied")
    assert to_s3_error(original) is original
    assert set(DOMAIN_ERROR_CODES.values()) <= set(ERROR_SPECS)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("abc", True),
        ("my-bucket.example-1", True),
        ("ab", False),
        ("a" * 64, False),
        ("Upper", False),
        ("-start", False),
        ("end-", False),
        ("a..b", False),
        ("a.-b", False),
        ("192.168.1.1", False),
        ("xn--abc", False),
        ("under_score", False),
        ("bucket-s3alias", False),
    ],
)
def test_bucket_names(name: str, valid: bool) -> None:
    if valid:
        limits.validate_bucket_name(name)
    else:
        with pytest.raises(S3Error) as caught:
            limits.validate_bucket_name(name)
        assert caught.value.code == "InvalidBucketName"


def test_key_and_size_limits() -> None:
    limits.validate_key("k" * 1024)
    limits.validate_key("é" * 512)
    for key, code in (
        ("k" * 1025, "KeyTooLongError"),
        ("é" * 513, "KeyTooLongError"),
        ("", "InvalidArgument"),
    ):
        with pytest.raises(S3Error) as caught:
            limits.validate_key(key)
        assert caught.value.code == code
    limits.validate_content_length(limits.PUT_OBJECT_SIZE_MAX)
    with pytest.raises(S3Error) as caught:
        limits.validate_content_length(limits.PUT_OBJECT_SIZE_MAX + 1)
    assert caught.value.code == "EntityTooLarge"


def test_user_metadata() -> None:
    headers = {"x-amz-meta-Colour": "blue", "content-type": "a/b", "X-Amz-Meta-n": "1"}
    assert limits.user_metadata(headers) == {"colour": "blue", "n": "1"}
    assert limits.user_metadata([("x-amz-meta-a", "1"), ("x-amz-meta-a", "2")]) == {"a": "1,2"}
    limits.user_metadata({"x-amz-meta-k": "v" * 2047})
    with pytest.raises(S3Error) as caught:
        limits.user_metadata({"x-amz-meta-k": "v" * 2048})
    assert caught.value.code == "MetadataTooLarge"


def test_counts_and_parts() -> None:
    assert limits.parse_part_number("1") == 1
    assert limits.parse_part_number("10000") == 10000
    for bad in ("0", "10001", "x", None, "-1", "²"):
        with pytest.raises(S3Error) as caught:
            limits.parse_part_number(bad)
        assert caught.value.code == "InvalidArgument"
    assert limits.parse_max_count(None) == 1000
    assert limits.parse_max_count("5000") == 1000
    assert limits.parse_max_count("0") == 0
    with pytest.raises(S3Error):
        limits.parse_max_count("-1")
    mib = 1 << 20
    assert limits.check_complete_part_sizes([(1, 5 * mib, "a"), (2, 1, "b")]) == 5 * mib + 1
    with pytest.raises(S3Error) as caught:
        limits.check_complete_part_sizes([(1, 5 * mib - 1, "a"), (2, 1, "b")])
    assert caught.value.code == "EntityTooSmall"
    assert caught.value.fields["PartNumber"] == "1"


def test_real_domain_errors_map() -> None:
    from blobstore.objects import errors as object_errors

    err = to_s3_error(catalog_errors.NoSuchBucketError("b1"))
    assert (err.code, err.fields) == ("NoSuchBucket", {"BucketName": "b1"})
    err = to_s3_error(catalog_errors.NoSuchKeyError("b1", "k1"))
    assert (err.code, err.fields) == ("NoSuchKey", {"BucketName": "b1", "Key": "k1"})
    err = to_s3_error(catalog_errors.NoSuchUploadError("b1", "u1"))
    assert (err.code, err.fields["UploadId"]) == ("NoSuchUpload", "u1")
    assert to_s3_error(catalog_errors.CatalogBusyError()).code == "SlowDown"
    assert to_s3_error(catalog_errors.CatalogUnavailableError()).status == 503
    assert to_s3_error(
        catalog_errors.BucketAlreadyExistsError("b1", "alice"), requester="alice"
    ).code == ("BucketAlreadyOwnedByYou")
    assert to_s3_error(ledger_errors.LedgerFencedError("fenced", ledger_id=7)).code == "SlowDown"
    few = to_s3_error(ledger_errors.NotEnoughBookiesError("need 3 writable bookies, 0 available"))
    assert (few.code, few.status) == ("ServiceUnavailable", 503)
    assert "cannot store new data now: too few writable bookies." in few.message
    # An add that failed for want of a replacement says why, not "reduce your rate": how
    # many bookies are read-only, not their addresses (the gateway's log has those).
    wrapped = ledger_errors.AddOutcomeUnknownError("no ensemble change within 10s", ledger_id=1)
    wrapped.__cause__ = ledger_errors.NotEnoughBookiesError(
        "no writable bookie to replace b1; 2 read-only: b1, b2", read_only=("b1", "b2")
    )
    message = to_s3_error(wrapped).message
    assert "too few writable bookies: 2 read-only (disk full or failing)" in message
    assert "b1" not in message
    assert to_s3_error(ledger_errors.AddOutcomeUnknownError("lost", ledger_id=1)).code == (
        "SlowDown"
    )
    assert to_s3_error(ledger_errors.EntryNotFoundError("gone")).code == "InternalError"
    err = to_s3_error(object_errors.EntityTooLargeError(5))
    assert (err.code, err.fields) == ("EntityTooLarge", {"MaxSizeAllowed": "5"})
