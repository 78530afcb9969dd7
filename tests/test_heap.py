"""Freed buffer memory stays with the process: the next buffers take no page faults."""

from __future__ import annotations

import subprocess
import sys

# Rounds of eight 1 MiB buffers, written and freed, as a gateway's large answers are;
# prints the page faults of the measured rounds (after two to warm up).
_ROUNDS = """
import resource, sys
import numpy
from blobstore.runtime.heap import keep_freed_memory

if sys.argv[1] == "kept":
    assert keep_freed_memory()

def rounds(count):
    for _ in range(count):
        buffers = [numpy.empty(1 << 20, numpy.uint8) for _ in range(8)]
        for buffer in buffers:
            buffer.fill(1)
        del buffers

rounds(2)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_freed_buffers_are_reused_without_page_faults() -> None:
    returned = _page_faults("returned")  # glibc's own thresholds
    kept = _page_faults("kept")
    # 20 rounds x 8 MiB is 40,960 pages: with the memory handed back, thousands fault.
    assert returned > 1000, returned
    assert kept < 64, (kept, returned)
