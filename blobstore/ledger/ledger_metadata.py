"""Ledger metadata: the record kept in ZooKeeper at zk_layout.ledger_path(ledger_id).

Format (UTF-8 JSON, one object)::

    {"format_version": 1, "ledger_id": 42, "ensemble_size": 3, "write_quorum": 2,
     "ack_quorum": 2, "digest_type": "CRC32C", "password_hash": "<sha256 hex>",
     "state": "OPEN" | "IN_RECOVERY" | "CLOSED", "last_entry_id": -1, "length": 0,
     "custom": {"owner": "..."}, "ctime": 1700000000.0,
     "ensembles": [[0, ["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"]],
                   [117, ["10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181"]]]}

`ensembles` is the list of segments: entries from a segment's first entry id up to the
next segment's (exclusive) are striped over that segment's bookies. `last_entry_id` and
`length` are meaningful once CLOSED (-1 / 0 before). Every update is a compare-and-set
on the znode version (`Versioned`), so concurrent writers, ensemble changes and
recoveries serialise through ZooKeeper. Records are checked before they are written and
again after they are read back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from blobstore.ledger.errors import BadLedgerConfigError

FORMAT_VERSION = 1
DIGEST_TYPE = "CRC32C"
STATE_OPEN = "OPEN"
STATE_IN_RECOVERY = "IN_RECOVERY"
STATE_CLOSED = "CLOSED"
STATES = (STATE_OPEN, STATE_IN_RECOVERY, STATE_CLOSED)
ENSEMBLE_SIZE_MAX = 64
CUSTOM_BYTES_MAX = 16 * 1024
METADATA_BYTES_MAX = 512 * 1024  # well under ZooKeeper's 1 MiB znode limit

Segment = tuple[int, tuple[str, ...]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    """A value read from ZooKeeper with the znode version a compare-and-set must name."""

    value: T
    version: int


def password_hash(password: bytes) -> str:
    return hashlib.sha256(b"blobstore-ledger:" + password).hexdigest()


class MetadataFormatError(ValueError):
    """Stored metadata that does not decode or violates an invariant."""


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise BadLedgerConfigError unless E >= WQ >= AQ >= 1 (E bounded)."""
    if not 1 <= ack_quorum <= write_quorum <= ensemble_size <= ENSEMBLE_SIZE_MAX:
        raise BadLedgerConfigError(
            f"need {ENSEMBLE_SIZE_MAX} >= ensemble_size >= write_quorum >= ack_quorum >= 1, "
            f"got E={ensemble_size} WQ={write_quorum} AQ={ack_quorum}"
        )


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    password_hash: str
    ensembles: tuple[Segment, ...]
    state: str = STATE_OPEN
    last_entry_id: int = -1
    length: int = 0
    custom: dict[str, str] = field(default_factory=dict)
    digest_type: str = DIGEST_TYPE
    ctime: float = 0.0

    def __post_init__(self) -> None:
        assert self.ledger_id >= 0, self.ledger_id
        assert 1 <= self.ack_quorum, self.ack_quorum
        assert self.ack_quorum <= self.write_quorum, (self.ack_quorum, self.write_quorum)
        assert self.write_quorum <= self.ensemble_size, (self.write_quorum, self.ensemble_size)
        assert self.state in STATES, self.state
        assert self.last_entry_id >= -1, self.last_entry_id
        assert self.length >= 0, self.length
        assert self.ensembles, "a ledger has at least one ensemble"
        assert self.ensembles[0][0] == 0, self.ensembles[0]
        previous = -1
        for first_entry_id, bookies in self.ensembles:
            assert first_entry_id > previous, (first_entry_id, previous)
            assert len(bookies) == self.ensemble_size, (bookies, self.ensemble_size)
            assert len(set(bookies)) == len(bookies), bookies
            previous = first_entry_id
        if self.state == STATE_CLOSED:
            # A closed ledger's last entry may precede the last segment's first entry: an
            # ensemble change can record a segment before any entry of it was acknowledged.
            assert self.last_entry_id >= -1, self.last_entry_id

    # ---------------------------------------------------------------- queries

    @property
    def closed(self) -> bool:
        return self.state == STATE_CLOSED

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1][1]

    def segment_index(self, entry_id: int) -> int:
        assert entry_id >= 0, entry_id
        for index in range(len(self.ensembles) - 1, -1, -1):
            if self.ensembles[index][0] <= entry_id:
                return index
        raise AssertionError(f"first segment starts at {self.ensembles[0][0]}")

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The bookies striping `entry_id` (the segment containing it)."""
        return self.ensembles[self.segment_index(entry_id)][1]

    def all_bookies(self) -> list[str]:
        seen: dict[str, None] = {}
        for _, bookies in self.ensembles:
            for bookie_id in bookies:
                seen.setdefault(bookie_id, None)
        return list(seen)

    # ---------------------------------------------------------------- transitions

    def with_ensemble_change(self, first_entry_id: int, bookies: tuple[str, ...]) -> Self:
        """A new segment from `first_entry_id` (replacing a last segment that starts there)."""
        assert self.state != STATE_CLOSED, self.state
        last_first = self.ensembles[-1][0]
        assert first_entry_id >= last_first, (first_entry_id, last_first)
        if first_entry_id == last_first:
            ensembles = (*self.ensembles[:-1], (first_entry_id, tuple(bookies)))
        else:
            ensembles = (*self.ensembles, (first_entry_id, tuple(bookies)))
        return dataclasses.replace(self, ensembles=ensembles)

    def in_recovery(self) -> Self:
        assert self.state != STATE_CLOSED, self.state
        return dataclasses.replace(self, state=STATE_IN_RECOVERY)

    def closed_at(self, last_entry_id: int, length: int) -> Self:
        assert self.state != STATE_CLOSED, self.state
        return dataclasses.replace(
            self, state=STATE_CLOSED, last_entry_id=last_entry_id, length=length
        )

    # ---------------------------------------------------------------- codec

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "ledger_id": self.ledger_id,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "digest_type": self.digest_type,
            "password_hash": self.password_hash,
            "state": self.state,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "custom": dict(self.custom),
            "ctime": self.ctime,
            "ensembles": [[first, list(bookies)] for first, bookies in self.ensembles],
        }

    def encode(self) -> bytes:
        data = json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()
        assert len(data) <= METADATA_BYTES_MAX, len(data)
        return data

    @classmethod
    def decode(cls, data: bytes) -> Self:
        try:
            raw = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise MetadataFormatError(f"ledger metadata is not JSON: {e}") from e
        if not isinstance(raw, dict):
            raise MetadataFormatError("ledger metadata is not a JSON object")
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise MetadataFormatError(f"unknown ledger metadata format_version={version!r}")
        try:
            custom = raw.get("custom") or {}
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in custom.items()):
                raise MetadataFormatError("custom metadata must map strings to strings")
            metadata = cls(
                ledger_id=int(raw["ledger_id"]),
                ensemble_size=int(raw["ensemble_size"]),
                write_quorum=int(raw["write_quorum"]),
                ack_quorum=int(raw["ack_quorum"]),
                digest_type=str(raw["digest_type"]),
                password_hash=str(raw["password_hash"]),
                state=str(raw["state"]),
                last_entry_id=int(raw["last_entry_id"]),
                length=int(raw["length"]),
                custom=dict(custom),
                ctime=float(raw.get("ctime", 0.0)),
                ensembles=tuple(
                    (int(first), tuple(str(b) for b in bookies))
                    for first, bookies in raw["ensembles"]
                ),
            )
        except MetadataFormatError:
            raise
        except (KeyError, TypeError, ValueError, AssertionError) as e:
            raise MetadataFormatError(f"invalid ledger metadata: {e!r}") from e
        if metadata.digest_type != DIGEST_TYPE:
            raise MetadataFormatError(f"unknown digest_type={metadata.digest_type!r}")
        return metadata


def new_metadata(
    ledger_id: int,
    ensemble: tuple[str, ...],
    write_quorum: int,
    ack_quorum: int,
    password: bytes,
    custom: dict[str, str] | None = None,
) -> LedgerMetadata:
    check_quorums(len(ensemble), write_quorum, ack_quorum)
    custom = dict(custom or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in custom.items()):
        raise BadLedgerConfigError("custom metadata must map strings to strings")
    if len(json.dumps(custom)) > CUSTOM_BYTES_MAX:
        raise BadLedgerConfigError(f"custom metadata larger than {CUSTOM_BYTES_MAX} bytes")
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=len(ensemble),
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        password_hash=password_hash(password),
        ensembles=((0, tuple(ensemble)),),
        custom=custom,
        ctime=time.time(),
    )
