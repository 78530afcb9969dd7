"""Response helpers shared by the handlers."""

from __future__ import annotations

from starlette.responses import Response


def xml_response(
    body: bytes, *, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(body, status_code=status, headers=headers, media_type="application/xml")


def quote_etag(etag: str) -> str:
    return f'"{etag}"'


def version_headers(version_id: str | None, versioning: str) -> dict[str, str]:
    """x-amz-version-id, sent once versioning was ever configured on the bucket."""
    if version_id and (versioning or version_id != "null"):
        return {"x-amz-version-id": version_id}
    return {}


def written_version_headers(version_id: str | None) -> dict[str, str]:
    """x-amz-version-id in the answer to a write (PutObject, CopyObject, a completion):
    absent for the null version (a bucket never versioned, or suspended), as S3 answers;
    reads of that version do name it."""
    return {"x-amz-version-id": version_id} if version_id and version_id != "null" else {}
