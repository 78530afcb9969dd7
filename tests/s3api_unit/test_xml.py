"""XML builders parsed back the way clients parse them, and request parsers on good and bad input."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from urllib.parse import unquote_plus

import pytest

from s3api import xml_requests, xml_responses
from s3api.errors import S3Error
from s3api.limits import REQUEST_XML_BYTES_MAX

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass
class Obj:
    key: str
    size: int = 3
    etag: str = "abc"
    last_modified: float = 1_795_000_000.25
    storage_class: str = "STANDARD"
    owner: str = "alice"
    version_id: str = "null"
    is_delete_marker: bool = False
    is_latest: bool = True
    checksums: dict[str, str] = field(default_factory=dict)


@dataclass
class Bucket:
    name: str
    created: float
    region: str = "us-east-1"


@dataclass
class Upload:
    key: str
    upload_id: str
    initiated: float = 1_795_000_000.0
    owner: str = "alice"
    storage_class: str = "STANDARD"
    checksum_algorithm: str | None = None
    checksum_type: str | None = None


@dataclass
class Part:
    part_number: int
    size: int
    etag: str
    last_modified: float = 1_795_000_000.0
    checksums: dict[str, str] = field(default_factory=dict)


def parse(body: bytes) -> ElementTree.Element:
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>')
    root = ElementTree.fromstring(body)
    assert root.tag.startswith(NS), root.tag
    return root


def text(root: ElementTree.Element, path: str) -> str | None:
    found = root.find(_ns(path))
    return None if found is None else (found.text or "")


def _ns(path: str) -> str:
    return "/".join(NS + part for part in path.split("/"))


def test_iso_timestamp() -> None:
    assert xml_responses.iso_timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert xml_responses.iso_timestamp(1_795_000_000.25) == "2026-11-18T11:06:40.250Z"
    assert xml_responses.iso_timestamp(1.9996) == "1970-01-01T00:00:02.000Z"


def test_list_all_my_buckets() -> None:
    root = parse(xml_responses.list_all_my_buckets_result([Bucket("b&1", 0)], "alice"))
    assert root.tag == NS + "ListAllMyBucketsResult"
    assert text(root, "Owner/ID") == "alice"
    assert text(root, "Buckets/Bucket/Name") == "b&1"
    assert text(root, "Buckets/Bucket/CreationDate") == "1970-01-01T00:00:00.000Z"


def test_list_v2_with_url_encoding() -> None:
    key = "a b/ü&<x>+"
    body = xml_responses.list_bucket_result_v2(
        "bucket",
        prefix="a b/",
        delimiter="/",
        max_keys=2,
        is_truncated=True,
        contents=[Obj(key, checksums={"CRC32": "AAAAAA==", "type": "FULL_OBJECT"})],
        common_prefixes=["a b/sub dir/"],
        continuation_token="tok",
        next_continuation_token="next",
        start_after="a",
        fetch_owner=True,
        encoding_type="url",
    )
    root = parse(body)
    assert text(root, "KeyCount") == "2"
    assert text(root, "IsTruncated") == "true"
    assert text(root, "NextContinuationToken") == "next"
    assert text(root, "EncodingType") == "url"
    assert unquote_plus(text(root, "Contents/Key") or "") == key
    assert unquote_plus(text(root, "CommonPrefixes/Prefix") or "") == "a b/sub dir/"
    # A space is %20 (S3's form): a decoder that keeps '+' reads the same key.
    assert text(root, "CommonPrefixes/Prefix") == "a%20b/sub%20dir/"
    assert text(root, "Prefix") == "a%20b/"
    assert text(root, "Contents/ETag") == '"abc"'
    assert b"&quot;abc&quot;" in body
    assert text(root, "Contents/ChecksumAlgorithm") == "CRC32"
    assert text(root, "Contents/Owner/ID") == "alice"
    assert text(root, "Contents/LastModified") == "2026-11-18T11:06:40.250Z"


def test_list_v1_and_versions() -> None:
    root = parse(
        xml_responses.list_bucket_result_v1(
            "bucket",
            prefix="",
            delimiter="/",
            marker="",
            max_keys=1000,
            is_truncated=True,
            next_marker="k<",
            contents=[Obj("k<")],
            common_prefixes=[],
        )
    )
    assert text(root, "NextMarker") == "k<"
    assert text(root, "Contents/Key") == "k<"
    root = parse(
        xml_responses.list_versions_result(
            "bucket",
            prefix="",
            delimiter="",
            key_marker="",
            version_id_marker="",
            max_keys=1000,
            is_truncated=False,
            next_key_marker=None,
            next_version_id_marker=None,
            versions=[
                Obj("k", version_id="v2", is_delete_marker=True),
                Obj("k", version_id="v1", is_latest=False),
            ],
            common_prefixes=[],
        )
    )
    children = [child.tag.removeprefix(NS) for child in root]
    assert children.index("DeleteMarker") < children.index("Version")
    assert text(root, "DeleteMarker/VersionId") == "v2"
    assert root.find(_ns("DeleteMarker/ETag")) is None
    assert text(root, "Version/IsLatest") == "false"


def test_multipart_documents() -> None:
    root = parse(xml_responses.initiate_multipart_upload_result("b", "k", "u1"))
    assert text(root, "UploadId") == "u1"
    root = parse(
        xml_responses.complete_multipart_upload_result(
            "http://h/b/k", "b", "k", "abc-2", {"CRC32": "AAAAAA==-2", "type": "COMPOSITE"}
        )
    )
    assert text(root, "ETag") == '"abc-2"'
    assert text(root, "ChecksumCRC32") == "AAAAAA==-2"
    assert text(root, "ChecksumType") == "COMPOSITE"
    root = parse(
        xml_responses.list_parts_result(
            "b",
            "k",
            "u1",
            part_number_marker=0,
            next_part_number_marker=2,
            max_parts=2,
            is_truncated=True,
            parts=[Part(1, 5, "e1", checksums={"SHA256": "x"}), Part(2, 5, "e2")],
            owner="alice",
            checksum_algorithm="SHA256",
        )
    )
    assert [p.findtext(NS + "PartNumber") for p in root.findall(NS + "Part")] == ["1", "2"]
    assert text(root, "Part/ChecksumSHA256") == "x"
    assert text(root, "Initiator/ID") == "alice"
    root = parse(
        xml_responses.list_multipart_uploads_result(
            "b",
            prefix="",
            delimiter="",
            key_marker="",
            upload_id_marker="",
            next_key_marker="k",
            next_upload_id_marker="u1",
            max_uploads=1000,
            is_truncated=False,
            uploads=[Upload("k", "u1")],
            common_prefixes=[],
        )
    )
    assert text(root, "Upload/UploadId") == "u1"
    assert text(root, "Upload/Initiated") == "2026-11-18T11:06:40.000Z"


def test_small_documents() -> None:
    assert text(parse(xml_responses.copy_object_result("e", 0)), "ETag") == '"e"'
    assert (
        text(parse(xml_responses.copy_part_result("e", 0)), "LastModified")
        == "1970-01-01T00:00:00.000Z"
    )
    root = parse(
        xml_responses.delete_result(
            [xml_responses.Deleted("a"), xml_responses.Deleted("b", None, True, "dm1")],
            [xml_responses.DeleteError("c", "AccessDenied", "Access Denied")],
        )
    )
    assert [d.findtext(NS + "Key") for d in root.findall(NS + "Deleted")] == ["a", "b"]
    assert text(root, "Error/Code") == "AccessDenied"
    assert parse(xml_responses.location_constraint("us-east-1")).text is None
    assert parse(xml_responses.location_constraint("eu-west-1")).text == "eu-west-1"
    assert parse(xml_responses.versioning_configuration("")).find(NS + "Status") is None
    assert text(parse(xml_responses.versioning_configuration("Enabled")), "Status") == "Enabled"
    root = parse(
        xml_responses.get_object_attributes_response(
            etag='"e"',
            parts=[Part(1, 5, "e1")],
            parts_count=1,
            object_size=5,
            storage_class="STANDARD",
        )
    )
    assert text(root, "ETag") == "e"
    assert text(root, "ObjectParts/PartsCount") == "1"
    assert text(root, "ObjectSize") == "5"


# ------------------------------------------------------------------ parsers


def wrap(root: str, inner: str, namespace: bool = True) -> bytes:
    xmlns = f' xmlns="{xml_responses.NAMESPACE}"' if namespace else ""
    return f"<{root}{xmlns}>{inner}</{root}>".encode()


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<not xml",
        b"<Wrong/>",
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><Tagging><TagSet/></Tagging>',
        b"<Tagging><TagSet><Tag><Key>a</Key></Tag></TagSet></Tagging>",
        b"<Tagging></Tagging>",
        b"x" * (REQUEST_XML_BYTES_MAX + 1),
    ],
    ids=["empty", "broken", "wrong-root", "dtd", "no-value", "no-tagset", "too-large"],
)
def test_malformed_xml(body: bytes) -> None:
    with pytest.raises(S3Error) as caught:
        xml_requests.parse_tagging(body)
    assert caught.value.code == "MalformedXML"


def test_tagging_round_trip_and_limits() -> None:
    tags = {"a": "1", "b c": "", "ü": "v" * 256}
    assert xml_requests.parse_tagging(xml_responses.tagging(tags)) == tags

    def tagset(pairs: list[tuple[str, str]]) -> bytes:
        inner = "".join(f"<Tag><Key>{k}</Key><Value>{v}</Value></Tag>" for k, v in pairs)
        return wrap("Tagging", f"<TagSet>{inner}</TagSet>", namespace=False)

    for bad in (
        [("a", "1"), ("a", "2")],
        [(f"k{i}", "v") for i in range(11)],
        [("k" * 129, "v")],
        [("k", "v" * 257)],
        [("", "v")],
        [("aws:x", "v")],
    ):
        with pytest.raises(S3Error) as caught:
            xml_requests.parse_tagging(tagset(bad))
        assert caught.value.code == "InvalidTag"
    assert (
        len(xml_requests.parse_tagging(tagset([(f"k{i}", "v") for i in range(50)]), bucket=True))
        == 50
    )
    with pytest.raises(S3Error):
        xml_requests.parse_tagging(tagset([(f"k{i}", "v") for i in range(51)]), bucket=True)


def test_create_bucket_and_versioning() -> None:
    assert xml_requests.parse_create_bucket_configuration(b"") is None
    body = wrap("CreateBucketConfiguration", "<LocationConstraint>eu-west-1</LocationConstraint>")
    assert xml_requests.parse_create_bucket_configuration(body) == "eu-west-1"
    assert (
        xml_requests.parse_versioning_configuration(
            xml_responses.versioning_configuration("Suspended")
        )
        == "Suspended"
    )
    for bad in (
        wrap("VersioningConfiguration", "<Status>On</Status>"),
        wrap("VersioningConfiguration", ""),
    ):
        with pytest.raises(S3Error) as caught:
            xml_requests.parse_versioning_configuration(bad)
        assert caught.value.code == "MalformedXML"


def test_delete_request() -> None:
    body = wrap(
        "Delete",
        "<Quiet>true</Quiet><Object><Key>a&amp;b</Key></Object>"
        "<Object><Key>c</Key><VersionId>v1</VersionId></Object>",
    )
    request = xml_requests.parse_delete(body)
    assert request.quiet
    assert request.objects == (
        xml_requests.ObjectToDelete("a&b"),
        xml_requests.ObjectToDelete("c", "v1"),
    )
    too_many = wrap("Delete", "<Object><Key>k</Key></Object>" * 1001)
    for bad in (too_many, wrap("Delete", ""), wrap("Delete", "<Object></Object>")):
        with pytest.raises(S3Error) as caught:
            xml_requests.parse_delete(bad)
        assert caught.value.code == "MalformedXML"
    assert (
        len(
            xml_requests.parse_delete(
                wrap("Delete", "<Object><Key>k</Key></Object>" * 1000)
            ).objects
        )
        == 1000
    )


def test_complete_multipart_upload() -> None:
    body = wrap(
        "CompleteMultipartUpload",
        '<Part><PartNumber>1</PartNumber><ETag>"e1"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>'
        "<Part><ETag>e3</ETag><PartNumber>3</PartNumber></Part>",
    )
    parts = xml_requests.parse_complete_multipart_upload(body)
    assert parts == [
        xml_requests.CompletedPart(1, "e1", {"CRC32": "AAAAAA=="}),
        xml_requests.CompletedPart(3, "e3", {}),
    ]
    # A part named twice in a row (a resent part's two answers): the last entry stands.
    resent = wrap(
        "CompleteMultipartUpload",
        "<Part><PartNumber>1</PartNumber><ETag>a</ETag></Part>"
        "<Part><PartNumber>1</PartNumber><ETag>b</ETag></Part>"
        "<Part><PartNumber>2</PartNumber><ETag>c</ETag></Part>",
    )
    assert xml_requests.parse_complete_multipart_upload(resent) == [
        xml_requests.CompletedPart(1, "b", {}),
        xml_requests.CompletedPart(2, "c", {}),
    ]
    for inner, code in (
        (
            "<Part><PartNumber>2</PartNumber><ETag>a</ETag></Part><Part><PartNumber>1</PartNumber><ETag>b</ETag></Part>",
            "InvalidPartOrder",
        ),
        (
            "<Part><PartNumber>1</PartNumber><ETag>a</ETag></Part><Part><PartNumber>2</PartNumber><ETag>b</ETag></Part>"
            "<Part><PartNumber>1</PartNumber><ETag>c</ETag></Part>",
            "InvalidPartOrder",
        ),
        ("", "MalformedXML"),
        ("<Part><PartNumber>x</PartNumber><ETag>a</ETag></Part>", "MalformedXML"),
        ("<Part><PartNumber>1</PartNumber></Part>", "MalformedXML"),
        ("<Part><PartNumber>10001</PartNumber><ETag>a</ETag></Part>", "InvalidArgument"),
    ):
        with pytest.raises(S3Error) as caught:
            xml_requests.parse_complete_multipart_upload(wrap("CompleteMultipartUpload", inner))
        assert caught.value.code == code, inner


CORS = wrap(
    "CORSConfiguration",
    "<CORSRule><ID>r1</ID><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
    "<AllowedMethod>PUT</AllowedMethod><AllowedHeader>*</AllowedHeader>"
    "<ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>3000</MaxAgeSeconds></CORSRule>",
)


def test_cors_round_trip() -> None:
    rules = xml_requests.parse_cors_configuration(CORS)
    assert rules == [
        {
            "ID": "r1",
            "AllowedHeader": ["*"],
            "AllowedMethod": ["GET", "PUT"],
            "AllowedOrigin": ["*"],
            "ExposeHeader": ["ETag"],
            "MaxAgeSeconds": 3000,
        }
    ]
    assert xml_requests.parse_cors_configuration(xml_responses.cors_configuration(rules)) == rules
    bad_method = CORS.replace(b"PUT", b"PATCH")
    with pytest.raises(S3Error) as caught:
        xml_requests.parse_cors_configuration(bad_method)
    assert caught.value.code == "InvalidRequest"
    for bad in (
        wrap("CORSConfiguration", ""),
        CORS.replace(b"<AllowedOrigin>*</AllowedOrigin>", b""),
    ):
        with pytest.raises(S3Error) as caught:
            xml_requests.parse_cors_configuration(bad)
        assert caught.value.code == "MalformedXML"


LIFECYCLE = wrap(
    "LifecycleConfiguration",
    "<Rule><ID>expire-logs</ID><Filter><And><Prefix>logs/</Prefix>"
    "<Tag><Key>a</Key><Value>1</Value></Tag><Tag><Key>b</Key><Value>2</Value></Tag></And></Filter>"
    "<Status>Enabled</Status><Expiration><Days>30</Days></Expiration>"
    "<Transition><Days>7</Days><StorageClass>GLACIER</StorageClass></Transition>"
    "<NoncurrentVersionExpiration><NoncurrentDays>5</NoncurrentDays></NoncurrentVersionExpiration>"
    "</Rule>"
    "<Rule><Filter><Prefix></Prefix></Filter><Status>Disabled</Status>"
    "<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>"
    "<Rule><Filter><Prefix>uploads/</Prefix></Filter><Status>Enabled</Status>"
    "<Expiration><Date>2030-01-01T00:00:00.000Z</Date></Expiration>"
    "<NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays>"
    "<StorageClass>STANDARD_IA</StorageClass></NoncurrentVersionTransition>"
    "<AbortIncompleteMultipartUpload><DaysAfterInitiation>2</DaysAfterInitiation>"
    "</AbortIncompleteMultipartUpload></Rule>",
)


def test_lifecycle_round_trip() -> None:
    rules = xml_requests.parse_lifecycle_configuration(LIFECYCLE)
    assert rules[0]["Filter"]["And"]["Tag"] == [
        {"Key": "a", "Value": "1"},
        {"Key": "b", "Value": "2"},
    ]
    assert rules[0]["Expiration"] == {"Days": 30}
    assert rules[0]["Transition"] == [{"Days": 7, "StorageClass": "GLACIER"}]
    assert rules[1]["Expiration"] == {"ExpiredObjectDeleteMarker": True}
    assert (
        xml_requests.parse_lifecycle_configuration(xml_responses.lifecycle_configuration(rules))
        == rules
    )


@pytest.mark.parametrize(
    "inner",
    [
        "",
        "<Rule><Status>Enabled</Status></Rule>",
        "<Rule><Status>Maybe</Status><Expiration><Days>1</Days></Expiration></Rule>",
        "<Rule><Status>Enabled</Status><Expiration><Days>x</Days></Expiration></Rule>",
        "<Rule><Status>Enabled</Status><Bogus/><Expiration><Days>1</Days></Expiration></Rule>",
        "<Rule><Status>Enabled</Status><Expiration><Days>1</Days><Date>2026-01-01T00:00:00Z</Date>"
        "</Expiration></Rule>",
        "<Rule><Prefix>a</Prefix><Filter><Prefix>a</Prefix></Filter><Status>Enabled</Status>"
        "<Expiration><Days>1</Days></Expiration></Rule>",
    ],
)
def test_lifecycle_rejects(inner: str) -> None:
    with pytest.raises(S3Error) as caught:
        xml_requests.parse_lifecycle_configuration(wrap("LifecycleConfiguration", inner))
    assert caught.value.code == "MalformedXML"


def _expiring_rule(
    actions: str, rule_filter: str = "<Filter><Prefix>p/</Prefix></Filter>"
) -> bytes:
    return wrap(
        "LifecycleConfiguration", f"<Rule>{rule_filter}<Status>Enabled</Status>{actions}</Rule>"
    )


@pytest.mark.parametrize(
    ("actions", "rule_filter", "code"),
    [
        ("<Expiration><Days>0</Days></Expiration>", None, "InvalidArgument"),
        ("<Expiration><Date>2030-01-01T10:00:00Z</Date></Expiration>", None, "InvalidArgument"),
        ("<Expiration><Date>2030-99-99garbage</Date></Expiration>", None, "InvalidArgument"),
        (
            "<NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays>"
            "</NoncurrentVersionExpiration>",
            None,
            "InvalidArgument",
        ),
        (
            "<AbortIncompleteMultipartUpload><DaysAfterInitiation>0</DaysAfterInitiation>"
            "</AbortIncompleteMultipartUpload>",
            None,
            "InvalidArgument",
        ),
        (
            # Not a class, nor a tier's name (FOO could be one: the handler checks those).
            "<Transition><Days>40</Days><StorageClass>FOO BAR</StorageClass></Transition>",
            None,
            "InvalidStorageClass",
        ),
        ("<Transition><Days>40</Days></Transition>", None, "MalformedXML"),
        (
            "<Transition><Days>10</Days><StorageClass>STANDARD_IA</StorageClass></Transition>",
            None,
            "InvalidArgument",
        ),
        (
            "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
            "</AbortIncompleteMultipartUpload>",
            "<Filter><Tag><Key>a</Key><Value>1</Value></Tag></Filter>",
            "InvalidRequest",
        ),
    ],
)
def test_lifecycle_values_as_s3_checks_them(
    actions: str, rule_filter: str | None, code: str
) -> None:
    body = _expiring_rule(actions) if rule_filter is None else _expiring_rule(actions, rule_filter)
    with pytest.raises(S3Error) as caught:
        xml_requests.parse_lifecycle_configuration(body)
    assert caught.value.code == code


def test_lifecycle_duplicate_ids() -> None:
    rule = "<Rule><ID>x</ID><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>"
    with pytest.raises(S3Error) as caught:
        xml_requests.parse_lifecycle_configuration(wrap("LifecycleConfiguration", rule * 2))
    assert caught.value.code == "InvalidArgument"


def test_carriage_return_in_keys_survives_parsing() -> None:
    root = parse(xml_responses.tagging({"a\rb": "c\r\nd"}))
    assert text(root, "TagSet/Tag/Key") == "a\rb"
    assert text(root, "TagSet/Tag/Value") == "c\r\nd"
    assert b"&#1;" in xml_responses.tagging({"k": "\x01"})
