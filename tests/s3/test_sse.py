"""Server-side encryption through boto3 against the real gateway and bookies: SSE-S3,
SSE-KMS and SSE-C on PUT, GET, HEAD, ranges, multipart and copies between modes; S3's
errors for each; bucket default encryption; key rotation; and no plaintext on the
bookies' disks."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from blobstore.kms.keys import KeyStore
from blobstore.runtime.sealing import load_cluster_key
from blobstore.runtime.zk import ZooKeeperClient
from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import PART_BYTES_MIN, S3Cluster

SSE = "x-amz-server-side-encryption"
KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))


def _error(call: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ClientError) as caught:
        call(**kwargs)
    response = caught.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def _headers(response: dict[str, Any]) -> dict[str, str]:
    return dict(response["ResponseMetadata"]["HTTPHeaders"])


def _customer(key: bytes) -> dict[str, Any]:
    """boto3 sends the key in base64 with its MD5."""
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}


def _copy_source_customer(key: bytes) -> dict[str, Any]:
    return {"CopySourceSSECustomerAlgorithm": "AES256", "CopySourceSSECustomerKey": key}


def _kms(cluster: S3Cluster, action: str, key_ref: str = "") -> str:
    """Create a key service key (its id) or rotate one, as `blobstore admin kms` does."""

    async def run() -> str:
        zk = ZooKeeperClient(cluster.zk)
        await zk.start()
        try:
            store = KeyStore(zk, load_cluster_key(cluster.key_file))
            key = await (store.create() if action == "create" else store.rotate(key_ref))
            return key.key_id
        finally:
            await zk.stop()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def sse_c_gateway(s3_cluster: S3Cluster) -> GatewayProcess:
    """A plain-HTTP gateway that takes SSE-C anyway (BLOBSTORE_GATEWAY_SSE_C_OVER_HTTP),
    as a gateway behind a TLS proxy would."""
    return s3_cluster.start_gateway("gateway-sse-c", env={"BLOBSTORE_GATEWAY_SSE_C_OVER_HTTP": "1"})


@pytest.fixture(scope="module")
def c3(sse_c_gateway: GatewayProcess) -> Any:
    return sse_c_gateway.client()


@pytest.fixture
def c3_bucket(c3: Any, bucket_name: Any) -> Iterator[str]:
    name = bucket_name()
    c3.create_bucket(Bucket=name)
    yield name


def test_sse_s3_round_trip_with_ranges(s3: Any, bucket: str) -> None:
    body = os.urandom(300_000)  # several 64 KiB chunks, several 16 KiB entries
    put = s3.put_object(Bucket=bucket, Key="k", Body=body, ServerSideEncryption="AES256")
    assert put["ServerSideEncryption"] == "AES256"
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["ServerSideEncryption"] == "AES256"
    assert head["ContentLength"] == len(body)
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["ServerSideEncryption"] == "AES256"
    assert got["Body"].read() == body
    for first, last in ((0, 0), (65_535, 65_536), (100_000, 299_999), (131_072, 131_072 + 9)):
        part = s3.get_object(Bucket=bucket, Key="k", Range=f"bytes={first}-{last}")
        assert part["Body"].read() == body[first : last + 1], (first, last)
    small = os.urandom(4096)
    s3.put_object(Bucket=bucket, Key="small", Body=small, ServerSideEncryption="AES256")
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == small
    s3.put_object(Bucket=bucket, Key="empty", Body=b"", ServerSideEncryption="AES256")
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""


def test_sse_s3_multipart_with_part_reads(s3: Any, bucket: str) -> None:
    parts = [os.urandom(PART_BYTES_MIN + 1000), os.urandom(PART_BYTES_MIN + 7), os.urandom(5)]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ServerSideEncryption="AES256")
    assert upload["ServerSideEncryption"] == "AES256"
    done = []
    for number, data in enumerate(parts, start=1):
        answer = s3.upload_part(
            Bucket=bucket, Key="mp", UploadId=upload["UploadId"], PartNumber=number, Body=data
        )
        assert answer["ServerSideEncryption"] == "AES256"
        done.append({"PartNumber": number, "ETag": answer["ETag"]})
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload["UploadId"], MultipartUpload={"Parts": done}
    )
    whole = b"".join(parts)
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == whole
    cut = len(parts[0])
    ranged = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={cut - 10}-{cut + 10}")
    assert ranged["Body"].read() == whole[cut - 10 : cut + 11]
    assert s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)["Body"].read() == parts[1]


def test_sse_kms_round_trip_rotation_and_unknown_key(
    s3: Any, bucket: str, s3_cluster: S3Cluster
) -> None:
    key_id = _kms(s3_cluster, "create")
    body = os.urandom(100_000)
    put = s3.put_object(
        Bucket=bucket, Key="k", Body=body, ServerSideEncryption="aws:kms", SSEKMSKeyId=key_id
    )
    assert put["ServerSideEncryption"] == "aws:kms"
    assert put["SSEKMSKeyId"] == key_id
    head = s3.head_object(Bucket=bucket, Key="k")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", key_id)
    _kms(s3_cluster, "rotate", key_id)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == body  # older version
    after = os.urandom(5000)
    s3.put_object(
        Bucket=bucket, Key="k2", Body=after, ServerSideEncryption="aws:kms", SSEKMSKeyId=key_id
    )
    assert s3.get_object(Bucket=bucket, Key="k2")["Body"].read() == after
    # aws:kms without a key: the built-in key, as S3 uses its managed one.
    managed = s3.put_object(Bucket=bucket, Key="m", Body=b"m", ServerSideEncryption="aws:kms")
    assert managed["ServerSideEncryption"] == "aws:kms" and managed["SSEKMSKeyId"]
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == b"m"
    unknown = "11111111-2222-3333-4444-555555555555"
    assert _error(
        s3.put_object,
        Bucket=bucket,
        Key="k3",
        Body=b"x",
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=unknown,
    ) == (400, "KMS.NotFoundException")


def test_sse_c_round_trip_and_key_errors(c3: Any, c3_bucket: str) -> None:
    body = os.urandom(200_000)
    put = c3.put_object(Bucket=c3_bucket, Key="k", Body=body, **_customer(KEY_A))
    assert put["SSECustomerAlgorithm"] == "AES256"
    md5 = base64.b64encode(hashlib.md5(KEY_A).digest()).decode()
    assert put["SSECustomerKeyMD5"] == md5
    got = c3.get_object(Bucket=c3_bucket, Key="k", **_customer(KEY_A))
    assert got["Body"].read() == body
    assert got["SSECustomerKeyMD5"] == md5
    ranged = c3.get_object(Bucket=c3_bucket, Key="k", Range="bytes=70000-70099", **_customer(KEY_A))
    assert ranged["Body"].read() == body[70000:70100]
    assert c3.head_object(Bucket=c3_bucket, Key="k", **_customer(KEY_A))["ContentLength"] == len(
        body
    )
    assert _error(c3.get_object, Bucket=c3_bucket, Key="k") == (400, "InvalidRequest")
    assert _error(c3.head_object, Bucket=c3_bucket, Key="k")[0] == 400
    assert _error(c3.get_object, Bucket=c3_bucket, Key="k", **_customer(KEY_B)) == (
        403,
        "AccessDenied",
    )
    attributes = {"Bucket": c3_bucket, "Key": "k", "ObjectAttributes": ["ObjectSize"]}
    assert _error(c3.get_object_attributes, **attributes)[0] == 400
    encoded = {  # boto3 encodes the key itself for GET and PUT, not here
        "SSECustomerAlgorithm": "AES256",
        "SSECustomerKey": base64.b64encode(KEY_A).decode(),
        "SSECustomerKeyMD5": md5,
    }
    assert c3.get_object_attributes(**attributes, **encoded)["ObjectSize"] == len(body)
    c3.put_object(Bucket=c3_bucket, Key="plain", Body=b"in clear")
    assert _error(c3.get_object, Bucket=c3_bucket, Key="plain", **_customer(KEY_A)) == (
        400,
        "InvalidRequest",
    )


def test_sse_c_key_md5_and_http_rules(s3: Any, bucket: str, c3: Any, c3_bucket: str) -> None:
    # Over plain HTTP the default gateway refuses SSE-C, as S3 does.
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"x", **_customer(KEY_A)) == (
        400,
        "InvalidRequest",
    )
    bad_md5 = {
        "SSECustomerAlgorithm": "AES256",
        "SSECustomerKey": base64.b64encode(KEY_A).decode(),
        "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(KEY_B).digest()).decode(),
    }
    assert _error(c3.put_object, Bucket=c3_bucket, Key="k", Body=b"x", **bad_md5) == (
        400,
        "InvalidArgument",
    )
    short_key = _customer(b"k" * 16)
    assert _error(c3.put_object, Bucket=c3_bucket, Key="k", Body=b"x", **short_key) == (
        400,
        "InvalidArgument",
    )


def test_sse_c_multipart_needs_the_key_on_every_part(c3: Any, c3_bucket: str) -> None:
    upload = c3.create_multipart_upload(Bucket=c3_bucket, Key="mp", **_customer(KEY_A))
    upload_id = upload["UploadId"]
    data = [os.urandom(PART_BYTES_MIN), os.urandom(1234)]
    assert _error(
        c3.upload_part, Bucket=c3_bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=data[0]
    ) == (400, "InvalidRequest")
    assert _error(
        c3.upload_part,
        Bucket=c3_bucket,
        Key="mp",
        UploadId=upload_id,
        PartNumber=1,
        Body=data[0],
        **_customer(KEY_B),
    ) == (403, "AccessDenied")
    done = []
    for number, piece in enumerate(data, start=1):
        answer = c3.upload_part(
            Bucket=c3_bucket,
            Key="mp",
            UploadId=upload_id,
            PartNumber=number,
            Body=piece,
            **_customer(KEY_A),
        )
        done.append({"PartNumber": number, "ETag": answer["ETag"]})
    c3.complete_multipart_upload(
        Bucket=c3_bucket, Key="mp", UploadId=upload_id, MultipartUpload={"Parts": done}
    )
    got = c3.get_object(Bucket=c3_bucket, Key="mp", **_customer(KEY_A))
    assert got["Body"].read() == b"".join(data)


def test_copies_between_modes(c3: Any, c3_bucket: str, s3_cluster: S3Cluster) -> None:
    body = os.urandom(150_000)
    c3.put_object(Bucket=c3_bucket, Key="plain", Body=body)
    src = {"Bucket": c3_bucket, "Key": "plain"}
    copied = c3.copy_object(
        Bucket=c3_bucket, Key="s3", CopySource=src, ServerSideEncryption="AES256"
    )
    assert copied["ServerSideEncryption"] == "AES256"
    c3.copy_object(
        Bucket=c3_bucket,
        Key="c",
        CopySource={"Bucket": c3_bucket, "Key": "s3"},
        **_customer(KEY_A),
    )
    assert _error(c3.get_object, Bucket=c3_bucket, Key="c")[0] == 400
    # SSE-C to SSE-C under another key, then back to clear: each step opens the source.
    c3.copy_object(
        Bucket=c3_bucket,
        Key="c2",
        CopySource={"Bucket": c3_bucket, "Key": "c"},
        **_customer(KEY_B),
        **_copy_source_customer(KEY_A),
    )
    assert _error(
        c3.copy_object, Bucket=c3_bucket, Key="x", CopySource={"Bucket": c3_bucket, "Key": "c2"}
    ) == (400, "InvalidRequest")
    assert _error(
        c3.copy_object,
        Bucket=c3_bucket,
        Key="x",
        CopySource={"Bucket": c3_bucket, "Key": "c2"},
        **_copy_source_customer(KEY_A),
    ) == (403, "AccessDenied")
    # The same wrong key for source and destination: refused, not shared.
    assert _error(
        c3.copy_object,
        Bucket=c3_bucket,
        Key="x",
        CopySource={"Bucket": c3_bucket, "Key": "c2"},
        **_customer(KEY_A),
        **_copy_source_customer(KEY_A),
    ) == (403, "AccessDenied")
    c3.copy_object(
        Bucket=c3_bucket,
        Key="back",
        CopySource={"Bucket": c3_bucket, "Key": "c2"},
        **_copy_source_customer(KEY_B),
    )
    back = c3.get_object(Bucket=c3_bucket, Key="back")
    assert SSE not in _headers(back)
    assert back["Body"].read() == body
    key_id = _kms(s3_cluster, "create")
    c3.copy_object(
        Bucket=c3_bucket,
        Key="kms",
        CopySource={"Bucket": c3_bucket, "Key": "s3"},
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=key_id,
    )
    got = c3.get_object(Bucket=c3_bucket, Key="kms")
    assert got["SSEKMSKeyId"] == key_id
    assert got["Body"].read() == body


def test_upload_part_copy_from_encrypted_source(c3: Any, c3_bucket: str) -> None:
    body = os.urandom(PART_BYTES_MIN * 2)
    c3.put_object(Bucket=c3_bucket, Key="src", Body=body, **_customer(KEY_A))
    upload = c3.create_multipart_upload(Bucket=c3_bucket, Key="dst", ServerSideEncryption="AES256")
    answer = c3.upload_part_copy(
        Bucket=c3_bucket,
        Key="dst",
        UploadId=upload["UploadId"],
        PartNumber=1,
        CopySource={"Bucket": c3_bucket, "Key": "src"},
        CopySourceRange=f"bytes=10-{PART_BYTES_MIN + 9}",
        **_copy_source_customer(KEY_A),
    )
    c3.complete_multipart_upload(
        Bucket=c3_bucket,
        Key="dst",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": answer["CopyPartResult"]["ETag"]}]},
    )
    got = c3.get_object(Bucket=c3_bucket, Key="dst")
    assert got["ServerSideEncryption"] == "AES256"
    assert got["Body"].read() == body[10 : PART_BYTES_MIN + 10]


def test_bucket_default_encryption(s3: Any, bucket: str) -> None:
    assert _error(s3.get_bucket_encryption, Bucket=bucket) == (
        404,
        "ServerSideEncryptionConfigurationNotFoundError",
    )
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"defaulted")
    assert put["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"defaulted"
    s3.delete_bucket_encryption(Bucket=bucket)
    assert "ServerSideEncryption" not in s3.put_object(Bucket=bucket, Key="k2", Body=b"x")
    assert s3.get_object(Bucket=bucket, Key="k")["ServerSideEncryption"] == "AES256"
    bad = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "DES"}}]}
    assert _error(
        s3.put_bucket_encryption, Bucket=bucket, ServerSideEncryptionConfiguration=bad
    ) == (400, "InvalidArgument")


def _files_holding(roots: list[Path], marker: bytes) -> list[Path]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and marker in path.read_bytes():
                found.append(path)
    return found


def test_no_plaintext_on_the_bookies(
    s3: Any, bucket: str, c3: Any, c3_bucket: str, s3_cluster: S3Cluster
) -> None:
    """Markers written through S3 encrypted are nowhere in the bookies' files; one
    written in clear is (so the scan can find what is there)."""
    markers = {
        mode: f"marker-{mode}-{os.urandom(8).hex()}-".encode() * 2000
        for mode in ("s3", "c", "clear")
    }
    s3.put_object(Bucket=bucket, Key="s3", Body=markers["s3"], ServerSideEncryption="AES256")
    c3.put_object(Bucket=c3_bucket, Key="c", Body=markers["c"], **_customer(KEY_A))
    s3.put_object(Bucket=bucket, Key="clear", Body=markers["clear"])
    roots = [bookie.root for bookie in s3_cluster.bookies]
    assert _files_holding(roots, markers["clear"][:64]), "the scan finds nothing"
    assert _files_holding(roots, markers["s3"][:64]) == []
    assert _files_holding(roots, markers["c"][:64]) == []
