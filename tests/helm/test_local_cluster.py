"""The rendered chart's pods run as local processes (tests/helm/local_pods.py): a
ZooKeeper ensemble of three, three bookies whose racks come from their nodes' labels, a
gateway serving HTTPS with the users of the chart's Secret and the chart's cluster key,
and autorecovery. Then S3 works through boto3, a user added with `blobstore admin` in the
gateway's pod is served, a rescheduled bookie keeps its id, and the maintenance CronJob's
command runs once and succeeds: in the chart's default Spark mode (local), and in its
Kubernetes mode's spark-submit with a local master in place of the Kubernetes API.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from kazoo.client import KazooClient

from blobstore.cli.zookeeper_server import four_letter_word
from tests.cluster.gateway import make_self_signed_cert
from tests.cluster.processes import ProcessReaper
from tests.helm.chart import FULLNAME, SPARK_KUBERNETES, Rendered, render
from tests.helm.kube_api import FakeKubeApi
from tests.helm.local_pods import POD_IP, LocalCluster, LocalPod, Node
from tests.waiting import wait_until

RACK_LABEL = "topology.kubernetes.io/zone"
# Bookie n runs on node n: racks /a, /b, and the default for a node without the label.
NODES = [Node("node-a", {RACK_LABEL: "a"}), Node("node-b", {RACK_LABEL: "b"}), Node("node-c")]
LOCAL_VALUES: dict[str, Any] = {
    "zookeeper": {"heapMb": 256},
    "bookies": {"replicas": 3, "settings": {"write_cache_bytes_max": 16 << 20}},
    "gateway": {
        "replicas": 1,
        "autoscaling": {"enabled": False},
        "tls": {"enabled": True, "secretName": "s3-tls"},
    },
    # Writer ledgers close at 1 MiB: a deleted object leaves closed ledgers to reclaim.
    "objects": {"entry_size_bytes": 65536, "ledger_bytes_max": 1 << 20},
    "maintenance": {"graceSeconds": 0, "json": True, "spark": {"localCores": "2"}},
}
SPARK_KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc:443"
START_TIMEOUT_S = 90.0
ADMIN_TIMEOUT_S = 60.0
USER_SEEN_S = 10.0  # stored users reach a gateway within seconds
MAINTAIN_TIMEOUT_S = 300.0


@dataclass
class Running:
    local: LocalCluster
    api: FakeKubeApi
    cert: Path
    zookeepers: list[LocalPod]
    bookies: list[LocalPod]
    gateway: LocalPod
    autorecovery: LocalPod

    @property
    def rendered(self) -> Rendered:
        return self.local.rendered

    def zk_connect(self) -> str:
        args = self.bookies[0].main_container().command
        return args[args.index("--zk") + 1]

    def s3(self, keys: dict[str, str] | None = None) -> Any:
        """A client of the gateway: as the chart's admin user, or with `keys`."""
        users = self.rendered.get("Secret", f"{FULLNAME}-users")["stringData"]
        access_key, secret_key = (
            (keys["access_key"], keys["secret_key"])
            if keys
            else (users["access-key"], users["secret-key"])
        )
        return boto3.client(
            "s3",
            endpoint_url=f"https://{POD_IP}:{self.gateway.port('s3')}",
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name="us-east-1",
            verify=str(self.cert),
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )


