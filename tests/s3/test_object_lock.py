"""S3 Object Lock through a real gateway with boto3: the bucket's configuration, retention
and legal hold of versions, who may remove or shorten what (GOVERNANCE with the bypass
and its permission, COMPLIANCE never), DeleteObjects' per-key refusals, the default
retention; and the pure decisions of blobstore/objects/lock.py."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from blobstore.catalog.records import ObjectRecord
from blobstore.objects.lock import (
    COMPLIANCE,
    GOVERNANCE,
    ObjectLockedError,
    Retention,
    check_removal,
    check_retention_change,
)
from tests.catalog.helpers import open_catalog
from tests.cluster.gateway import GatewayProcess
from tests.s3.test_post_object import post
from tests.s3.test_robustness import signed

DAY_S = 86_400
FAR = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)
FARTHER = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
NEAR = datetime.datetime(2098, 1, 1, tzinfo=datetime.UTC)


def code_of(call: Callable[[], Any]) -> str:
    """The S3 error code of a call, or "OK"."""
    try:
        call()
    except ClientError as e:
        return str(e.response["Error"]["Code"])
    return "OK"


def locked_bucket(s3: Any, name: str) -> str:
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


def retention(mode: str, until: datetime.datetime) -> dict[str, Any]:
    return {"Mode": mode, "RetainUntilDate": until}


# ---------------------------------------------------------------------- the bucket


def test_bucket_configuration_round_trip_and_errors(
    s3: Any, bucket: str, bucket_name: Callable[[], str]
) -> None:
    name = locked_bucket(s3, bucket_name())
    assert s3.get_bucket_versioning(Bucket=name)["Status"] == "Enabled"
    assert s3.get_object_lock_configuration(Bucket=name)["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled"
    }
    for period in ({"Days": 3}, {"Years": 2}):
        rule = {"DefaultRetention": {"Mode": GOVERNANCE, **period}}
        conf = {"ObjectLockEnabled": "Enabled", "Rule": rule}
        s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration=conf)
        assert s3.get_object_lock_configuration(Bucket=name)["ObjectLockConfiguration"] == conf

    def put(default: dict[str, Any], enabled: str = "Enabled") -> str:
        conf = {"ObjectLockEnabled": enabled, "Rule": {"DefaultRetention": default}}
        return code_of(
            lambda: s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration=conf)
        )

    assert put({"Mode": GOVERNANCE, "Days": 1, "Years": 1}) == "MalformedXML"
    assert put({"Mode": GOVERNANCE}) == "MalformedXML"
    assert put({"Mode": "governance", "Days": 1}) == "MalformedXML"
    assert put({"Mode": GOVERNANCE, "Days": 1}, enabled="Disabled") == "MalformedXML"
    assert put({"Mode": GOVERNANCE, "Days": 0}) == "InvalidRetentionPeriod"
    assert put({"Mode": COMPLIANCE, "Years": -1}) == "InvalidRetentionPeriod"
    # Versioning stays Enabled for good.
    suspend = {"Status": "Suspended"}
    assert (
        code_of(lambda: s3.put_bucket_versioning(Bucket=name, VersioningConfiguration=suspend))
        == "InvalidBucketState"
    )
    assert s3.get_bucket_versioning(Bucket=name)["Status"] == "Enabled"

    # A bucket created without: nothing to read, nothing to lock until versioning is on.
    enable = {"ObjectLockEnabled": "Enabled"}
    assert (
        code_of(lambda: s3.get_object_lock_configuration(Bucket=bucket))
        == "ObjectLockConfigurationNotFoundError"
    )
    assert (
        code_of(
            lambda: s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=enable)
        )
        == "InvalidBucketState"
    )
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    headers = {"ObjectLockMode": GOVERNANCE, "ObjectLockRetainUntilDate": FAR}
    assert code_of(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"v", **headers)) == (
        "InvalidRequest"
    )
    assert code_of(
        lambda: s3.put_object_retention(
            Bucket=bucket, Key="k", Retention=retention(GOVERNANCE, FAR)
        )
    ) == ("InvalidRequest")
    assert code_of(lambda: s3.get_object_legal_hold(Bucket=bucket, Key="k")) == "InvalidRequest"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=enable)
    assert s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"] == enable


def test_lock_subresources_name_no_other_operation(
    gateway: GatewayProcess, s3: Any, bucket_name: Callable[[], str]
) -> None:
    """A DELETE (or POST) naming them is no DeleteBucket or DeleteObject; on the wrong
    target they are no read of it."""
    name = locked_bucket(s3, bucket_name())
    s3.put_object(Bucket=name, Key="k", Body=b"v")
    for method, path in (
        ("DELETE", f"/{name}?object-lock"),
        ("DELETE", f"/{name}/k?retention"),
        ("DELETE", f"/{name}/k?legal-hold"),
        ("POST", f"/{name}/k?retention"),
        ("GET", f"/{name}/k?object-lock"),
        ("GET", f"/{name}?retention"),
        ("GET", f"/{name}/k?retention&tagging"),
    ):
        status, _, content = signed(gateway, method, path)
        assert status == 501 and b"<Code>NotImplemented</Code>" in content, (method, path)
    assert s3.get_object(Bucket=name, Key="k")["Body"].read() == b"v"


# ---------------------------------------------------------------------- versions


def test_retention_and_legal_hold_round_trip(s3: Any, bucket_name: Callable[[], str]) -> None:
    name = locked_bucket(s3, bucket_name())
    put = s3.put_object(
        Bucket=name,
        Key="k",
        Body=b"locked",
        ObjectLockMode=GOVERNANCE,
        ObjectLockRetainUntilDate=FAR,
        ObjectLockLegalHoldStatus="ON",
    )
    head = s3.head_object(Bucket=name, Key="k")
    assert head["ObjectLockMode"] == GOVERNANCE
    assert head["ObjectLockRetainUntilDate"] == FAR
    assert head["ObjectLockLegalHoldStatus"] == "ON"
    got = s3.get_object(Bucket=name, Key="k", VersionId=put["VersionId"])
    assert got["ObjectLockMode"] == GOVERNANCE and got["Body"].read() == b"locked"
    assert s3.get_object_retention(Bucket=name, Key="k")["Retention"] == retention(GOVERNANCE, FAR)
    assert s3.get_object_legal_hold(Bucket=name, Key="k")["LegalHold"] == {"Status": "ON"}
    s3.put_object_legal_hold(Bucket=name, Key="k", LegalHold={"Status": "OFF"})
    assert s3.get_object_legal_hold(Bucket=name, Key="k")["LegalHold"] == {"Status": "OFF"}
    assert "ObjectLockLegalHoldStatus" not in s3.head_object(Bucket=name, Key="k")

    # A version without: none to read; one set on it by its version id.
    plain = s3.put_object(Bucket=name, Key="k", Body=b"plain")["VersionId"]
    assert "ObjectLockMode" not in s3.head_object(Bucket=name, Key="k")
    assert (
        code_of(lambda: s3.get_object_retention(Bucket=name, Key="k", VersionId=plain))
        == "NoSuchObjectLockConfiguration"
    )
    s3.put_object_retention(
        Bucket=name, Key="k", VersionId=plain, Retention=retention(COMPLIANCE, NEAR)
    )
    assert s3.get_object_retention(Bucket=name, Key="k", VersionId=plain)["Retention"] == (
        retention(COMPLIANCE, NEAR)
    )
    assert s3.get_object_retention(Bucket=name, Key="k", VersionId=put["VersionId"])[
        "Retention"
    ] == retention(GOVERNANCE, FAR)

    past = datetime.datetime(2001, 1, 1, tzinfo=datetime.UTC)
    bad_writes = {
        "mode alone": {"ObjectLockMode": GOVERNANCE},
        "date alone": {"ObjectLockRetainUntilDate": FAR},
        "past date": {"ObjectLockMode": GOVERNANCE, "ObjectLockRetainUntilDate": past},
        "unknown mode": {"ObjectLockMode": "FOREVER", "ObjectLockRetainUntilDate": FAR},
        "legal hold": {"ObjectLockLegalHoldStatus": "MAYBE"},
    }
    for what, headers in bad_writes.items():
        call = lambda h=headers: s3.put_object(Bucket=name, Key="x", Body=b"", **h)  # noqa: E731
        assert code_of(call) == "InvalidArgument", what
    assert code_of(
        lambda: s3.put_object_retention(Bucket=name, Key="k", Retention=retention(GOVERNANCE, past))
    ) == ("InvalidArgument")
    assert code_of(
        lambda: s3.put_object_retention(Bucket=name, Key="k", Retention=retention("abc", FAR))
    ) == ("MalformedXML")
    assert code_of(
        lambda: s3.put_object_legal_hold(Bucket=name, Key="k", LegalHold={"Status": "abc"})
    ) == ("MalformedXML")


def test_an_upload_setting_a_retention_must_carry_a_checksum(
    gateway: GatewayProcess, s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = locked_bucket(s3, bucket_name())
    # This client sends a checksum only where the operation requires one (not PutObject).
    bare = gateway.client(request_checksum_calculation="when_required")
    headers = {"ObjectLockMode": GOVERNANCE, "ObjectLockRetainUntilDate": FAR}
    assert code_of(lambda: bare.put_object(Bucket=name, Key="k", Body=b"v", **headers)) == (
        "InvalidRequest"
    )
    md5 = base64.b64encode(hashlib.md5(b"v").digest()).decode()
    bare.put_object(Bucket=name, Key="k", Body=b"v", ContentMD5=md5, **headers)
    bare.put_object(Bucket=name, Key="plain", Body=b"v")  # no retention: no checksum needed
    s3.put_object(Bucket=name, Key="k", Body=b"v", **headers)  # boto3's default CRC32


# ---------------------------------------------------------------------- enforcement


def test_governance_yields_to_the_bypass_compliance_to_nobody(
    s3: Any, bucket_name: Callable[[], str]
) -> None:
    """The bootstrap user (an admin, the bucket's owner) included."""
    name = locked_bucket(s3, bucket_name())
    governed = s3.put_object(
        Bucket=name, Key="g", Body=b"g", ObjectLockMode=GOVERNANCE, ObjectLockRetainUntilDate=FAR
    )["VersionId"]
    complied = s3.put_object(
        Bucket=name, Key="c", Body=b"c", ObjectLockMode=COMPLIANCE, ObjectLockRetainUntilDate=FAR
    )["VersionId"]

    def delete(key: str, version_id: str, **bypass: Any) -> str:
        return code_of(
            lambda: s3.delete_object(Bucket=name, Key=key, VersionId=version_id, **bypass)
        )

    def change(key: str, version_id: str, value: dict[str, Any], **bypass: Any) -> str:
        return code_of(
            lambda: s3.put_object_retention(
                Bucket=name, Key=key, VersionId=version_id, Retention=value, **bypass
            )
        )

    # A delete without a version id only adds a marker; the locked version stays.
    marker = s3.delete_object(Bucket=name, Key="c")
    assert marker["DeleteMarker"] is True
    assert s3.get_object(Bucket=name, Key="c", VersionId=complied)["Body"].read() == b"c"
    s3.delete_object(Bucket=name, Key="c", VersionId=marker["VersionId"])

    # COMPLIANCE: extended only, by anyone; never shortened, removed or made GOVERNANCE.
    bypass = {"BypassGovernanceRetention": True}
    assert delete("c", complied) == "AccessDenied"
    assert delete("c", complied, **bypass) == "AccessDenied"
    assert change("c", complied, retention(COMPLIANCE, NEAR), **bypass) == "AccessDenied"
    assert change("c", complied, retention(GOVERNANCE, FARTHER), **bypass) == "AccessDenied"
    assert change("c", complied, {}, **bypass) == "AccessDenied"
    assert change("c", complied, retention(COMPLIANCE, FARTHER)) == "OK"
    assert s3.get_object_retention(Bucket=name, Key="c")["Retention"]["RetainUntilDate"] == FARTHER

    # GOVERNANCE: extended by anyone allowed to; shortened, removed or deleted with the bypass.
    assert delete("g", governed) == "AccessDenied"
    assert change("g", governed, retention(GOVERNANCE, NEAR)) == "AccessDenied"
    assert change("g", governed, retention(COMPLIANCE, FAR)) == "AccessDenied"
    assert change("g", governed, retention(GOVERNANCE, FARTHER)) == "OK"
    assert change("g", governed, retention(GOVERNANCE, NEAR), **bypass) == "OK"
    assert change("g", governed, {}, **bypass) == "OK"
    assert (
        code_of(lambda: s3.get_object_retention(Bucket=name, Key="g"))
        == "NoSuchObjectLockConfiguration"
    )
    assert delete("g", governed) == "OK"
    assert s3.get_object(Bucket=name, Key="c", VersionId=complied)["Body"].read() == b"c"


def _policy(s3: Any, bucket: str, actions: list[str]) -> None:
    statement = {
        "Effect": "Allow",
        "Principal": {"AWS": "other"},
        "Action": actions,
        "Resource": [f"arn:aws:s3:::{bucket}/*"],
    }
    document = {"Version": "2012-10-17", "Statement": [statement]}
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(document))


