"""RestoreObject of a tiered version: when its copy on the bookies expires, and how the
record says so.

S3 keeps a restored copy of an archived object for the days asked, until midnight UTC
after the last one, and shows it in HEAD and GET as
`x-amz-restore: ongoing-request="false", expiry-date="Fri, 21 Dec 2012 00:00:00 GMT"`.
Here the copy is written before the request is answered, so no request is ever
"ongoing"; the header is kept in the record's system metadata (which HEAD and GET
answer with), and the maintenance job reads the expiry back from it.
"""

from __future__ import annotations

import email.utils
import math
import re
from dataclasses import replace

from blobstore.catalog.records import ObjectRecord

RESTORE_HEADER = "x-amz-restore"
DAY_S = 86_400
RESTORE_DAYS_MAX = 36_500
_EXPIRY = re.compile(r'expiry-date="([^"]+)"')


def restore_expiry(now: float, days: int) -> float:
    """When a copy restored at `now` for `days` days expires: the midnight UTC after
    `now` plus the days (S3 rounds up to the next midnight)."""
    assert 1 <= days <= RESTORE_DAYS_MAX, days
    return math.ceil((now + days * DAY_S) / DAY_S) * DAY_S


def restore_header(expiry: float) -> str:
    date = email.utils.formatdate(expiry, usegmt=True)
    return f'ongoing-request="false", expiry-date="{date}"'


def restored_metadata(record: ObjectRecord, expiry: float) -> dict[str, str]:
    return {**record.system_metadata, RESTORE_HEADER: restore_header(expiry)}


def restored_until(system_metadata: dict[str, str]) -> float | None:
    """The expiry of a restored copy, from the record's header (None: not restored, or
    a header this module did not write)."""
    match = _EXPIRY.search(system_metadata.get(RESTORE_HEADER, ""))
    if match is None:
        return None
    parsed = email.utils.parsedate_to_datetime(match.group(1))
    return parsed.timestamp()


def unrestored(record: ObjectRecord) -> ObjectRecord:
    """The record once its restored copy is dropped: no extents, no restore header."""
    metadata = {k: v for k, v in record.system_metadata.items() if k != RESTORE_HEADER}
    return replace(record, extents=(), system_metadata=metadata)
