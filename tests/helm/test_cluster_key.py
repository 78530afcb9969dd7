"""The cluster key on Kubernetes: the chart generates it once (random, kept by upgrades
and by `helm uninstall`) or takes an operator's Secret, and every pod whose program opens
sealed secrets or object ledgers (their passwords are derived from it) mounts it
read-only and finds it through BLOBSTORE_CLUSTER_KEY_FILE; no other pod gets it, and it
is never an environment value."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from blobstore.runtime.sealing import (
    CLUSTER_KEY_BYTES,
    CLUSTER_KEY_ENV,
    CLUSTER_KEY_FILE_ENV,
    parse_cluster_key,
)
from tests.helm.chart import (
    FULLNAME,
    NAMESPACE,
    ROOT,
    VALUE_SETS,
    Rendered,
    pod_templates,
    render,
    render_in_cluster,
)
from tests.helm.commands import Invocation, blobstore_argv, invocations
from tests.helm.kube_api import FakeKubeApi

GENERATED = f"{FULLNAME}-cluster-key"
KEY_MODE = 0o400
# Every module that loads the cluster key, and where the chart runs it. A new reader
# fails this list: give its pods the key (or say why none needs it) and add it here.
KEY_READERS = {
    "s3api/identities.py": "gateway",  # opens stored users' secrets
    "blobstore/objects/store.py": "gateway",  # reads objects moved to a tier
    "blobstore/maintenance/job.py": "maintain",  # the driver lists and cleans tiers
    "blobstore/maintenance/tiering.py": "spark-executor",  # tiering tasks write to tiers
    "blobstore/admin/users.py": "admin",  # `kubectl exec` in a gateway pod
    "blobstore/admin/tiers.py": "admin",
    "blobstore/admin/du.py": "admin",
    "blobstore/admin/kms.py": "admin",
    "blobstore/cli/standalone.py": "standalone",  # not on Kubernetes: its own key file
    # Object ledgers' passwords: every process that opens object ledgers (the gateway,
    # maintain and its executors, admin too); autorecovery only for them.
    "blobstore/ledger/passwords.py": "autorecovery",
}
# The blobstore commands (and Spark's executor) whose containers get the key.
KEY_COMMANDS = {"gateway", "maintain", "spark-executor", "autorecovery"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeKubeApi]:
    api = FakeKubeApi(tmp_path / "kube-api", {}).start()
    try:
        yield api
    finally:
        api.stop()


def generated_key(rendered: Rendered) -> str:
    secret = rendered.get("Secret", GENERATED)
    assert set(secret["stringData"]) == {"cluster.key"}, secret["stringData"]
    text: str = secret["stringData"]["cluster.key"]
    return text


def test_the_chart_generates_a_random_key_helm_keeps() -> None:
    first, second = render(), render()
    secret = first.get("Secret", GENERATED)
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    text = generated_key(first)
    # The key file's format: what load_cluster_key reads (base64 of 32 bytes, a newline).
    assert re.fullmatch(r"[A-Za-z0-9+/]{43}=\n", text), text
    assert len(parse_cluster_key(text, "generated").key) == CLUSTER_KEY_BYTES
    assert generated_key(second) != text  # random per install, not a constant


def test_an_upgrade_keeps_the_key_it_finds_in_the_cluster(api: FakeKubeApi) -> None:
    installed = generated_key(render_in_cluster(api.kubeconfig(), upgrade=False))
    api.put_secret(NAMESPACE, GENERATED, {"cluster.key": installed})
    for _ in range(2):
        upgraded = render_in_cluster(api.kubeconfig(), upgrade=True)
        assert generated_key(upgraded) == installed
    assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{GENERATED}" in api.paths


def test_an_upgrade_never_replaces_a_key_it_cannot_find_in_the_secret(api: FakeKubeApi) -> None:
    api.put_secret(NAMESPACE, GENERATED, {"other.key": "x"})
    with pytest.raises(helm.HelmRenderError) as refused:
        render_in_cluster(api.kubeconfig(), upgrade=True)
    message = str(refused.value)
    assert f"Secret {GENERATED} exists without the key cluster.key" in message, message


def command_of(invocation: Invocation) -> str:
    """The blobstore command a container runs (`maintain` under spark-submit too), or
    the chart script or launcher."""
    if invocation.program in ("blobstore", "spark-submit"):
        return blobstore_argv(invocation)[0]
    return invocation.program


def pod_of(rendered: Rendered, invocation: Invocation) -> dict[str, Any]:
    pods = [pod for workload, pod in pod_templates(rendered) if workload == invocation.workload]
    assert len(pods) == 1, invocation.where
    return pods[0]


def assert_mounts_the_key(
    rendered: Rendered, invocation: Invocation, secret: str, file_key: str
) -> None:
    c = invocation.container
    env = {e["name"]: e for e in c.get("env", [])}
    path = env[CLUSTER_KEY_FILE_ENV]["value"]
    mounts = [m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"] + "/")]
    assert len(mounts) == 1, (invocation.where, path)
    assert mounts[0]["readOnly"] is True, invocation.where
    volumes = {v["name"]: v for v in pod_of(rendered, invocation)["volumes"]}
    source = volumes[mounts[0]["name"]]["secret"]
    assert source["secretName"] == secret, invocation.where
    assert source["defaultMode"] == KEY_MODE, invocation.where
    assert source["items"] == [{"key": file_key, "path": file_key}], invocation.where
    assert path == f"{mounts[0]['mountPath']}/{file_key}", invocation.where


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_pod_that_reads_the_key_mounts_it_and_no_other(value_set: str) -> None:
    values = VALUE_SETS[value_set]
    rendered = render(values)
    own = values.get("clusterKey", {})
    secret = own.get("existingSecret") or GENERATED
    file_key = own.get("fileKey", "cluster.key")
    readers = set()
    for invocation in invocations(rendered):
        c = invocation.container
        names = {e["name"] for e in c.get("env", [])}
        assert CLUSTER_KEY_ENV not in names, invocation.where  # never the key itself
        if command_of(invocation) in KEY_COMMANDS:
            assert_mounts_the_key(rendered, invocation, secret, file_key)
            readers.add(command_of(invocation))
        else:
            assert CLUSTER_KEY_FILE_ENV not in names, invocation.where
            mounted = {m["name"] for m in c.get("volumeMounts", [])}
            assert "cluster-key" not in mounted, invocation.where
    expected = {"gateway", "maintain", "autorecovery"}
    if values.get("maintenance", {}).get("spark", {}).get("mode") == "kubernetes":
        expected.add("spark-executor")
    assert readers == expected


def test_the_modules_that_load_the_key_are_the_ones_the_chart_serves() -> None:
    callers = {
        str(path.relative_to(ROOT))
        for package in ("blobstore", "s3api", "bookie")
        for path in (ROOT / package).rglob("*.py")
        if re.search(r"(?<!def )\bload_cluster_key\(", path.read_text())
    }
    assert callers == set(KEY_READERS)
    served = {where for where in KEY_READERS.values() if where not in ("admin", "standalone")}
    assert served == KEY_COMMANDS


def test_an_existing_secret_replaces_the_generated_one() -> None:
    values = {"clusterKey": {"existingSecret": "ops-cluster-key", "fileKey": "key.b64"}}
    rendered = render(values)
    assert ("Secret", GENERATED) not in rendered.names()
    assert not [s for s in rendered.kinds("Secret") if "cluster-key" in s["metadata"]["name"]]
    readers = [i for i in invocations(rendered) if command_of(i) in KEY_COMMANDS]
    assert readers
    for invocation in readers:
        assert_mounts_the_key(rendered, invocation, "ops-cluster-key", "key.b64")
    assert "get secret ops-cluster-key -o jsonpath='{.data.key\\.b64}' | base64 -d" in (
        rendered.notes
    )


def test_notes_tell_how_to_back_the_key_up_and_where_to_manage_users() -> None:
    notes = render().notes
    backup = f"kubectl -n {NAMESPACE} get secret {GENERATED} -o jsonpath='{{.data.cluster\\.key}}'"
    assert f"{backup} | base64 -d > cluster.key" in notes, notes
    assert f"exec deploy/{FULLNAME}-gateway -c gateway -- blobstore admin --zk" in notes


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"clusterKey": {"fileKey": ".."}}, "at '/clusterKey/fileKey'"),
        ({"clusterKey": {"fileKey": "a/b"}}, "at '/clusterKey/fileKey'"),
        ({"clusterKey": {"existingSecret": "Ops_Key"}}, "at '/clusterKey/existingSecret'"),
        ({"clusterKey": {"value": "abc"}}, "'value' not allowed"),
    ],
)
def test_bad_cluster_key_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(values)
    assert message in str(refused.value), str(refused.value)
