"""Real bookie processes: round trips across restarts, kill -9 during pipelined adds,
fencing and master keys, malformed input."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import ssl
import struct

import pytest

from blobstore.runtime.ledger_tls import client_context_from_env
from blobstore.wire import protocol
from blobstore.wire.protocol import Op, Status
from tests.bookie.raw_client import (
    KEY,
    RawBookie,
    entry_bytes,
    http_get,
    metric_value,
    payload_for,
    seed,
)
from tests.conftest import BookieFactory
from tests.waiting import wait_until

WAIT_S = 30.0


async def write_pipelined(port: int, plan: list[tuple[int, int, bytes]]) -> None:
    client = await RawBookie.connect(port)
    try:
        futures = [
            client.add_future(ledger, entry, entry_bytes(ledger, entry, payload))
            for ledger, entry, payload in plan
        ]
        frames = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
        assert [Status(f.flags_or_status) for f in frames] == [Status.OK] * len(plan)
    finally:
        await client.close()


async def read_all(port: int, expected: dict[tuple[int, int], bytes]) -> None:
    client = await RawBookie.connect(port)
    try:
        keys = list(expected)
        payloads = await asyncio.gather(
            *(client.read_payload(ledger, entry) for ledger, entry in keys)
        )
        for key, payload in zip(keys, payloads, strict=True):
            assert payload == expected[key], f"entry {key} differs (seed {seed()})"
    finally:
        await client.close()


def make_plan(
    rng: random.Random, ledgers: list[int], per_ledger: int, first_entry: int = 0
) -> list[tuple[int, int, bytes]]:
    plan = []
    order = [ledger for ledger in ledgers for _ in range(per_ledger)]
    rng.shuffle(order)
    next_entry = dict.fromkeys(ledgers, first_entry)
    for ledger in order:
        entry = next_entry[ledger]
        next_entry[ledger] += 1
        size = rng.choice([0, 1, 100, 1024, 8000, 70_000])
        plan.append((ledger, entry, payload_for(seed(), ledger, entry, size)))
    return plan


def test_round_trip_interleaved_ledgers_survives_restarts(bookies: BookieFactory) -> None:
    rng = random.Random(seed())
    (bookie,) = bookies(1, ["--checkpoint-interval-s", "0.3"])
    ledgers = [3, 10, 11, 2**40, 77]
    first = make_plan(rng, ledgers, 60)
    asyncio.run(write_pipelined(bookie.port, first))
    # Let a checkpoint move the first batch into entry logs, then write more (journal only).
    wait_until(
        lambda: (
            metric_value(http_get(bookie.http_port, "/metrics")[1], "bookie_checkpoints_total") >= 1
        ),
        WAIT_S,
        message="a checkpoint",
    )
    second = make_plan(rng, ledgers, 40, first_entry=60)
    asyncio.run(write_pipelined(bookie.port, second))
    expected = {(ledger, entry): payload for ledger, entry, payload in first + second}
    asyncio.run(read_all(bookie.port, expected))

    assert bookie.stop() == 0, "SIGTERM exits 0"
    bookie.start()
    asyncio.run(read_all(bookie.port, expected))

    third = make_plan(rng, ledgers, 10, first_entry=100)
    asyncio.run(write_pipelined(bookie.port, third))
    expected.update({(ledger, entry): payload for ledger, entry, payload in third})
    bookie.kill()
    bookie.start()
    asyncio.run(read_all(bookie.port, expected))

    async def last_entries() -> None:
        client = await RawBookie.connect(bookie.port)
        try:
            status, response = await client.read(77, protocol.LAST_ENTRY)
            assert status == Status.OK
            assert response.entry_id == 109
            assert protocol.Entry.decode(response.entry).payload == expected[(77, 109)]
            assert (await client.read_lac(77)) == (Status.OK, 108)
            assert (await client.read(78, 0))[0] == Status.NO_SUCH_LEDGER
            assert (await client.read(77, 110))[0] == Status.NO_SUCH_ENTRY
        finally:
            await client.close()

    asyncio.run(last_entries())


@pytest.mark.parametrize("fault", ["kill -9", "SIGTERM"])
def test_stop_during_pipelined_adds_loses_nothing_acknowledged(
    bookies: BookieFactory, fault: str
) -> None:
    """kill -9 (or a graceful SIGTERM, which must exit 0) with hundreds of adds in flight."""
    (bookie,) = bookies(1, ["--checkpoint-interval-s", "0.2"])

    def stop() -> None:
        if fault == "kill -9":
            bookie.kill()
        else:
            assert bookie.managed is not None
            bookie.managed.signal(signal.SIGTERM)

    acknowledged: dict[tuple[int, int], bytes] = {}

    async def stream() -> None:
        client = await RawBookie.connect(bookie.port)
        window: set[asyncio.Future[protocol.Frame]] = set()
        entry_id = 0
        killed = False
        try:
            while True:
                for ledger in (1, 2, 3):
                    payload = payload_for(seed(), ledger, entry_id, 512 + entry_id % 3000)
                    future = client.add_future(
                        ledger, entry_id, entry_bytes(ledger, entry_id, payload)
                    )

                    def record(
                        f: asyncio.Future[protocol.Frame],
                        key: tuple[int, int] = (ledger, entry_id),
                        data: bytes = payload,
                    ) -> None:
                        if (
                            not f.cancelled()
                            and f.exception() is None
                            and f.result().flags_or_status == Status.OK
                        ):
                            acknowledged[key] = data

                    future.add_done_callback(record)
                    window.add(future)
                    future.add_done_callback(window.discard)
                entry_id += 1
                if len(window) > 300:
                    await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED, timeout=WAIT_S)
                if not killed and len(acknowledged) >= 3000:
                    stop()  # mid-stream: hundreds of adds in flight
                    killed = True
                if killed and client.reader_task.done():
                    return
                await asyncio.sleep(0)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(stream(), 120))
    assert len(acknowledged) >= 3000
    if fault == "SIGTERM":
        assert bookie.managed is not None and bookie.managed.process is not None
        assert bookie.managed.process.wait(timeout=WAIT_S) == 0
    bookie.start()
    asyncio.run(read_all(bookie.port, acknowledged))


def test_fencing_and_master_key(bookies: BookieFactory) -> None:
    (bookie,) = bookies(1)
    other_key = protocol.master_key(b"other")

    async def scenario() -> None:
        client = await RawBookie.connect(bookie.port)
        try:
            for entry_id in range(5):
                assert await client.add(1, entry_id, b"e%d" % entry_id) == Status.OK
            assert await client.add(1, 5, b"x", key=other_key) == Status.UNAUTHORIZED
            assert (await client.read(1, 0, fence=True, key=other_key))[0] == Status.UNAUTHORIZED
            status, response = await client.read(1, 4, fence=True)
            assert status == Status.OK
            assert protocol.Entry.decode(response.entry).payload == b"e4"
            assert await client.add(1, 5, b"zombie") == Status.FENCED
            assert await client.add(1, 5, b"recovered", recovery=True) == Status.OK
            # A bookie that never saw the ledger still remembers the fence.
            status, _ = await client.read(2, 0, fence=True)
            assert status == Status.NO_SUCH_ENTRY
            assert await client.add(2, 0, b"late") == Status.FENCED
            assert await client.add(2, 0, b"late", key=other_key) == Status.UNAUTHORIZED
        finally:
            await client.close()

    asyncio.run(scenario())
    bookie.kill()
    bookie.start()

    async def after_restart() -> None:
        client = await RawBookie.connect(bookie.port)
        try:
            assert await client.add(1, 6, b"zombie") == Status.FENCED
            assert await client.add(2, 0, b"late") == Status.FENCED
            assert await client.add(3, 0, b"x", key=other_key) == Status.OK
            assert await client.add(3, 1, b"x") == Status.UNAUTHORIZED
            assert await client.read_payload(1, 5) == b"recovered"
        finally:
            await client.close()

    asyncio.run(after_restart())


def bookie_socket(port: int) -> socket.socket:
    """A connection to a bookie, over mutual TLS when the process has
    BLOBSTORE_LEDGER_TLS_DIR (`make test-tls`)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    context = client_context_from_env()
    return sock if context is None else context.wrap_socket(sock)


