"""`blobstore standalone` supervises its children: a killed bookie, gateway or ZooKeeper
is started again (with backoff, a line on the console) and the cluster serves again;
Ctrl-C stops the gateway, then the bookies, then ZooKeeper, within STOP_TOTAL_S."""

from __future__ import annotations

import datetime
import functools
import os
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from blobstore.cli.standalone import STOP_TOTAL_S
from blobstore.cli.supervision import RestartPolicy, Supervisor, restart_delay_s
from blobstore.cli.zookeeper_server import free_port
from tests.cluster.processes import ProcessReaper
from tests.standalone.cluster import Standalone
from tests.waiting import wait_until

SEED = int(os.environ.get("BLOBSTORE_TEST_SEED", "20261128"))
BACK_S = 90.0

# ---------------------------------------------------------------------- the decision


@pytest.mark.parametrize(
    ("exits", "delay_s"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 16.0), (6, None), (50, None)],
)
def test_restart_backoff_doubles_and_a_crash_loop_is_given_up(
    exits: int, delay_s: float | None
) -> None:
    assert restart_delay_s(RestartPolicy(), exits) == delay_s


def test_backoff_is_capped() -> None:
    policy = RestartPolicy(backoff_s_min=1.0, backoff_s_max=5.0, restarts_max=10, window_s=60)
    assert [restart_delay_s(policy, n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


class FakeChild:
    def __init__(self, name: str) -> None:
        self.name = name
        self.log_path = Path(f"/logs/{name}.log")
        self.running = True
        self.starts = 0
        self.serving = True

    def alive(self) -> bool:
        return self.running

    def exit_code(self) -> int | None:
        return None if self.running else -9

    def last_error_line(self) -> str:
        return "killed"

    def restart(self) -> None:
        self.running, self.serving = True, False
        self.starts += 1

    def ready(self) -> bool:
        return self.serving


def test_supervisor_restarts_after_the_backoff_and_gives_up_on_a_crash_loop() -> None:
    now = [100.0]
    lines: list[str] = []
    bookie, gateway = FakeChild("bookie-1"), FakeChild("gateway")
    policy = RestartPolicy(backoff_s_min=1.0, backoff_s_max=4.0, restarts_max=3, window_s=60)
    supervisor = Supervisor(
        [bookie, gateway], policy, clock=lambda: now[0], say=lambda line, **_: lines.append(line)
    )
    assert supervisor.poll() is None and lines == []
    bookie.running = False
    assert supervisor.poll() is None
    assert "bookie-1 exited with code -9: killed" in lines[-1] and "restarting in 1s" in lines[-1]
    now[0] += 0.5
    assert supervisor.poll() is None and bookie.starts == 0  # the backoff is waited out
    now[0] += 0.5
    assert supervisor.poll() is None and bookie.starts == 1
    bookie.serving = True
    assert supervisor.poll() is None and "bookie-1: serving again" in lines[-1]
    for delay_s in (2.0, 4.0):  # exits within the window: the backoff doubles
        bookie.running = False
        supervisor.poll()
        assert f"restarting in {delay_s:g}s" in lines[-1]
        now[0] += delay_s
        supervisor.poll()
    bookie.running = False
    reason = supervisor.poll()
    assert reason is not None and "exited 4 times within 60s" in reason
    assert gateway.starts == 0  # the others were left alone


def test_exits_out_of_the_window_are_forgotten() -> None:
    now = [0.0]
    child = FakeChild("bookie-0")
    policy = RestartPolicy(backoff_s_min=1.0, backoff_s_max=8.0, restarts_max=2, window_s=10)
    supervisor = Supervisor([child], policy, clock=lambda: now[0], say=lambda *_, **__: None)
    for _ in range(5):  # one exit every 20 s is never a crash loop
        child.running = False
        assert supervisor.poll() is None
        now[0] += 1.0
        assert supervisor.poll() is None and child.alive()
        now[0] += 19.0
    assert child.starts == 5


# ---------------------------------------------------------------------- a real standalone


def _pid_of(cluster: Standalone, marker: str) -> int:
    """The child of the supervisor whose command line holds `marker`."""
    for pid in _children(cluster.pgid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if marker.encode() in f.read():
                return pid
    raise AssertionError(f"no child with {marker!r}:\n{cluster.log_tails()}")


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(entry))
    return found


def _supervisor_log(cluster: Standalone) -> str:
    assert cluster.managed is not None
    return cluster.managed.log_path.read_text(errors="replace")


def _put_works(s3: Any, key: str, body: bytes) -> bool:
    try:
        s3.put_object(Bucket="sup", Key=key, Body=body)
    except (ClientError, BotoCoreError):
        return False
    return True


def _kill_and_see_it_back(cluster: Standalone, marker: str, name: str) -> None:
    victim = _pid_of(cluster, marker)
    restarts = _supervisor_log(cluster).count(f"{name}: serving again")
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: _supervisor_log(cluster).count(f"{name}: serving again") > restarts,
        BACK_S,
        message=lambda: f"{name} back:\n{cluster.log_tails()}",
        interval_s=0.2,
    )
    assert f"{name} exited with code -9" in _supervisor_log(cluster)
    assert _pid_of(cluster, marker) != victim


def _tails(cluster: Standalone, awaited: str) -> str:
    return f"{awaited}:\n{cluster.log_tails()}"


def _check_all(s3: Any, objects: dict[str, bytes]) -> None:
    for key, body in objects.items():
        assert s3.get_object(Bucket="sup", Key=key)["Body"].read() == body, key


LOG_TIME = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(bookie stopping|gateway_stopped)"
)


