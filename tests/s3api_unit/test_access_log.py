"""The buffered access log: logging's line format, written when the worker is idle or
the buffer is old or full, written before any other record of the process (the stream
keeps the order of events), and silent when its logger is disabled."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge

from blobstore.access.decision import Decision
from blobstore.runtime.sampled_gauge import SampledGauge
from s3api import access_log
from s3api.access_log import AccessLog

LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO s3api\.access: request_id=R(\d+) "
    r"operation=GetObject method=GET path=/b/k status=200 bytes_in=0 bytes_out=4096 "
    r"duration_ms=2\.5 principal=- decision=-$"
)


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    try:
        yield out
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def _log(n: int) -> AccessLog:
    gauge = SampledGauge(Gauge("t_access_in_flight", "f", registry=CollectorRegistry()))
    log = AccessLog(gauge)
    log.start()
    gauge.value = n
    return log


def _request(log: AccessLog, n: int) -> None:
    log.request(f"R{n}", "GetObject", "GET", "/b/k", "200", 0, 4096, 0.0025)


def test_lines_are_batched_and_keep_their_order(stream: io.StringIO) -> None:
    log = _log(4)  # requests in flight: lines wait
    for n in range(1, 4):
        _request(log, n)
    assert stream.getvalue().count("s3api.access") <= 1  # the first may open the interval
    logging.getLogger("s3api.handlers").warning("something happened")
    lines = stream.getvalue().splitlines()
    assert [int(m.group(1)) for m in map(LINE.match, lines[:-1]) if m] == [1, 2, 3]
    assert lines[-1].endswith("WARNING s3api.handlers: something happened")
    log.in_flight.value = 0
    _request(log, 4)  # idle: written at once
    assert LINE.match(stream.getvalue().splitlines()[-1])


def test_written_when_full_or_old(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [10.0]
    monkeypatch.setattr("s3api.access_log.time.monotonic", lambda: now[0])
    log = _log(8)
    _request(log, 0)  # the first line opens the interval
    assert stream.getvalue().count("\n") == 1
    for n in range(1, access_log.FLUSH_LINES):
        _request(log, n)
    assert stream.getvalue().count("\n") == 1  # 255 lines wait
    _request(log, access_log.FLUSH_LINES)  # the 256th fills the buffer
    assert stream.getvalue().count("\n") == 1 + access_log.FLUSH_LINES
    _request(log, 999)
    waiting = stream.getvalue().count("\n")
    now[0] += access_log.FLUSH_INTERVAL_S
    _request(log, 1000)
    assert stream.getvalue().count("\n") == waiting + 2
    assert all(LINE.match(line) for line in stream.getvalue().splitlines())


def test_silent_below_info_and_when_turned_off(stream: io.StringIO) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    log = _log(0)
    _request(log, 1)
    log.flush()
    assert stream.getvalue() == ""
    logging.getLogger().setLevel(logging.INFO)
    log.start(enabled=False)
    _request(log, 2)
    log.flush()
    assert stream.getvalue() == ""


def test_lines_name_the_principal_and_the_decision(stream: io.StringIO) -> None:
    log = _log(0)
    decision = Decision(
        True, "bucket-policy", "bucket policy", "Public Read", "s3:GetObject", "arn:aws:s3:::b/k"
    )
    log.request(
        "R9",
        "GetObject",
        "GET",
        "/b/k",
        "200",
        0,
        1,
        0.001,
        principal="anonymous",
        decision=decision,
    )
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(
        'principal=anonymous decision=allow rule=bucket-policy source="bucket policy" '
        'statement="Public Read" action=s3:GetObject resource=arn:aws:s3:::b/k'
    ), line