def raw_exchange(port: int, data: bytes, close_write: bool = False) -> tuple[bytes, bool]:
    """Send raw bytes; return what came back and whether the bookie closed the socket."""
    with bookie_socket(port) as sock:
        sock.sendall(data)
        if close_write and isinstance(sock, ssl.SSLSocket):
            sock.unwrap().shutdown(socket.SHUT_WR)  # TLS's end of data, then TCP's
        elif close_write:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        sock.settimeout(10.0)
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return received, False
            if not chunk:
                return received, True
            received += chunk


def test_malformed_input_closes_only_that_connection(bookies: BookieFactory) -> None:
    (bookie,) = bookies(1)
    rng = random.Random(seed())
    asyncio.run(write_pipelined(bookie.port, [(9, i, b"keep-%d" % i) for i in range(20)]))
    header = protocol.FRAME_HEADER
    good_body = protocol.ReadRequest(9, 0).encode()
    cases = {
        "random bytes": rng.randbytes(4096),
        "absurd length": struct.pack(">I", 0xFFFFFFF0) + header.pack(1, Op.READ_ENTRY, 0, 77),
        "unknown op": struct.pack(">I", header.size) + header.pack(1, 99, 0, 77),
        "bad version": struct.pack(">I", header.size + len(good_body))
        + header.pack(9, Op.READ_ENTRY, 0, 77)
        + good_body,
        "short body": struct.pack(">I", header.size + 3)
        + header.pack(1, Op.READ_ENTRY, 0, 77)
        + b"abc",
        "short add": struct.pack(">I", header.size + 10)
        + header.pack(1, Op.ADD_ENTRY, 0, 77)
        + bytes(10),
    }
    expected_status = {
        "absurd length": Status.BAD_REQUEST,
        "unknown op": Status.BAD_REQUEST,
        "bad version": Status.BAD_VERSION,
        "short body": Status.BAD_REQUEST,
        "short add": Status.BAD_REQUEST,
    }
    for name, data in cases.items():
        received, closed = raw_exchange(bookie.port, data)
        assert closed, f"{name}: connection left open"
        if name in expected_status:
            assert len(received) >= 16, f"{name}: no error response"
            _, _, _, status, request_id = struct.unpack(">IBBHQ", received[:16])
            assert (Status(status), request_id) == (expected_status[name], 77), name
    # A frame cut short by the client's close: nothing stored, server fine.
    truncated = protocol.encode_frame(
        Op.ADD_ENTRY, 0, 5, protocol.AddRequest(9, 20, KEY, entry_bytes(9, 20, b"cut")).encode()
    )
    raw_exchange(bookie.port, truncated[:-10], close_write=True)

    # An add whose entry header disagrees with the request, and one with a bad digest.
    async def semantic() -> None:
        client = await RawBookie.connect(bookie.port)
        try:
            wrong_ids = await client.call(
                Op.ADD_ENTRY, 0, protocol.AddRequest(9, 21, KEY, entry_bytes(9, 22, b"x")).encode()
            )
            assert wrong_ids.flags_or_status == Status.BAD_REQUEST
            corrupt = bytearray(entry_bytes(9, 21, b"payload"))
            corrupt[-1] ^= 1
            bad = await client.call(
                Op.ADD_ENTRY, 0, protocol.AddRequest(9, 21, KEY, bytes(corrupt)).encode()
            )
            assert bad.flags_or_status == Status.BAD_DIGEST
            assert (await client.read(9, 20))[0] == Status.NO_SUCH_ENTRY
            assert (await client.read(9, 21))[0] == Status.NO_SUCH_ENTRY
        finally:
            await client.close()

    asyncio.run(semantic())
    assert bookie.alive()
    asyncio.run(read_all(bookie.port, {(9, i): b"keep-%d" % i for i in range(20)}))
    metrics = http_get(bookie.http_port, "/metrics")[1]
    assert metric_value(metrics, "bookie_bad_frames_total") >= 5
    assert os.path.isdir(bookie.journal_dir)