def _last_time(log: Path, event: str) -> datetime.datetime:
    times = [
        match.group(1)
        for line in log.read_text(errors="replace").splitlines()
        if (match := LOG_TIME.match(line)) and match.group(2) == event
    ]
    assert times, f"no {event} in {log}"
    return datetime.datetime.strptime(times[-1], "%Y-%m-%d %H:%M:%S,%f")


def test_killed_children_come_back_and_ctrl_c_stops_in_order(
    tmp_path: Path, reaper: ProcessReaper
) -> None:
    rng = random.Random(SEED)
    print(f"BLOBSTORE_TEST_SEED={SEED}")
    cluster = Standalone(
        tmp_path / "data", free_port(), reaper, ("--maintenance-interval", "0")
    ).start()
    s3 = cluster.s3()
    s3.create_bucket(Bucket="sup")
    objects = {f"before/{n}": rng.randbytes(rng.choice([10, 70_000, 1_500_000])) for n in range(4)}
    for key, body in objects.items():
        s3.put_object(Bucket="sup", Key=key, Body=body)

    for name, marker in (
        ("bookie-1", "bookie-1/journal"),
        ("gateway", "gateway-ready.json"),
        ("ZooKeeper", "zoo.cfg"),
    ):
        _kill_and_see_it_back(cluster, marker, name)
        key, body = f"after-{name}", rng.randbytes(200_000)
        s3 = cluster.s3()
        wait_until(
            functools.partial(_put_works, s3, key, body),
            BACK_S,
            message=functools.partial(_tails, cluster, f"a PUT after {name} came back"),
            interval_s=0.5,
        )
        objects[key] = body
        _check_all(s3, objects)

    started = time.monotonic()
    assert cluster.signal_group(signal.SIGINT) == 0, cluster.log_tails()  # Ctrl-C
    took_s = time.monotonic() - started
    cluster.assert_nothing_left()
    stopped = re.findall(r"^(\S+) stopped after ([\d.]+)s$", _supervisor_log(cluster), re.M)
    names = [name for name, _ in stopped]
    assert names == ["gateway", "bookie-0", "bookie-1", "bookie-2", "ZooKeeper"], stopped
    assert float(stopped[-1][1]) < STOP_TOTAL_S, stopped
    assert took_s < STOP_TOTAL_S + 2.0, took_s  # the supervisor's own exit on top
    # No bookie began its stop before the gateway was done (a Ctrl-C reaches them all).
    logs = tmp_path / "data" / "logs"
    gateway_done = _last_time(logs / "gateway.log", "gateway_stopped")
    for index in range(3):
        assert _last_time(logs / f"bookie-{index}.log", "bookie stopping") >= gateway_done
