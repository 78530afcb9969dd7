"""How every blobstore process logs: one line per record on stderr, and every thread's
stack there on SIGUSR1."""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys


def configure_logging(level: int) -> None:
    """Log lines to stderr; also called by worker processes, which start afresh."""
    # The format names no source file or line: skip the stack walk that finds them for
    # every record (half the cost of a gateway's access-log line).
    logging._srcfile = None
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # `kill -USR1 PID`: every thread's Python stack to stderr, beside the log lines, as
    # a JVM's thread dump; the process goes on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