def test_stalled_partial_frame_is_closed_idle_connection_is_not(bookies: BookieFactory) -> None:
    """A client that sends part of a frame and stops is cut off after
    frame_stall_timeout_s; a pooled connection with nothing buffered stays open."""
    (bookie,) = bookies(1, extra_args=["--frame-stall-timeout-s", "1"])
    frame = protocol.encode_frame(
        Op.ADD_ENTRY, 0, 5, protocol.AddRequest(9, 0, KEY, entry_bytes(9, 0, b"half")).encode()
    )
    with (
        bookie_socket(bookie.port) as stalled,
        bookie_socket(bookie.port) as idle,
    ):
        stalled.sendall(frame[:7])
        stalled.settimeout(15.0)
        assert stalled.recv(1) == b"", "the stalled connection was closed"
        # The idle one still works.
        idle.sendall(
            protocol.encode_frame(Op.READ_ENTRY, 0, 6, protocol.ReadRequest(9, 0).encode())
        )
        idle.settimeout(10.0)
        assert len(idle.recv(65536)) >= 16
    metrics = http_get(bookie.http_port, "/metrics")[1]
    assert metric_value(metrics, "bookie_stalled_connections_total") == 1
    assert bookie.alive()


def test_reads_over_all_connections_are_bounded(bookies: BookieFactory) -> None:
    """With reads_in_flight_max=2 (one per connection), six connections pipelining 40
    fencing reads each wait their turn: every read is answered with the right bytes, and
    the waits show in bookie_read_waits_total. Adds on those connections still go through.
    (Plain reads that memory answers are never in flight: they are answered as they are
    parsed, between the fencing reads here.)"""
    (bookie,) = bookies(
        1,
        extra_args=["--connection-reads-in-flight-max", "1", "--reads-in-flight-max", "2"],
    )
    rng = random.Random(seed())
    payloads = {entry: rng.randbytes(rng.choice([10, 4000, 60_000])) for entry in range(40)}

    async def scenario() -> None:
        writer = await RawBookie.connect(bookie.port)
        try:
            for entry, payload in payloads.items():
                assert await writer.add(77, entry, payload) == Status.OK
        finally:
            await writer.close()
        clients = [await RawBookie.connect(bookie.port) for _ in range(6)]
        try:

            async def fenced_read(client: RawBookie, entry: int) -> bytes:
                status, response = await client.read(77, entry, fence=True)
                assert status == Status.OK
                return bytes(protocol.Entry.decode(response.entry).payload)

            async def plain_read(client: RawBookie, entry: int) -> bytes | None:
                return await client.read_payload(77, entry)

            reads = [
                asyncio.ensure_future(read(client, entry))
                for client in clients
                for entry in payloads
                for read in (fenced_read, plain_read)
            ]
            adds = [
                asyncio.ensure_future(client.add(78 + n, 0, b"behind reads"))
                for n, client in enumerate(clients)
            ]
            results = await asyncio.wait_for(asyncio.gather(*reads), WAIT_S)
            assert results == [payloads[e] for _ in clients for e in payloads for _ in "ab"]
            assert await asyncio.wait_for(asyncio.gather(*adds), WAIT_S) == [Status.OK] * 6
        finally:
            for client in clients:
                await client.close()

    asyncio.run(scenario())
    metrics = http_get(bookie.http_port, "/metrics")[1]
    assert metric_value(metrics, "bookie_read_waits_total") > 0
    assert bookie.alive()


