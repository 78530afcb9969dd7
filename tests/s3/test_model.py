"""A stateful property test of the whole store through S3: random put / overwrite /
delete / copy / multipart / list / versioned operations against a plain in-memory model.
After every step the listings (every parameter) and the contents must equal the model's.

The exploration is derandomized (the same steps on every run, so a failure replays);
hypothesis prints the failing sequence of steps. BLOBSTORE_MODEL_EXAMPLES sets how many
sequences run (default 12).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.cluster.gateway import GatewayProcess
from tests.s3.conftest import PART_BYTES_MIN

KEYS = ["a", "a/b", "a/c", "a/b/c", "b", "b/x/y", "c", "é", "a b", "a+b", "z~"]
PREFIXES = ["", "a", "a/", "b/", "é", "z", "q"]
DELIMITERS = ["", "/", "b"]


@dataclass
class Version:
    version_id: str
    data: bytes | None  # None: a delete marker


@dataclass
class Model:
    versioning: str = ""  # "", "Enabled", "Suspended"
    keys: dict[str, list[Version]] = field(default_factory=dict)  # newest first

    def latest(self, key: str) -> bytes | None:
        versions = self.keys.get(key)
        if not versions:
            return None
        return versions[0].data

    def live_keys(self) -> list[str]:
        return sorted(
            (k for k in self.keys if self.latest(k) is not None), key=lambda k: k.encode()
        )

    def put(self, key: str, data: bytes | None, version_id: str) -> None:
        versions = self.keys.setdefault(key, [])
        if self.versioning != "Enabled":
            versions[:] = [v for v in versions if v.version_id != "null"]
            version_id = "null"
        versions.insert(0, Version(version_id, data))

    def delete(self, key: str, marker_version_id: str | None) -> None:
        if self.versioning == "":
            self.keys.pop(key, None)
            return
        self.put(key, None, marker_version_id or "null")

    def delete_version(self, key: str, version_id: str) -> None:
        versions = self.keys.get(key, [])
        versions[:] = [v for v in versions if v.version_id != version_id]
        if not versions:
            self.keys.pop(key, None)


def s3_list_all(
    s3: Any, bucket: str, prefix: str, delimiter: str, max_keys: int
) -> tuple[list[str], list[str]]:
    keys: list[str] = []
    prefixes: list[str] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": max_keys}
    if delimiter:
        kwargs["Delimiter"] = delimiter
    pages = 0
    while True:
        page = s3.list_objects_v2(**kwargs)
        pages += 1
        assert pages < 200, "listing does not terminate"
        assert page["KeyCount"] <= max_keys
        keys += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            return keys, prefixes
        kwargs["ContinuationToken"] = page["NextContinuationToken"]


def model_list(keys: list[str], prefix: str, delimiter: str) -> tuple[list[str], list[str]]:
    contents: list[str] = []
    prefixes: list[str] = []
    for key in keys:
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix) :]
        if delimiter and delimiter in rest:
            common = prefix + rest[: rest.index(delimiter) + len(delimiter)]
            if not prefixes or prefixes[-1] != common:
                prefixes.append(common)
        else:
            contents.append(key)
    return contents, prefixes


class StoreMachine(RuleBasedStateMachine):
    s3: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.bucket = f"model-{uuid.uuid4().hex[:16]}"
        self.counter = 0

    @initialize()
    def make_bucket(self) -> None:
        self.s3.create_bucket(Bucket=self.bucket)

    def teardown(self) -> None:
        versions = self.s3.list_object_versions(Bucket=self.bucket)
        for item in versions.get("Versions", []) + versions.get("DeleteMarkers", []):
            self.s3.delete_object(Bucket=self.bucket, Key=item["Key"], VersionId=item["VersionId"])
        self.s3.delete_bucket(Bucket=self.bucket)

    def body(self, size: int) -> bytes:
        self.counter += 1
        unit = f"{self.counter:08d}".encode()
        return (unit * (size // len(unit) + 1))[:size]

    @rule(key=st.sampled_from(KEYS), size=st.sampled_from([0, 1, 100, 20_000, 70_000]))
    def put(self, key: str, size: int) -> None:
        data = self.body(size)
        response = self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        self.model.put(key, data, response.get("VersionId", "null"))

    @rule(key=st.sampled_from(KEYS))
    def delete(self, key: str) -> None:
        response = self.s3.delete_object(Bucket=self.bucket, Key=key)
        marker = response.get("VersionId") if response.get("DeleteMarker") else None
        if self.model.versioning:
            assert response.get("DeleteMarker") is True
        self.model.delete(key, marker)

    @rule(source=st.sampled_from(KEYS), destination=st.sampled_from(KEYS))
    def copy(self, source: str, destination: str) -> None:
        data = self.model.latest(source)
        try:
            response = self.s3.copy_object(
                Bucket=self.bucket,
                Key=destination,
                CopySource={"Bucket": self.bucket, "Key": source},
                MetadataDirective="REPLACE",
            )
        except ClientError as e:
            assert data is None, e
            assert e.response["Error"]["Code"] == "NoSuchKey"
            return
        assert data is not None
        self.model.put(destination, data, response.get("VersionId", "null"))

    @rule(key=st.sampled_from(KEYS), last=st.sampled_from([1, 5000, PART_BYTES_MIN + 3]))
    def multipart(self, key: str, last: int) -> None:
        upload = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)
        sizes = [PART_BYTES_MIN + 17, PART_BYTES_MIN, last]
        parts = []
        data = b""
        for number, size in enumerate(sizes, start=1):
            chunk = self.body(size)
            data += chunk
            part = self.s3.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload["UploadId"],
                PartNumber=number,
                Body=chunk,
            )
            parts.append({"PartNumber": number, "ETag": part["ETag"]})
        response = self.s3.complete_multipart_upload(
            Bucket=self.bucket,
            Key=key,
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": parts},
        )
        assert response["ETag"].strip('"').endswith("-3")
        self.model.put(key, data, response.get("VersionId", "null"))

    @rule(state=st.sampled_from(["Enabled", "Suspended"]))
    def set_versioning(self, state: str) -> None:
        self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": state})
        self.model.versioning = state

    @rule(key=st.sampled_from(KEYS), pick=st.integers(0, 5))
    def delete_version(self, key: str, pick: int) -> None:
        versions = self.model.keys.get(key)
        if not versions:
            return
        version = versions[pick % len(versions)]
        self.s3.delete_object(Bucket=self.bucket, Key=key, VersionId=version.version_id)
        self.model.delete_version(key, version.version_id)

    @rule(key=st.sampled_from(KEYS), pick=st.integers(0, 5))
    def get_version(self, key: str, pick: int) -> None:
        versions = self.model.keys.get(key)
        if not versions:
            return
        version = versions[pick % len(versions)]
        if version.data is None:
            with pytest.raises(ClientError) as raised:
                self.s3.get_object(Bucket=self.bucket, Key=key, VersionId=version.version_id)
            assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 405
            return
        got = self.s3.get_object(Bucket=self.bucket, Key=key, VersionId=version.version_id)
        assert got["Body"].read() == version.data

    @rule(
        prefix=st.sampled_from(PREFIXES),
        delimiter=st.sampled_from(DELIMITERS),
        max_keys=st.sampled_from([1, 2, 3, 1000]),
    )
    def list_objects(self, prefix: str, delimiter: str, max_keys: int) -> None:
        keys, prefixes = s3_list_all(self.s3, self.bucket, prefix, delimiter, max_keys)
        assert (keys, prefixes) == model_list(self.model.live_keys(), prefix, delimiter)

    @rule(prefix=st.sampled_from(PREFIXES))
    def list_versions(self, prefix: str) -> None:
        response = self.s3.list_object_versions(Bucket=self.bucket, Prefix=prefix)
        items = response.get("Versions", []) + response.get("DeleteMarkers", [])
        got = sorted(
            ((i["Key"].encode(), i["VersionId"], "Size" not in i) for i in items),
        )
        expected = sorted(
            (k.encode(), v.version_id, v.data is None)
            for k, versions in self.model.keys.items()
            if k.startswith(prefix)
            for v in versions
        )
        assert got == expected
        latest = {i["Key"]: i["VersionId"] for i in items if i["IsLatest"]}
        assert latest == {
            k: versions[0].version_id
            for k, versions in self.model.keys.items()
            if k.startswith(prefix)
        }

    @invariant()
    def contents_match(self) -> None:
        for key in KEYS:
            expected = self.model.latest(key)
            if expected is None:
                with pytest.raises(ClientError) as raised:
                    self.s3.head_object(Bucket=self.bucket, Key=key)
                assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
            else:
                got = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                assert got == expected, key


def test_store_matches_model(gateway: GatewayProcess) -> None:
    StoreMachine.s3 = gateway.client()
    examples = int(os.environ.get("BLOBSTORE_MODEL_EXAMPLES", "12"))
    run = settings(
        max_examples=examples,
        stateful_step_count=20,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    run_state_machine_as_test(StoreMachine, settings=run)