def test_the_bypass_needs_its_permission(
    s3: Any, other_s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = locked_bucket(s3, bucket_name())
    writes = ["s3:PutObject", "s3:GetObject", "s3:DeleteObjectVersion"]
    _policy(s3, name, writes)
    headers = {"ObjectLockMode": GOVERNANCE, "ObjectLockRetainUntilDate": FAR}

    def put() -> Any:
        return other_s3.put_object(Bucket=name, Key="k", Body=b"v", **headers)

    assert code_of(put) == "AccessDenied"  # setting a retention is s3:PutObjectRetention
    _policy(s3, name, [*writes, "s3:PutObjectRetention"])
    version_id = put()["VersionId"]

    def delete() -> str:
        return code_of(
            lambda: other_s3.delete_object(
                Bucket=name, Key="k", VersionId=version_id, BypassGovernanceRetention=True
            )
        )

    shorten = lambda: other_s3.put_object_retention(  # noqa: E731
        Bucket=name,
        Key="k",
        VersionId=version_id,
        Retention=retention(GOVERNANCE, NEAR),
        BypassGovernanceRetention=True,
    )
    assert delete() == "AccessDenied"
    assert code_of(shorten) == "AccessDenied"
    _policy(s3, name, [*writes, "s3:PutObjectRetention", "s3:BypassGovernanceRetention"])
    assert code_of(shorten) == "OK"
    assert delete() == "OK"
    assert code_of(lambda: s3.head_object(Bucket=name, Key="k", VersionId=version_id)) in (
        "404",
        "NoSuchVersion",
    )


def test_legal_hold_and_delete_objects_refuse_per_key(
    s3: Any, bucket_name: Callable[[], str]
) -> None:
    name = locked_bucket(s3, bucket_name())
    held = s3.put_object(Bucket=name, Key="held", Body=b"h")["VersionId"]
    s3.put_object_legal_hold(Bucket=name, Key="held", LegalHold={"Status": "ON"})
    governed = s3.put_object(
        Bucket=name, Key="gov", Body=b"g", ObjectLockMode=GOVERNANCE, ObjectLockRetainUntilDate=FAR
    )["VersionId"]
    free = s3.put_object(Bucket=name, Key="free", Body=b"f")["VersionId"]
    objects = [
        {"Key": "held", "VersionId": held},
        {"Key": "gov", "VersionId": governed},
        {"Key": "free", "VersionId": free},
    ]
    result = s3.delete_objects(Bucket=name, Delete={"Objects": objects})
    assert [d["Key"] for d in result["Deleted"]] == ["free"]
    assert sorted((e["Key"], e["Code"]) for e in result["Errors"]) == [
        ("gov", "AccessDenied"),
        ("held", "AccessDenied"),
    ]
    # The bypass lifts GOVERNANCE, never a legal hold.
    result = s3.delete_objects(
        Bucket=name, Delete={"Objects": objects[:2]}, BypassGovernanceRetention=True
    )
    assert [d["Key"] for d in result["Deleted"]] == ["gov"]
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("held", "AccessDenied")]
    assert code_of(
        lambda: s3.delete_object(
            Bucket=name, Key="held", VersionId=held, BypassGovernanceRetention=True
        )
    ) == ("AccessDenied")
    s3.put_object_legal_hold(Bucket=name, Key="held", LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=name, Key="held", VersionId=held)
    assert s3.list_object_versions(Bucket=name).get("Versions", []) == []


