"""The location index and per-ledger state, in RocksDB (`rocksdict`, raw byte keys).

On-disk format
--------------
``<ledger_dir>/index/`` is one RocksDB database. Keys (big-endian, so they sort by id)::

    b"e" | u64 ledger_id | u64 entry_id   -> u64 location (log_id << 32 | offset)
    b"l" | u64 ledger_id                  -> LedgerStateRecord (master key, fenced, LACs)
    b"g" | u32 log_id | u64 ledger_id     -> u64 bytes of that ledger in that entry log
    b"m"                                  -> LastLogMark: u64 journal_id | u64 offset

A checkpoint writes its locations, the ledger states it changed, the per-log byte counts
and the new LastLogMark in one synced WriteBatch: either all of it is durable or none,
and the mark never runs ahead of the index.

A synced batch is written unsynced and then made durable with `flush_wal(True)`
(RocksDB's SyncWAL: the WAL file, and its directory when new, fsync'd before it returns).
rocksdict holds the interpreter lock through a sync write's fsync, and the storage thread
that writes the index shares the bookie process with its event loop: a synced write
would freeze the loop (all adds and reads) for its fsync, tens of milliseconds when the
disk is busy. SyncWAL releases the lock. The batch is
visible to this process's reads before it is durable; nothing reads the index back before
the write returns.

Faults tolerated
----------------
- kill -9 at any moment: RocksDB's WAL, fsync'd before a synced write returns, makes each
  batch atomic and durable; a lost batch is rebuilt by replaying the journal from the
  previous mark.
- A record that fails to decode (unknown version) stops the start with a clear error
  instead of guessing.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Self

import rocksdict

from blobstore.wire import protocol

ENTRY_KEY = struct.Struct(">cQQ")
LEDGER_KEY = struct.Struct(">cQ")
LOG_LEDGER_KEY = struct.Struct(">cIQ")
U64 = struct.Struct(">Q")
MARK = struct.Struct(">QQ")
MARK_KEY = b"m"
STATE = struct.Struct(f">BB{protocol.MASTER_KEY_BYTES}sqqq")
STATE_VERSION = 1
FLAG_HAS_KEY = 1
FLAG_FENCED = 2


@dataclass(frozen=True, slots=True)
class LedgerStateRecord:
    master_key: bytes | None
    fenced: bool
    last_add_confirmed: int  # highest LAC seen (piggybacked on adds or explicit)
    explicit_lac: int
    last_entry_id: int  # highest entry id held, NO_ENTRY when none

    def __post_init__(self) -> None:
        assert self.master_key is None or len(self.master_key) == protocol.MASTER_KEY_BYTES
        assert self.last_add_confirmed >= protocol.NO_ENTRY, self.last_add_confirmed
        assert self.last_entry_id >= protocol.NO_ENTRY, self.last_entry_id

    def encode(self) -> bytes:
        flags = (FLAG_HAS_KEY if self.master_key is not None else 0) | (
            FLAG_FENCED if self.fenced else 0
        )
        key = self.master_key or bytes(protocol.MASTER_KEY_BYTES)
        return STATE.pack(
            STATE_VERSION,
            flags,
            key,
            self.last_add_confirmed,
            self.explicit_lac,
            self.last_entry_id,
        )

    @classmethod
    def decode(cls, buf: bytes) -> Self:
        if len(buf) != STATE.size:
            raise ValueError(f"ledger state of {len(buf)} bytes, expected {STATE.size}")
        version, flags, key, lac, explicit, last = STATE.unpack(buf)
        if version != STATE_VERSION:
            raise ValueError(f"ledger state version {version} unknown")
        return cls(
            key if flags & FLAG_HAS_KEY else None, bool(flags & FLAG_FENCED), lac, explicit, last
        )


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return ENTRY_KEY.pack(b"e", ledger_id, entry_id)


class EntryLocationIndex:
    def __init__(self, ledger_dir: str) -> None:
        path = os.path.join(ledger_dir, "index")
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_keep_log_file_num(2)
        options.set_max_log_file_size(1 << 20)
        self._db = rocksdict.Rdict(path, options)
        self._unsynced = rocksdict.WriteOptions()

    def close(self) -> None:
        self._db.close()

    def _sync_wal(self) -> None:
        """fsync the WAL (and a new WAL's directory) with the interpreter lock released
        (module docstring): every write before it is durable once it returns."""
        self._db.flush_wal(True)

    def _write_synced(self, batch: rocksdict.WriteBatch) -> None:
        self._db.write(batch, self._unsynced)
        self._sync_wal()

    def get_location(self, ledger_id: int, entry_id: int) -> int | None:
        value = self._db.get(entry_key(ledger_id, entry_id))
        return None if value is None else U64.unpack(value)[0]

    def locations(self, ledger_id: int = 0, entry_id: int = 0) -> Iterator[tuple[int, int, int]]:
        """(ledger id, entry id, location) of every indexed entry from (`ledger_id`,
        `entry_id`) on, in key order (checks, tools and the scrubber: it walks the
        index)."""
        for key, value in self._db.items(from_key=entry_key(ledger_id, entry_id)):
            assert isinstance(key, bytes) and isinstance(value, bytes)
            if key[:1] != b"e":
                break
            _, found_ledger, found_entry = ENTRY_KEY.unpack(key)
            yield found_ledger, found_entry, U64.unpack(value)[0]

    def load_mark(self) -> tuple[int, int]:
        value = self._db.get(MARK_KEY)
        return (0, 0) if value is None else MARK.unpack(value)

    def load_states(self) -> dict[int, LedgerStateRecord]:
        states = {}
        for key, value in self._db.items(from_key=b"l"):
            assert isinstance(key, bytes) and isinstance(value, bytes)
            if key[:1] != b"l":
                break
            states[LEDGER_KEY.unpack(key)[1]] = LedgerStateRecord.decode(value)
        return states

    def load_log_ledger_bytes(self) -> dict[int, dict[int, int]]:
        result: dict[int, dict[int, int]] = {}
        for key, value in self._db.items(from_key=b"g"):
            assert isinstance(key, bytes) and isinstance(value, bytes)
            if key[:1] != b"g":
                break
            _, log_id, ledger_id = LOG_LEDGER_KEY.unpack(key)
            result.setdefault(log_id, {})[ledger_id] = U64.unpack(value)[0]
        return result

    def write(
        self,
        locations: list[tuple[int, int, int]],
        states: dict[int, LedgerStateRecord],
        log_ledger_bytes: dict[tuple[int, int], int],
        mark: tuple[int, int] | None,
        *,
        sync: bool = True,
    ) -> None:
        """One atomic batch (a checkpoint's slice or its end, a compaction); synced
        unless `sync` is False. A synced write makes every earlier one durable too: they
        share RocksDB's write-ahead log."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for ledger_id, entry_id, loc in locations:
            batch.put(entry_key(ledger_id, entry_id), U64.pack(loc))
        for ledger_id, state in states.items():
            batch.put(LEDGER_KEY.pack(b"l", ledger_id), state.encode())
        for (log_id, ledger_id), size in log_ledger_bytes.items():
            key = LOG_LEDGER_KEY.pack(b"g", log_id, ledger_id)
            if size > 0:
                batch.put(key, U64.pack(size))
            else:
                batch.delete(key)
        if mark is not None:
            batch.put(MARK_KEY, MARK.pack(*mark))
        self._db.write(batch, self._unsynced)
        if sync:
            self._sync_wal()

    def delete_ledger(self, ledger_id: int, log_ids: list[int]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(entry_key(ledger_id, 0), entry_key(ledger_id + 1, 0))
        batch.delete(LEDGER_KEY.pack(b"l", ledger_id))
        for log_id in log_ids:
            batch.delete(LOG_LEDGER_KEY.pack(b"g", log_id, ledger_id))
        self._write_synced(batch)

    def drop_log(self, log_id: int, ledger_ids: list[int]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        for ledger_id in ledger_ids:
            batch.delete(LOG_LEDGER_KEY.pack(b"g", log_id, ledger_id))
        self._write_synced(batch)