def test_lac_long_poll_and_explicit_lac(bookies: BookieFactory, zk_client) -> None:  # type: ignore[no-untyped-def]
    from blobstore.wire import zk_layout

    (bookie,) = bookies(1, ["--registration-refresh-s", "0.3"])

    async def scenario() -> None:
        client = await RawBookie.connect(bookie.port)
        try:
            assert await client.add(4, 0, b"zero") == Status.OK
            assert (await client.read_lac(4)) == (Status.OK, protocol.NO_ENTRY)
            # A long poll that times out says so, with the LAC it knows.
            status, response = await client.read(4, 0, long_poll=(protocol.NO_ENTRY, 100))
            assert status == Status.TIMEOUT
            assert response.last_add_confirmed == protocol.NO_ENTRY
            # Long polls answered by an add that confirms entry 0, sent on the same
            # connection: more polls than a connection's read bound never block it.
            waiting = [
                asyncio.ensure_future(client.read(4, 0, long_poll=(protocol.NO_ENTRY, 10_000)))
                for _ in range(80)
            ]
            await asyncio.sleep(0.1)
            assert not any(w.done() for w in waiting)
            assert await client.add(4, 1, b"one") == Status.OK  # piggybacks LAC 0
            for status, response in await asyncio.wait_for(asyncio.gather(*waiting), WAIT_S):
                assert status == Status.OK
                assert response.last_add_confirmed == 0
                assert protocol.Entry.decode(response.entry).payload == b"zero"
            # An explicit LAC, durable before its answer.
            frame = await client.call(Op.WRITE_LAC, 0, protocol.WriteLacRequest(4, KEY, 1).encode())
            assert frame.flags_or_status == Status.OK
            wrong = protocol.WriteLacRequest(4, protocol.master_key(b"no"), 1).encode()
            assert (
                await client.call(Op.WRITE_LAC, 0, wrong)
            ).flags_or_status == Status.UNAUTHORIZED
        finally:
            await client.close()

    asyncio.run(scenario())
    bookie.kill()
    bookie.start()

    async def after() -> None:
        client = await RawBookie.connect(bookie.port)
        try:
            assert (await client.read_lac(4)) == (Status.OK, 1)
        finally:
            await client.close()

    asyncio.run(after())
    # The registration comes back when its znode is removed (as after a session loss).
    zk_client.delete(zk_layout.available_path(bookie.bookie_id))
    wait_until(
        lambda: zk_client.exists(zk_layout.available_path(bookie.bookie_id)) is not None,
        WAIT_S,
        message="the bookie registered again",
    )
