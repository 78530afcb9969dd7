"""A request's headers: dictionary lookups with Starlette's answers (first value of a name),
every field still there for whoever iterates them."""

from __future__ import annotations

import pytest

from s3api.handlers.context import GatewayRequest


def test_request_headers_answer_the_first_value_and_keep_every_field() -> None:
    raw = [(b"host", b"h"), (b"x-amz-meta-a", b"1"), (b"x-amz-meta-a", b"2"), (b"x-b", b"v")]
    headers = GatewayRequest({"type": "http", "headers": raw}).headers
    assert headers["X-Amz-Meta-A"] == "1" and headers.get("x-amz-meta-a") == "1"
    assert headers.get("missing") is None and headers.get("missing", "d") == "d"
    assert "X-B" in headers and "missing" not in headers
    assert 3 not in headers  # type: ignore[comparison-overlap]  # a key that is no name
    assert headers.getlist("x-amz-meta-a") == ["1", "2"]
    assert headers.items() == [(k.decode(), v.decode()) for k, v in raw]
    with pytest.raises(KeyError):
        headers["missing"]
