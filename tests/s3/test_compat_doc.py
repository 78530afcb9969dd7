"""docs/s3-compatibility.md is kept true by this test.

The document must name every operation of the S3 API (botocore's service model is the
list) exactly once, with support "yes", "partly" or "no". Each operation is then sent to
a real gateway, built from botocore's own model (method, path, subresource): one marked
"no" must answer 501 NotImplemented; one marked "yes" or "partly" must not.

Row names are botocore operation names; `Get/Put/DeleteBucketTagging` is shorthand for
GetBucketTagging, PutBucketTagging and DeleteBucketTagging; a cell may list several names
separated by commas; text in parentheses is ignored.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import botocore.session
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.cluster.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "s3-compatibility.md"
SUPPORT_VALUES = {"yes", "partly", "no"}
VERBS = ("Get", "Put", "Delete", "Head", "List", "Create", "Update")


def expand(name: str) -> list[str]:
    name = re.sub(r"\(.*?\)", "", name).strip()
    if "/" not in name:
        return [name]
    *verbs, last = name.split("/")
    verb = next((v for v in VERBS if last.startswith(v)), None)
    assert verb is not None, f"cannot expand {name!r}"
    noun = last[len(verb) :]
    return [v + noun for v in verbs] + [last]


def documented_operations() -> dict[str, str]:
    support: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[1] not in SUPPORT_VALUES:
            continue
        for item in cells[0].split(","):
            for operation in expand(item.strip()):
                assert operation not in support, f"{operation} is documented twice"
                support[operation] = cells[1]
    return support


def s3_model() -> Any:
    return botocore.session.get_session().get_service_model("s3")


def test_document_names_every_s3_operation_once() -> None:
    documented = documented_operations()
    known = set(s3_model().operation_names)
    assert sorted(set(documented) - known) == [], "documented operations that S3 does not have"
    assert sorted(known - set(documented)) == [], "S3 operations missing from the document"


def send(gateway: GatewayProcess, method: str, path_and_query: str) -> tuple[int, bytes]:
    request = AWSRequest(method=method, url=gateway.endpoint + path_and_query, data=b"")
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    http_request = urllib.request.Request(
        prepared.url, data=None, headers=dict(prepared.headers), method=method
    )
    try:
        with urllib.request.urlopen(http_request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_documented_support_matches_the_gateway(
    gateway: GatewayProcess, s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="compat-key", Body=b"x")
    model = s3_model()
    wrong: list[str] = []
    for operation, support in sorted(documented_operations().items()):
        http = model.operation_model(operation).http
        uri = http["requestUri"].replace("{Bucket}", bucket).replace("{Key+}", "compat-key")
        status, body = send(gateway, http["method"], uri)
        not_implemented = status == 501 and (
            http["method"] == "HEAD" or b"<Code>NotImplemented</Code>" in body
        )
        if support == "no" and not not_implemented:
            wrong.append(f"{operation}: documented 'no' but answered {status}")
        if support != "no" and not_implemented:
            wrong.append(f"{operation}: documented '{support}' but answered NotImplemented")
    assert wrong == []