def start_all(local: LocalCluster) -> tuple[list[LocalPod], ...]:
    zookeepers = [pod.start() for pod in local.pods_of(f"{FULLNAME}-zookeeper")]
    for pod in zookeepers:
        pod.wait_probe("readinessProbe", START_TIMEOUT_S)
    bookies = [pod.start() for pod in local.pods_of(f"{FULLNAME}-bookie")]
    for pod in bookies:
        pod.wait_probe("startupProbe", START_TIMEOUT_S)
    gateways = [pod.start() for pod in local.pods_of(f"{FULLNAME}-gateway")]
    autorecovery = [pod.start() for pod in local.pods_of(f"{FULLNAME}-autorecovery")]
    gateways[0].wait_probe("readinessProbe", START_TIMEOUT_S)
    autorecovery[0].wait_probe("livenessProbe", START_TIMEOUT_S)
    return zookeepers, bookies, gateways, autorecovery


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("helm-local")
    reaper = ProcessReaper()
    api = FakeKubeApi(root / "kube-api", {n.name: n.labels for n in NODES}).start()
    cert, key = make_self_signed_cert(root / "s3-tls")
    local = LocalCluster(
        render(LOCAL_VALUES),
        root / "pods",
        reaper,
        nodes=NODES,
        api=api,
        secrets={"s3-tls": {"tls.crt": cert.read_text(), "tls.key": key.read_text()}},
    )
    local.plan_workloads()
    try:
        zookeepers, bookies, gateways, autorecovery = start_all(local)
        yield Running(local, api, cert, zookeepers, bookies, gateways[0], autorecovery[0])
    except BaseException:
        print(reaper.log_tails())
        raise
    finally:
        reaper.reap_all()
        api.stop()


def registrations(running: Running) -> dict[str, dict[str, Any]]:
    client = KazooClient(hosts=running.zk_connect(), timeout=15)
    client.start(timeout=15)
    try:
        return {
            bookie_id: json.loads(client.get(f"/ledgers/available/{bookie_id}")[0])
            for bookie_id in client.get_children("/ledgers/available")
        }
    finally:
        client.stop()
        client.close()


def test_the_zookeeper_pods_form_an_ensemble_of_three(cluster: Running) -> None:
    modes = sorted(
        line.split(b": ")[1].decode()
        for pod in cluster.zookeepers
        for line in four_letter_word(POD_IP, pod.port("client"), b"srvr").splitlines()
        if line.startswith(b"Mode: ")
    )
    assert modes == ["follower", "follower", "leader"]
    for pod in cluster.zookeepers:
        assert pod.probe("livenessProbe"), pod.name


def test_bookies_register_under_their_pod_address_with_their_node_racks(cluster: Running) -> None:
    found = registrations(cluster)
    expected = {f"{POD_IP}:{pod.port('bookie')}": pod for pod in cluster.bookies}
    assert set(found) == set(expected)
    racks = {bookie_id: found[bookie_id]["rack"] for bookie_id in expected}
    assert sorted(racks.values()) == ["/a", "/b", "/default-rack"]
    assert racks[f"{POD_IP}:{cluster.bookies[0].port('bookie')}"] == "/a"
    assert {f"/api/v1/nodes/{n.name}" for n in NODES} <= set(cluster.api.paths)
    for pod in cluster.bookies:
        assert pod.probe("readinessProbe") and pod.probe("livenessProbe"), pod.name


def test_s3_works_through_the_rendered_gateway(cluster: Running) -> None:
    s3 = cluster.s3()
    s3.create_bucket(Bucket="charted")
    big = bytes(range(256)) * (12 * 1024)  # 3 MiB: entries in several ledgers
    s3.put_object(Bucket="charted", Key="small.txt", Body=b"hello from the chart")
    s3.put_object(Bucket="charted", Key="dir/big.bin", Body=big)
    assert (
        s3.get_object(Bucket="charted", Key="small.txt")["Body"].read() == b"hello from the chart"
    )
    assert s3.get_object(Bucket="charted", Key="dir/big.bin")["Body"].read() == big
    listed = s3.list_objects_v2(Bucket="charted")["Contents"]
    assert [o["Key"] for o in listed] == ["dir/big.bin", "small.txt"]
    for kind in ("readinessProbe", "livenessProbe"):
        assert cluster.gateway.probe(kind), kind
    assert cluster.autorecovery.probe("livenessProbe")


def answers(call: Callable[[], Any]) -> str:
    """The S3 error code of a call, or "OK"."""
    try:
        call()
    except ClientError as e:
        return str(e.response["Error"]["Code"])
    return "OK"