def test_default_retention_applies_to_new_versions(s3: Any, bucket_name: Callable[[], str]) -> None:
    name = locked_bucket(s3, bucket_name())
    conf = {
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": COMPLIANCE, "Days": 2}},
    }
    s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration=conf)

    def until_days(key: str) -> float:
        got = s3.get_object_retention(Bucket=name, Key=key)["Retention"]
        assert got["Mode"] == COMPLIANCE
        return float((got["RetainUntilDate"].timestamp() - time.time()) / DAY_S)

    before = time.time()
    s3.put_object(Bucket=name, Key="put", Body=b"p")
    form = s3.generate_presigned_post(name, "form", ExpiresIn=300)
    posted = post(form["url"], list(form["fields"].items()), b"f", filename="f.txt")
    assert posted.status_code == 204, posted.text
    s3.copy_object(Bucket=name, Key="copy", CopySource={"Bucket": name, "Key": "put"})
    upload = s3.create_multipart_upload(Bucket=name, Key="mpu")["UploadId"]
    part = s3.upload_part(Bucket=name, Key="mpu", UploadId=upload, PartNumber=1, Body=b"m")
    s3.complete_multipart_upload(
        Bucket=name,
        Key="mpu",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    elapsed_days = (time.time() - before) / DAY_S
    for key in ("put", "form", "copy", "mpu"):
        assert 2 - elapsed_days - 0.001 <= until_days(key) <= 2, key
    # A version naming its own keeps it, multipart ones included.
    s3.put_object(
        Bucket=name, Key="own", Body=b"o", ObjectLockMode=GOVERNANCE, ObjectLockRetainUntilDate=FAR
    )
    assert s3.get_object_retention(Bucket=name, Key="own")["Retention"] == retention(
        GOVERNANCE, FAR
    )
    upload = s3.create_multipart_upload(
        Bucket=name, Key="own-mpu", ObjectLockMode=COMPLIANCE, ObjectLockRetainUntilDate=NEAR
    )["UploadId"]
    part = s3.upload_part(Bucket=name, Key="own-mpu", UploadId=upload, PartNumber=1, Body=b"m")
    s3.complete_multipart_upload(
        Bucket=name,
        Key="own-mpu",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    assert s3.get_object_retention(Bucket=name, Key="own-mpu")["Retention"] == retention(
        COMPLIANCE, NEAR
    )
    versions = s3.list_object_versions(Bucket=name)["Versions"]

    def delete(version: dict[str, Any]) -> Callable[[], Any]:
        return lambda: s3.delete_object(
            Bucket=name, Key=version["Key"], VersionId=version["VersionId"]
        )

    assert [code_of(delete(v)) for v in versions] == ["AccessDenied"] * len(versions)


# ---------------------------------------------------------------------- decisions


def _version(mode: str = "", until: float = 0.0, hold: bool = False) -> ObjectRecord:
    return ObjectRecord("b", "k", "v1", lock_mode=mode, lock_until=until, legal_hold=hold)


@pytest.mark.parametrize(
    ("record", "bypass", "removable"),
    [
        (_version(), False, True),
        (_version(GOVERNANCE, 200.0), False, False),
        (_version(GOVERNANCE, 200.0), True, True),
        (_version(COMPLIANCE, 200.0), True, False),
        (_version(COMPLIANCE, 100.0), False, True),  # retain-until reached
        (_version(GOVERNANCE, 50.0, hold=True), True, False),
        (_version(hold=True), True, False),
    ],
)
def test_who_may_remove_a_version_at_100(
    record: ObjectRecord, bypass: bool, removable: bool
) -> None:
    try:
        check_removal(record, 100.0, bypass_governance=bypass)
    except ObjectLockedError:
        assert not removable
    else:
        assert removable


@pytest.mark.parametrize(
    ("record", "new", "bypass", "allowed"),
    [
        (_version(COMPLIANCE, 200.0), Retention(COMPLIANCE, 300.0), False, True),
        (_version(COMPLIANCE, 200.0), Retention(COMPLIANCE, 150.0), True, False),
        (_version(COMPLIANCE, 200.0), Retention(GOVERNANCE, 300.0), True, False),
        (_version(COMPLIANCE, 200.0), None, True, False),
        (_version(COMPLIANCE, 50.0), None, False, True),  # over already
        (_version(GOVERNANCE, 200.0), Retention(GOVERNANCE, 300.0), False, True),
        (_version(GOVERNANCE, 200.0), Retention(GOVERNANCE, 150.0), False, False),
        (_version(GOVERNANCE, 200.0), Retention(COMPLIANCE, 300.0), False, False),
        (_version(GOVERNANCE, 200.0), None, True, True),
        (_version(), Retention(GOVERNANCE, 150.0), False, True),
    ],
)
def test_which_retention_changes_are_allowed_at_100(
    record: ObjectRecord, new: Retention | None, bypass: bool, allowed: bool
) -> None:
    try:
        check_retention_change(record, new, 100.0, bypass_governance=bypass)
    except ObjectLockedError:
        assert not allowed
    else:
        assert allowed


def test_lock_fields_are_absent_from_records_without_them() -> None:
    plain = _version()
    assert not {"lm", "lu", "lh"} & plain.to_dict().keys()
    locked = _version(COMPLIANCE, 200.0, hold=True)
    assert ObjectRecord.decode(locked.encode()) == locked


def test_a_hold_committed_before_the_delete_is_seen_by_its_commit(zk_connect: str) -> None:
    """Two catalogs (two gateways): one reads the version (its page cached), the other
    puts a legal hold on it, then the first deletes the version. The guard runs inside
    the delete's compare-and-set: whatever the first catalog had cached, the commit
    decides on the version as committed, and refuses."""

    async def main() -> None:
        async with open_catalog(zk_connect) as first, open_catalog(zk_connect) as second:
            await first.create_bucket("locked", "owner", object_lock={"enabled": True})
            put = await first.put_object(ObjectRecord("locked", "k", size=0))
            version_id = put.record.version_id
            read = await first.get_object("locked", "k", version_id)
            assert await second.swap_object(read, replace(read, legal_hold=True))
            seen: list[bool] = []

            def guard(record: ObjectRecord) -> None:
                seen.append(record.legal_hold)
                check_removal(record, time.time(), bypass_governance=False)

            with pytest.raises(ObjectLockedError):
                await first.delete_object("locked", "k", version_id, guard=guard)
            assert seen[-1] is True
            kept = await second.get_object("locked", "k", version_id)
            assert kept.legal_hold

    asyncio.run(asyncio.wait_for(main(), 60))
