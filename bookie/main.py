"""Run a bookie: the storage server of the ledger layer (journal, entry logs, index).

    blobstore bookie --zk HOST:PORT[/chroot] --host H --port P --journal-dir D
                     --ledger-dir D --http-port P [--ready-file F] [--rack R] [tunables]

Every tunable is also read from BLOBSTORE_BOOKIE_<NAME>; see docs/bookie.md.
Startup: bind, check the cookie, replay the journal, serve, register in ZooKeeper, then
write the ready file. SIGTERM/SIGINT: stop accepting, finish in-flight requests,
unregister (bounded), close the journal, checkpoint, exit 0. Exit codes: 2 usage, 3 cookie
mismatch, 4 corrupt journal (or a damaged large entry one of its records names), 5 the entry logs or index cannot be written (at start or
after repeated failed checkpoints), 6 the journal cannot be written (at start, or a write
or fsync failed other than on a full disk); see docs/bookie.md.
"""

from __future__ import annotations

import argparse
import logging
import sys

from bookie import config as bookie_config
from bookie import cookie
from bookie.bookie import EXIT_JOURNAL_FAILED, EXIT_STORAGE_FAILED, Bookie
from bookie.journal import JournalCorruptError, JournalUnavailableError
from bookie.ledger_storage import DirectEntryCorruptError, StorageWriteError

logger = logging.getLogger(__name__)

EXIT_COOKIE_MISMATCH = 3
EXIT_JOURNAL_CORRUPT = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    bookie_config.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if not __debug__:
        print(
            "blobstore: error: the bookie refuses to run with assertions off (-O)", file=sys.stderr
        )
        return 2
    config = bookie_config.from_args(args)
    sys.setswitchinterval(config.thread_switch_interval_ms / 1000)
    import prometheus_client
    import uvloop

    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # `*_created` series: noise for a server

    try:
        return uvloop.run(Bookie(config).main())
    except cookie.CookieMismatchError as e:
        print(f"blobstore: error: {e}", file=sys.stderr)
        return EXIT_COOKIE_MISMATCH
    except DirectEntryCorruptError as e:
        print(
            f"blobstore: error: {e}. The bookie does not start: check the disk; move that "
            "journal file out of the journal directory to start without the entries it "
            "holds (the other replicas of those entries still hold them); see "
            "docs/bookie.md.",
            file=sys.stderr,
        )
        return EXIT_JOURNAL_CORRUPT
    except JournalCorruptError as e:
        print(
            f"blobstore: error: {e}. The bookie does not start: move the damaged file out "
            "of the journal directory to start without what follows the damage (the other "
            "replicas of those entries still hold them); see docs/operations.md.",
            file=sys.stderr,
        )
        return EXIT_JOURNAL_CORRUPT
    except StorageWriteError as e:
        print(
            f"blobstore: error: {e}. The bookie does not start: free space on (or replace) "
            "the ledger disk and start it again; the journal keeps the entries.",
            file=sys.stderr,
        )
        return EXIT_STORAGE_FAILED
    except JournalUnavailableError as e:
        print(
            f"blobstore: error: {e}. The bookie does not start: free space on (or replace) "
            "the journal disk and start it again; the journal files keep the entries.",
            file=sys.stderr,
        )
        return EXIT_JOURNAL_FAILED