def test_a_user_added_in_the_gateway_pod_is_served_under_the_charts_cluster_key(
    cluster: Running,
) -> None:
    """`kubectl exec deploy/<gateway> -- blobstore admin user add` (NOTES.txt): the admin
    command seals the new secret under the key the pod mounts, the gateway opens it."""
    args = cluster.gateway.plan.spec["containers"][0]["args"]
    zk = args[args.index("--zk") + 1]  # as NOTES.txt prints it
    add = ["blobstore", "admin", "--zk", zk, "user", "add", "carol", "--policy", "readwrite"]
    done = cluster.gateway.exec([*add, "--json"], ADMIN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    carol = cluster.s3(json.loads(done.stdout))
    wait_until(
        lambda: answers(carol.list_buckets) == "OK",
        USER_SEEN_S,
        message="the gateway serves the user stored under its cluster key",
        interval_s=0.2,
    )
    carol.create_bucket(Bucket="carols")
    carol.put_object(Bucket="carols", Key="k", Body=b"sealed and opened")
    assert carol.get_object(Bucket="carols", Key="k")["Body"].read() == b"sealed and opened"


def test_a_rescheduled_bookie_keeps_its_id_and_data(cluster: Running) -> None:
    s3 = cluster.s3()
    s3.create_bucket(Bucket="restarts")
    s3.put_object(Bucket="restarts", Key="k", Body=b"x" * 300_000)
    bookie = cluster.bookies[0]
    bookie_id = f"{POD_IP}:{bookie.port('bookie')}"
    assert bookie.stop() == 0
    # The same pod again: init containers, then the container on the same volumes (its
    # cookie) and the same name and port (its id).
    bookie.start().wait_probe("readinessProbe", START_TIMEOUT_S)
    assert bookie_id in registrations(cluster)
    assert s3.get_object(Bucket="restarts", Key="k")["Body"].read() == b"x" * 300_000


def run_maintenance(local: LocalCluster, rewrite: dict[str, str] | None = None) -> dict[str, Any]:
    pod = local.pod(f"{FULLNAME}-maintenance-run", rewrite)
    done = pod.run_to_completion(MAINTAIN_TIMEOUT_S)
    assert done.returncode == 0, f"maintain failed:\n{done.stdout}\n{done.stderr[-6000:]}"
    # The JSON report; spark-submit sends the driver's log lines to stdout too.
    report: dict[str, Any] = json.JSONDecoder().raw_decode(done.stdout[done.stdout.index("{") :])[0]
    return report


def test_the_maintenance_cronjob_runs_once_and_reclaims(cluster: Running) -> None:
    s3 = cluster.s3()
    s3.create_bucket(Bucket="garbage")
    s3.put_object(Bucket="garbage", Key="gone", Body=b"g" * (3 << 20))
    s3.delete_object(Bucket="garbage", Key="gone")
    report = run_maintenance(cluster.local)
    assert report["outcome"] == "ok" and not report["errors"], report
    assert report["ledgers_deleted"] >= 1, report
    s3.put_object(Bucket="garbage", Key="kept", Body=b"k")
    assert s3.get_object(Bucket="garbage", Key="kept")["Body"].read() == b"k"


def test_the_spark_kubernetes_cronjob_runs_its_spark_submit(cluster: Running) -> None:
    """The Kubernetes mode's command: spark-submit with blobstore's entry point as the
    application, its flags and Spark settings as rendered; a local master stands in for
    the Kubernetes API (a dry run: the run above did the work)."""
    maintenance = {**LOCAL_VALUES["maintenance"], **SPARK_KUBERNETES["maintenance"]}
    local = cluster.local.rendered_again(
        render({**LOCAL_VALUES, "maintenance": {**maintenance, "dryRun": True}})
    )
    report = run_maintenance(local, {SPARK_KUBERNETES_MASTER: "local[2]"})
    assert report["outcome"] == "ok" and not report["errors"], report
    assert report["dry_run"] and report["phases"] == ["gc", "compact"], report
