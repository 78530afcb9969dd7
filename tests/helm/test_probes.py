"""The rendered HTTP probes answer on a real bookie and a real gateway, started by the
suite's own fixtures (not from the chart): what the kubelet asks, the program answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cluster.gateway import GatewayProcess
from tests.cluster.processes import ProcessReaper
from tests.conftest import BookieFactory
from tests.helm.chart import FULLNAME, render
from tests.helm.local_pods import http_probe
from tests.waiting import wait_until

PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def http_probes(kind: str, name: str) -> list[dict[str, Any]]:
    container = render().get(kind, name)["spec"]["template"]["spec"]["containers"][0]
    return [container[p]["httpGet"] for p in PROBES if "httpGet" in container.get(p, {})]


def test_bookie_and_gateway_answer_the_charts_probes(
    zk_connect: str, bookies: BookieFactory, reaper: ProcessReaper, tmp_path: Path
) -> None:
    bookie = bookies(1)[0]
    gateway = GatewayProcess("gateway", zk_connect, tmp_path / "gateway", reaper).start()
    bookie_probes = http_probes("StatefulSet", f"{FULLNAME}-bookie")
    gateway_probes = http_probes("Deployment", f"{FULLNAME}-gateway")
    assert len(bookie_probes) == 3 and len(gateway_probes) == 2
    for get in bookie_probes:
        assert http_probe(get, bookie.http_port), get
    # /health turns 200 once the gateway's object store is up.
    wait_until(
        lambda: all(http_probe(get, gateway.port) for get in gateway_probes),
        30,
        message=lambda: str(gateway_probes),
    )
