"""The gateway's access log: one line per request, written in batches.

A line per request through `logging` costs a LogRecord, a formatter pass and a write
system call with its flush: a visible share of a small GET's CPU. The access log keeps
logging's line format (`2026-11-21 10:41:52,123 INFO s3api.access: request_id=...`)
but formats the line itself and appends it to a buffer, written to the root logger's
stream in one call when no request is in flight, when half a second has passed since
the last write, or when the buffer holds 256 lines. Any other log record of the
process first writes the buffer out (a filter on the root handlers), so the stream
keeps the order in which things happened.

Each line names who asked and what authorization decided (`principal`, then the
decision's fields, `blobstore.access.decision.Decision.log_fields`):

    principal=alice decision=allow rule=bucket-policy source="bucket policy"
    statement=PublicRead action=s3:GetObject resource=arn:aws:s3:::photos/a.jpg

`principal` is the user's name, `anonymous`, or `-` when the request failed before it
was authenticated; a request refused or answered before any decision has
`decision=-`. Values holding spaces or quotes are written as JSON strings.

It is on when the `s3api.access` logger is enabled for INFO (the default level) and
the root logger writes to a stream; otherwise each line goes through `logging`
(another handler configuration) or nowhere (`--log-level warning`, `--no-access-log`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TextIO

from blobstore.access.decision import Decision
from blobstore.runtime.sampled_gauge import SampledGauge

LOGGER_NAME = "s3api.access"
FLUSH_INTERVAL_S = 0.5
FLUSH_LINES = 256

logger = logging.getLogger(LOGGER_NAME)


class AccessLog:
    def __init__(self, in_flight: SampledGauge) -> None:
        self.in_flight = in_flight
        self.enabled = False
        self._handler: logging.StreamHandler[TextIO] | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()  # other threads' records flush too
        self._next_flush = 0.0
        self._second = -1
        self._second_text = ""

    def start(self, enabled: bool = True) -> None:
        """Decide where lines go, from the logging configuration of this process."""
        self.enabled = enabled and logger.isEnabledFor(logging.INFO)
        self._handler = None
        if not self.enabled or not logger.propagate:
            return
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:
                self._handler = handler
                if not any(isinstance(f, _FlushFirst) for f in handler.filters):
                    handler.addFilter(_FlushFirst(self))
                return

    def request(
        self,
        request_id: str,
        operation: str,
        method: str,
        path: str,
        status: str,
        bytes_in: int,
        bytes_out: int,
        duration_s: float,
        *,
        principal: str = "-",
        decision: Decision | None = None,
    ) -> None:
        if not self.enabled:
            return
        fields = (
            f"request_id={request_id} operation={operation} method={method} path={path} "
            f"status={status} bytes_in={bytes_in} bytes_out={bytes_out} "
            f"duration_ms={duration_s * 1000:.1f} principal={_value(principal)} "
            f"{decision_fields(decision)}"
        )
        if self._handler is None:
            logger.info("%s", fields)
            return
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        millis = int((now - second) * 1000)
        line = f"{self._second_text},{millis:03d} INFO {LOGGER_NAME}: {fields}\n"
        with self._lock:
            self._lines.append(line)
        if (
            self.in_flight.value == 0
            or len(self._lines) >= FLUSH_LINES
            or time.monotonic() >= self._next_flush
        ):
            self.flush()

    def flush(self) -> None:
        self._next_flush = time.monotonic() + FLUSH_INTERVAL_S
        handler = self._handler
        if not self._lines or handler is None:
            return
        with self._lock:
            lines, self._lines = self._lines, []
        handler.acquire()  # the handler's own lock: no line is cut by another record
        try:
            handler.stream.write("".join(lines))
            handler.stream.flush()
        except (OSError, ValueError):  # stream closed or broken: like logging, go on
            pass
        finally:
            handler.release()


def _value(text: str) -> str:
    """A field's value: as it is, or a JSON string when it holds a space, a quote or a
    control character (or is empty)."""
    if text and text.isprintable() and not any(c in text for c in ' "='):
        return text
    return json.dumps(text)


def decision_fields(decision: Decision | None) -> str:
    """`decision=... rule=... source=... statement=... action=... resource=...`, or
    `decision=-` for none."""
    if decision is None:
        return "decision=-"
    return " ".join(f"{name}={_value(value)}" for name, value in decision.log_fields().items())


class _FlushFirst(logging.Filter):
    """Writes the buffered access lines before any other record of the handler."""

    def __init__(self, access_log: AccessLog) -> None:
        super().__init__()
        self.access_log = access_log

    def filter(self, record: logging.LogRecord) -> bool:
        self.access_log.flush()
        return True
