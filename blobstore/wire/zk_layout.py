"""Where things live in ZooKeeper. Shared by bookies (registration, cookies, GC) and the
ledger client (ledger metadata). All paths are relative to the connection's chroot
(kazoo accepts `host:port/chroot`), so several clusters can share one ensemble.

    /ledgers/INSTANCEID                      cluster instance id (created once)
    /ledgers/available/<bookie_id>           ephemeral: JSON registration of a live bookie
    /ledgers/cookies/<bookie_id>             JSON cookie (instance id, dirs)
    /ledgers/idgen/ID-<seq>                  sequential znodes that hand out ledger ids
    /ledgers/meta/ddd/dddd/dddd/dddd/Ldddd   ledger metadata; the id as 19 decimal digits
                                             split 3-4-4-4-4 so no znode has a huge child list
    /ledgers/decommissioning/<bookie_id>     a decommission is draining this bookie
    /ledgers/decommissioned/<bookie_id>      drained: safe to remove
    /ledgers/underreplicated/...             bad or missing copies to repair (wire/underreplicated.py)
"""

from __future__ import annotations

LEDGERS_ROOT = "/ledgers"
INSTANCE_ID_PATH = f"{LEDGERS_ROOT}/INSTANCEID"
AVAILABLE_PATH = f"{LEDGERS_ROOT}/available"
COOKIES_PATH = f"{LEDGERS_ROOT}/cookies"
IDGEN_PATH = f"{LEDGERS_ROOT}/idgen"
LEDGER_META_ROOT = f"{LEDGERS_ROOT}/meta"
# Bookies being drained by `blobstore admin decommission`, and drained ones: no new
# ledger or ensemble change places data on them.
DECOMMISSIONING_PATH = f"{LEDGERS_ROOT}/decommissioning"
DECOMMISSIONED_PATH = f"{LEDGERS_ROOT}/decommissioned"
LEDGER_ID_DIGITS = 19
LEDGER_ID_MAX = 10**LEDGER_ID_DIGITS - 1


def available_path(bookie_id: str) -> str:
    return f"{AVAILABLE_PATH}/{bookie_id}"


def cookie_path(bookie_id: str) -> str:
    return f"{COOKIES_PATH}/{bookie_id}"


def decommissioning_path(bookie_id: str) -> str:
    return f"{DECOMMISSIONING_PATH}/{bookie_id}"


def decommissioned_path(bookie_id: str) -> str:
    return f"{DECOMMISSIONED_PATH}/{bookie_id}"


def ledger_path(ledger_id: int) -> str:
    assert 0 <= ledger_id <= LEDGER_ID_MAX, ledger_id
    digits = f"{ledger_id:0{LEDGER_ID_DIGITS}d}"
    return f"{LEDGER_META_ROOT}/{digits[0:3]}/{digits[3:7]}/{digits[7:11]}/{digits[11:15]}/L{digits[15:19]}"


def ledger_id_from_path(path: str) -> int:
    """Inverse of ledger_path; raises ValueError on a path that is not a ledger's."""
    parts = path.rstrip("/").split("/")
    if len(parts) < 5 or not parts[-1].startswith("L"):
        raise ValueError(f"not a ledger metadata path: {path!r}")
    digits = "".join(parts[-5:-1]) + parts[-1][1:]
    if len(digits) != LEDGER_ID_DIGITS or not digits.isdigit():
        raise ValueError(f"not a ledger metadata path: {path!r}")
    return int(digits)
