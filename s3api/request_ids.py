"""Request ids (x-amz-request-id) and this process's host id (x-amz-id-2).

Unique, not secret: a random per-process prefix and a counter (reading the kernel's
random source twice a request costs a visible share of small-request CPU)."""

from __future__ import annotations

import base64
import itertools
import random
import secrets

_ID_PREFIX = secrets.token_hex(4).upper()
_ID_COUNTER = itertools.count(random.randrange(1 << 32))
HOST_ID = base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFFFFFF:08X}"
