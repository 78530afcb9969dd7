"""A minimal raw-frame client for bookie tests: frames from blobstore/wire/protocol.py over asyncio
streams, pipelined, matched by request id. Test-only; the product client is
blobstore/ledger/bookie_client.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import urllib.error
import urllib.request
from typing import Any

from blobstore.runtime.ledger_tls import client_context_from_env
from blobstore.wire import protocol
from blobstore.wire.protocol import AddFlag, Op, ReadFlag, Status

TIMEOUT_S = 20.0
KEY = protocol.master_key(b"secret")


def entry_bytes(ledger_id: int, entry_id: int, payload: bytes, lac: int | None = None) -> bytes:
    lac = entry_id - 1 if lac is None else lac
    return protocol.Entry(ledger_id, entry_id, lac, (entry_id + 1) * (1 << 21), payload).encode()


def payload_for(seed: int, ledger_id: int, entry_id: int, size: int) -> bytes:
    rng = random.Random(f"{seed}-{ledger_id}-{entry_id}")
    return rng.randbytes(size)


class RawBookie:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[protocol.Frame]] = {}
        self.reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> RawBookie:
        """Over mutual TLS when the process has BLOBSTORE_LEDGER_TLS_DIR, as the product
        client (`make test-tls`)."""
        connecting = asyncio.open_connection(host, port, ssl=client_context_from_env())
        reader, writer = await asyncio.wait_for(connecting, TIMEOUT_S)
        return cls(reader, writer)

    async def _read_loop(self) -> None:
        error: BaseException = ConnectionError("connection closed")
        try:
            while True:
                frame = await protocol.read_frame(self.reader)
                if frame is None:
                    break
                future = self.pending.pop(frame.request_id, None)
                if future is not None and not future.done():
                    future.set_result(frame)
        except (OSError, asyncio.IncompleteReadError, protocol.ProtocolError) as e:
            error = e
        for future in self.pending.values():
            if not future.done():
                future.set_exception(ConnectionError(f"connection closed: {error!r}"))
        self.pending.clear()

    def send(self, op: Op, flags: int, body: bytes) -> asyncio.Future[protocol.Frame]:
        request_id = next(self.ids)
        future: asyncio.Future[protocol.Frame] = asyncio.get_running_loop().create_future()
        if self.reader_task.done():
            # The read loop has ended and failed everything pending: nothing would ever
            # answer a request sent now.
            future.set_exception(ConnectionError("connection closed"))
            return future
        self.pending[request_id] = future
        self.writer.write(protocol.encode_frame(op, flags, request_id, body))
        return future

    async def call(self, op: Op, flags: int, body: bytes) -> protocol.Frame:
        return await asyncio.wait_for(self.send(op, flags, body), TIMEOUT_S)

    def add_future(
        self, ledger_id: int, entry_id: int, entry: bytes, key: bytes = KEY, recovery: bool = False
    ) -> asyncio.Future[protocol.Frame]:
        flags = AddFlag.RECOVERY_ADD if recovery else AddFlag.NONE
        return self.send(
            Op.ADD_ENTRY, flags, protocol.AddRequest(ledger_id, entry_id, key, entry).encode()
        )

    async def add(
        self,
        ledger_id: int,
        entry_id: int,
        payload: bytes,
        *,
        key: bytes = KEY,
        recovery: bool = False,
    ) -> Status:
        frame = await asyncio.wait_for(
            self.add_future(
                ledger_id, entry_id, entry_bytes(ledger_id, entry_id, payload), key, recovery
            ),
            TIMEOUT_S,
        )
        return Status(frame.flags_or_status)

    async def read(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        key: bytes = KEY,
        long_poll: tuple[int, int] | None = None,
    ) -> tuple[Status, protocol.ReadResponse]:
        flags = ReadFlag.NONE
        previous_lac, timeout_ms = protocol.NO_ENTRY, 0
        if fence:
            flags |= ReadFlag.FENCE
        if long_poll is not None:
            flags |= ReadFlag.LONG_POLL
            previous_lac, timeout_ms = long_poll
        body = protocol.ReadRequest(ledger_id, entry_id, key, previous_lac, timeout_ms).encode()
        frame = await self.call(Op.READ_ENTRY, flags, body)
        return Status(frame.flags_or_status), protocol.ReadResponse.decode(frame.body)

    async def read_payload(self, ledger_id: int, entry_id: int) -> bytes | None:
        status, response = await self.read(ledger_id, entry_id)
        if status != Status.OK:
            return None
        entry = protocol.Entry.decode(response.entry)
        assert (entry.ledger_id, entry.entry_id) == (ledger_id, entry_id)
        return bytes(entry.payload)

    async def read_lac(self, ledger_id: int) -> tuple[Status, int]:
        frame = await self.call(Op.READ_LAC, 0, protocol.ReadLacRequest(ledger_id).encode())
        return Status(frame.flags_or_status), protocol.ReadLacResponse.decode(
            frame.body
        ).last_add_confirmed

    async def info(self) -> dict[str, Any]:
        frame = await self.call(Op.GET_BOOKIE_INFO, 0, b"")
        return dict(json.loads(frame.body))

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), TIMEOUT_S)
        except (OSError, TimeoutError):
            pass
        self.reader_task.cancel()
        try:
            await self.reader_task
        except (asyncio.CancelledError, Exception):
            pass


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}{path}", timeout=TIMEOUT_S
        ) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric_value(text: str, name: str) -> float:
    """Sum of every sample of a metric family line starting with `name` (labels ignored)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def seed() -> int:
    return int(os.environ.get("BLOBSTORE_TEST_SEED", "1234"))
