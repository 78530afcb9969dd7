"""`blobstore admin simpletest` and `blobstore admin ledgers` against real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from tests.cluster.processes import blobstore_command
from tests.conftest import BookieFactory
from tests.waiting import wait_until

TIMEOUT_S = 120


def admin(zk_connect: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        blobstore_command("admin", "--zk", zk_connect, *args),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_simpletest_and_ledgers_commands(bookies: BookieFactory, zk_connect: str) -> None:
    bookies(3)
    result = admin(
        zk_connect,
        "--json",
        "simpletest",
        "-e",
        "3",
        "-w",
        "2",
        "-a",
        "2",
        "-n",
        "300",
        "--size",
        "700",
        "--keep",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["entries"] == 300
    assert report["mismatch_count"] == 0
    assert report["write_entries_per_s"] > 0
    assert set(report["add_latency_ms"]) == {"p50", "p99", "p999", "max"}
    ledger_id = report["ledger_id"]

    listing = admin(zk_connect, "--json", "ledgers")
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    row = next(r for r in rows if r["ledger_id"] == ledger_id)
    assert row["state"] == "CLOSED"
    assert row["last_entry_id"] == 299
    assert row["length"] == 300 * 700
    assert (row["ensemble_size"], row["write_quorum"], row["ack_quorum"]) == (3, 2, 2)
    assert len(row["bookies"]) == 3

    shown = admin(zk_connect, "--json", "ledgers", "show", str(ledger_id))
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["ledger_id"] == ledger_id
    assert document["custom"] == {"purpose": "simpletest"}
    assert document["ensembles"][0][0] == 0

    table = admin(zk_connect, "ledgers")
    assert table.returncode == 0, table.stderr
    assert "CLOSED" in table.stdout and "3/2/2" in table.stdout
    table = admin(zk_connect, "ledgers", "show", str(ledger_id))
    assert table.returncode == 0, table.stderr
    assert "ensembles" in table.stdout

    human = admin(zk_connect, "simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "50")
    assert human.returncode == 0, human.stderr
    assert "verified" in human.stdout and "ok" in human.stdout


def test_admin_ledger_commands_reject_bad_input(zk_connect: str) -> None:
    for args, needle in (
        (("ledgers", "show", "424242"), "no ledger 424242"),
        (("ledgers", "show", "x"), "ledger id"),
        (("simpletest", "-e", "3", "-w", "4", "-a", "2", "-n", "5"), "-e >= -w >= -a"),
        (("simpletest", "-e", "5", "-w", "2", "-a", "2", "-n", "5"), "writable bookies"),
        (("simpletest", "-n", "0"), "-n must be"),
    ):
        result = admin(zk_connect, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.startswith("blobstore: error")]
        assert len(lines) == 1 and needle in lines[0], (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_an_interrupted_simpletest_leaves_no_open_ledger(
    bookies: BookieFactory, zk_connect: str
) -> None:
    """Ctrl-C in the middle of the writes: the test ledger is deleted (it was left OPEN,
    listed by `ledgers` and `fsck` for ever)."""
    bookies(3)

    def simpletest_ledgers() -> list[dict[str, object]]:
        listing = admin(zk_connect, "--json", "ledgers")
        assert listing.returncode == 0, listing.stderr
        rows: list[dict[str, object]] = json.loads(listing.stdout)
        return [r for r in rows if r["ledger_id"] not in before]

    before = {r["ledger_id"] for r in json.loads(admin(zk_connect, "--json", "ledgers").stdout)}
    command = blobstore_command(
        "admin", "--zk", zk_connect, "simpletest", "-e", "3", "-w", "2", "-a", "2",
        "-n", "5000000", "--size", "10",
    )  # fmt: skip
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as process:

        def opened() -> bool:
            if any(r["state"] == "OPEN" for r in simpletest_ledgers()):
                return True
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            return False

        try:
            wait_until(
                opened, TIMEOUT_S, message="simpletest never opened its ledger", interval_s=0.2
            )
            process.send_signal(signal.SIGUSR1)  # a thread dump; the run goes on
            process.send_signal(signal.SIGINT)
            exited = _exit_status(process, TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
        dump = process.stderr.read() if process.stderr else ""
    assert exited == 130, f"simpletest did not stop on SIGINT; its threads then:\n{dump}"
    assert "most recent call first" in dump and "simpletest.py" in dump, dump
    assert simpletest_ledgers() == []


def _exit_status(process: subprocess.Popen[str], timeout_s: float) -> int | None:
    """The exit status, or None after a thread dump (SIGUSR1) when still running."""
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)
        time.sleep(2)
        return None
