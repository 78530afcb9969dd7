"""ZooKeeper digest authentication and ledger TLS on Kubernetes: both off by default; on,
the chart takes an operator's Secret or generates one once (random, kept by upgrades and
by `helm uninstall`), and every pod whose program opens a ZooKeeper session (or reads
and writes ledgers) mounts it read-only and finds it through its variable; no other
container gets it. The chart's ensemble refuses sessions without the credential, its
chroot script authenticates, and its generated certificates carry a real mutual TLS
handshake between a bookie's and a client's contexts."""

from __future__ import annotations

import base64
import contextlib
import datetime
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from kazoo.client import KazooClient

from blobstore.cli.zookeeper_server import free_port, start_zookeeper
from blobstore.runtime.ledger_tls import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    LEDGER_TLS_DIR_ENV,
    ledger_tls_from_env,
)
from blobstore.runtime.zk_auth import (
    DEFAULT_USER,
    DIGEST_FILE_ENV,
    ENFORCE_CONFIG_LINES,
    ZooKeeperDigest,
    parse_digest,
)
from tests.helm.chart import (
    CHART,
    FULLNAME,
    NAMESPACE,
    VALUE_SETS,
    Rendered,
    executor_pod_templates,
    pod_templates,
    render,
    render_in_cluster,
)
from tests.helm.commands import Invocation, blobstore_argv, invocations, spark_submit_parts
from tests.helm.kube_api import FakeKubeApi

ZK_AUTH_SECRET = f"{FULLNAME}-zk-auth"
LEDGER_TLS_SECRET = f"{FULLNAME}-ledger-tls"
SECRET_MODE = 0o400
EXECUTOR_ENV = "spark.executorEnv."
TLS_FILES = [CA_FILE, CERT_FILE, KEY_FILE]
KUBERNETES_VERSION = kubernetes_validate.latest_version()
# What every container runs, by whether it opens a ZooKeeper session and whether it
# reads or writes ledgers (bookies serve them). A new program fails these lists: say
# which it is.
ZK_CLIENTS = {"bookie", "gateway", "autorecovery", "maintain", "spark-executor", "zk_chroot.py"}
LEDGER_PARTIES = {"bookie", "gateway", "autorecovery", "maintain", "spark-executor"}
NEITHER = {"zookeeper_server.py", "zookeeper_probe.py", "node_rack.py"}

ZK_AUTH: dict[str, Any] = {"zookeeper": {"auth": {"enabled": True}}}
LEDGER_TLS: dict[str, Any] = {"ledgerTls": {"enabled": True}}
SPARK_ON_KUBERNETES: dict[str, Any] = {"maintenance": {"spark": {"mode": "kubernetes"}}}
BOTH_ON: dict[str, Any] = {**ZK_AUTH, **LEDGER_TLS, **SPARK_ON_KUBERNETES}
OPERATORS_SECRETS: dict[str, Any] = {
    "zookeeper": {
        "enabled": False,
        "external": {"servers": ["zk-0.zk.infra.svc:2181"]},
        "auth": {"enabled": True, "existingSecret": "ops-zk", "fileKey": "credential"},
    },
    "ledgerTls": {"enabled": True, "existingSecret": "ops-ledger-tls"},
    **SPARK_ON_KUBERNETES,
}
SECURED_SETS: dict[str, dict[str, Any]] = {
    "zk-auth": ZK_AUTH,
    "ledger-tls": LEDGER_TLS,
    "both-spark-kubernetes": BOTH_ON,
    "operators-secrets": OPERATORS_SECRETS,
}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeKubeApi]:
    api = FakeKubeApi(tmp_path / "kube-api", {}).start()
    try:
        yield api
    finally:
        api.stop()


def command_of(invocation: Invocation) -> str:
    """The blobstore command a container runs (`maintain` under spark-submit too), or
    the chart script or launcher."""
    if invocation.program in ("blobstore", "spark-submit"):
        return blobstore_argv(invocation)[0]
    return invocation.program


def env_of(rendered: Rendered, invocation: Invocation) -> dict[str, str]:
    """A container's environment; a Spark executor's also holds what the driver's
    spark-submit passes it (spark.executorEnv.*), as Spark adds it to the pod."""
    env = {e["name"]: e.get("value", "") for e in invocation.container.get("env", [])}
    if invocation.program == "spark-executor":
        for submit in invocations(rendered):
            if submit.program == "spark-submit":
                conf = spark_submit_parts(submit.argv)[1]
                for key, value in conf.items():
                    if key.startswith(EXECUTOR_ENV):
                        env[key.removeprefix(EXECUTOR_ENV)] = value
    return env


def volumes_of(rendered: Rendered, invocation: Invocation) -> dict[str, dict[str, Any]]:
    pods = [pod for workload, pod in pod_templates(rendered) if workload == invocation.workload]
    assert len(pods) == 1, invocation.where
    return {v["name"]: v for v in pods[0]["volumes"]}


def mount_of(
    rendered: Rendered, invocation: Invocation, directory: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(mount, the Secret source of its volume) of the one mount at `directory`."""
    mounts = [
        m for m in invocation.container.get("volumeMounts", []) if m["mountPath"] == directory
    ]
    assert len(mounts) == 1, (invocation.where, directory)
    assert mounts[0]["readOnly"] is True, invocation.where
    source: dict[str, Any] = volumes_of(rendered, invocation)[mounts[0]["name"]]["secret"]
    assert source["defaultMode"] == SECRET_MODE, invocation.where
    return mounts[0], source


def assert_has_the_credential(
    rendered: Rendered, invocation: Invocation, secret: str, file_key: str
) -> None:
    directory, _, name = env_of(rendered, invocation)[DIGEST_FILE_ENV].rpartition("/")
    assert name == file_key, invocation.where
    _, source = mount_of(rendered, invocation, directory)
    assert source["secretName"] == secret, invocation.where
    assert source["items"] == [{"key": file_key, "path": file_key}], invocation.where


def assert_has_the_tls_files(rendered: Rendered, invocation: Invocation, secret: str) -> None:
    _, source = mount_of(rendered, invocation, env_of(rendered, invocation)[LEDGER_TLS_DIR_ENV])
    assert source["secretName"] == secret, invocation.where
    assert source["items"] == [{"key": f, "path": f} for f in TLS_FILES], invocation.where


def credential_users(rendered: Rendered, variable: str, volume: str) -> set[str]:
    """The commands whose containers name `variable`; asserts that no other container
    mounts `volume`."""
    users = set()
    for invocation in invocations(rendered):
        command = command_of(invocation)
        assert command in ZK_CLIENTS | LEDGER_PARTIES | NEITHER, invocation.where
        if variable in env_of(rendered, invocation):
            users.add(command)
        else:
            mounted = {m["name"] for m in invocation.container.get("volumeMounts", [])}
            assert volume not in mounted, invocation.where
    return users


def generated_secret(rendered: Rendered, name: str) -> dict[str, Any]:
    secret = rendered.get("Secret", name)
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    return secret


# ------------------------------------------------------------------ off by default


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_existing_value_sets_have_neither(value_set: str) -> None:
    rendered = render(VALUE_SETS[value_set])
    assert not credential_users(rendered, DIGEST_FILE_ENV, "zk-auth")
    assert not credential_users(rendered, LEDGER_TLS_DIR_ENV, "ledger-tls")
    names = {name for _, name in rendered.names()}
    assert ZK_AUTH_SECRET not in names and LEDGER_TLS_SECRET not in names
    for _, pod in pod_templates(rendered):
        assert not {"zk-auth", "ledger-tls"} & {v["name"] for v in pod["volumes"]}
    if VALUE_SETS[value_set].get("zookeeper", {}).get("enabled", True):
        zoo_cfg = rendered.config_map(f"{FULLNAME}-zookeeper")["zoo.cfg"]
        assert "enforce.auth" not in zoo_cfg


# ------------------------------------------------------------------ ZooKeeper auth


@pytest.mark.parametrize("spark_mode", ["local", "kubernetes"])
def test_every_zookeeper_client_mounts_the_generated_credential(spark_mode: str) -> None:
    values = {**ZK_AUTH, "maintenance": {"spark": {"mode": spark_mode}}}
    rendered = render(values)
    users = credential_users(rendered, DIGEST_FILE_ENV, "zk-auth")
    expected = ZK_CLIENTS if spark_mode == "kubernetes" else ZK_CLIENTS - {"spark-executor"}
    assert users == expected
    for invocation in invocations(rendered):
        if command_of(invocation) in ZK_CLIENTS:
            assert_has_the_credential(rendered, invocation, ZK_AUTH_SECRET, "zk.digest")
    # Only the credential: ledger TLS stays off.
    assert not credential_users(rendered, LEDGER_TLS_DIR_ENV, "ledger-tls")


def test_the_charts_ensemble_refuses_sessions_without_the_credential() -> None:
    zoo_cfg = render(ZK_AUTH).config_map(f"{FULLNAME}-zookeeper")["zoo.cfg"].splitlines()
    for line in ENFORCE_CONFIG_LINES:
        assert zoo_cfg.count(line) == 1, zoo_cfg
    assert all("=" in line for line in zoo_cfg if line), zoo_cfg


def generated_credential(rendered: Rendered) -> str:
    secret = generated_secret(rendered, ZK_AUTH_SECRET)
    assert secret["type"] == "Opaque"
    assert set(secret["stringData"]) == {"zk.digest"}, secret["stringData"]
    text: str = secret["stringData"]["zk.digest"]
    return text


def test_the_chart_generates_a_random_credential_helm_keeps() -> None:
    text = generated_credential(render(ZK_AUTH))
    assert text.endswith("\n") and text.count("\n") == 1, text
    digest = parse_digest(text, "generated")
    assert digest.user == DEFAULT_USER
    assert len(digest.password) >= 32
    assert generated_credential(render(ZK_AUTH)) != text  # random per install


def test_an_upgrade_keeps_the_credential_it_finds_in_the_cluster(api: FakeKubeApi) -> None:
    installed = generated_credential(render_in_cluster(api.kubeconfig(), ZK_AUTH, upgrade=False))
    api.put_secret(NAMESPACE, ZK_AUTH_SECRET, {"zk.digest": installed})
    upgraded = render_in_cluster(api.kubeconfig(), ZK_AUTH, upgrade=True)
    assert generated_credential(upgraded) == installed
    assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{ZK_AUTH_SECRET}" in api.paths


def test_an_upgrade_never_replaces_a_credential_missing_from_its_secret(
    api: FakeKubeApi,
) -> None:
    api.put_secret(NAMESPACE, ZK_AUTH_SECRET, {"other": "x"})
    with pytest.raises(helm.HelmRenderError) as refused:
        render_in_cluster(api.kubeconfig(), ZK_AUTH, upgrade=True)
    assert f"Secret {ZK_AUTH_SECRET} exists without the key zk.digest" in str(refused.value)


def test_the_chroot_script_authenticates_and_closes_its_znodes(tmp_path: Path) -> None:
    """zk_chroot.py, given the chart's generated credential as the pod gets it, creates
    the chroot on a ZooKeeper that refuses unauthenticated sessions, ACL'd to it."""
    credential = tmp_path / "zk.digest"
    credential.write_text(generated_credential(render(ZK_AUTH)))
    digest = parse_digest(credential.read_text(), str(credential))
    server = start_zookeeper(tmp_path / "zk", free_port(), heap_mb=256, enforce_auth=True)
    try:
        done = subprocess.run(
            [sys.executable, str(CHART / "files" / "zk_chroot.py"), "--zk"]
            + [f"{server.connect_string}/tenants/blue", "--timeout-s", "60"],
            env={**os.environ, DIGEST_FILE_ENV: str(credential)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert_owned_by(server.connect_string, digest, ["/tenants", "/tenants/blue"])
    finally:
        server.stop()


def assert_owned_by(connect: str, digest: ZooKeeperDigest, paths: list[str]) -> None:
    client = KazooClient(
        hosts=connect, timeout=15, auth_data=[("digest", digest.credential.decode())]
    )
    client.start(timeout=15)
    try:
        for path in paths:
            acl, _ = client.get_acls(path)
            assert acl == digest.acl(), (path, acl)
    finally:
        client.stop()
        client.close()


# ------------------------------------------------------------------ ledger TLS


@pytest.mark.parametrize("spark_mode", ["local", "kubernetes"])
def test_every_bookie_and_ledger_client_mounts_the_generated_tls_files(spark_mode: str) -> None:
    values = {**LEDGER_TLS, "maintenance": {"spark": {"mode": spark_mode}}}
    rendered = render(values)
    users = credential_users(rendered, LEDGER_TLS_DIR_ENV, "ledger-tls")
    expected = LEDGER_PARTIES if spark_mode == "kubernetes" else LEDGER_PARTIES - {"spark-executor"}
    assert users == expected
    for invocation in invocations(rendered):
        if command_of(invocation) in LEDGER_PARTIES:
            assert_has_the_tls_files(rendered, invocation, LEDGER_TLS_SECRET)
    assert not credential_users(rendered, DIGEST_FILE_ENV, "zk-auth")
    assert "enforce.auth" not in rendered.config_map(f"{FULLNAME}-zookeeper")["zoo.cfg"]


def tls_files(rendered: Rendered) -> dict[str, bytes]:
    secret = generated_secret(rendered, LEDGER_TLS_SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    assert sorted(secret["data"]) == sorted(TLS_FILES)
    return {name: base64.b64decode(value) for name, value in secret["data"].items()}


def write_tls_dir(directory: Path, files: dict[str, bytes]) -> Path:
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


def test_the_generated_ca_signs_a_ten_year_certificate() -> None:
    files = tls_files(render(LEDGER_TLS))
    ca = x509.load_pem_x509_certificate(files[CA_FILE])
    cert = x509.load_pem_x509_certificate(files[CERT_FILE])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    public_key = ca.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    public_key.verify(
        cert.signature,
        cert.tbs_certificate_bytes,
        padding.PKCS1v15(),
        cert.signature_hash_algorithm,
    )
    now = datetime.datetime.now(datetime.UTC)
    for c in (ca, cert):
        assert c.not_valid_after_utc - now > datetime.timedelta(days=3640), c.subject
    assert b"PRIVATE KEY" in files[KEY_FILE]
    assert tls_files(render(LEDGER_TLS))[CA_FILE] != files[CA_FILE]  # new per install


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> bytes:
    """What a client reads from a server over TLS on a socket pair; raises ssl.SSLError
    (or OSError) when either side refuses the other."""
    left, right = socket.socketpair()

    def serve() -> None:
        # A refusal on this side shows on the client's as a reset or a missing answer.
        with contextlib.suppress(ssl.SSLError, OSError):
            with server.wrap_socket(right, server_side=True) as tls:
                tls.sendall(b"entry")

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(left) as tls:
            return tls.recv(5)
    finally:
        thread.join(timeout=30)
        right.close()


def test_the_generated_files_carry_mutual_tls_between_bookie_and_client(
    tmp_path: Path,
) -> None:
    """The files as a pod mounts them, read as the program does: a bookie's context and
    a client's shake hands; a client of another install's CA is refused."""
    own = write_tls_dir(tmp_path / "own", tls_files(render(LEDGER_TLS)))
    other = write_tls_dir(tmp_path / "other", tls_files(render(LEDGER_TLS)))
    bookie = ledger_tls_from_env({LEDGER_TLS_DIR_ENV: str(own)})
    client = ledger_tls_from_env({LEDGER_TLS_DIR_ENV: str(own)})
    stranger = ledger_tls_from_env({LEDGER_TLS_DIR_ENV: str(other)})
    assert bookie is not None and client is not None and stranger is not None
    assert handshake(bookie.server_context(), client.client_context()) == b"entry"
    with pytest.raises((ssl.SSLError, OSError)):
        handshake(bookie.server_context(), stranger.client_context())


def test_an_upgrade_keeps_the_tls_files_it_finds_in_the_cluster(api: FakeKubeApi) -> None:
    installed = tls_files(render_in_cluster(api.kubeconfig(), LEDGER_TLS, upgrade=False))
    api.put_secret(
        NAMESPACE, LEDGER_TLS_SECRET, {name: data.decode() for name, data in installed.items()}
    )
    upgraded = render_in_cluster(api.kubeconfig(), LEDGER_TLS, upgrade=True)
    assert tls_files(upgraded) == installed
    api.put_secret(NAMESPACE, LEDGER_TLS_SECRET, {CA_FILE: installed[CA_FILE].decode()})
    with pytest.raises(helm.HelmRenderError) as refused:
        render_in_cluster(api.kubeconfig(), LEDGER_TLS, upgrade=True)
    assert f"Secret {LEDGER_TLS_SECRET} exists without tls.crt" in str(refused.value)


# ------------------------------------------------------------------ both, and the rest


def test_operators_secrets_replace_the_generated_ones() -> None:
    rendered = render(OPERATORS_SECRETS)
    secrets = {s["metadata"]["name"] for s in rendered.kinds("Secret")}
    assert not {ZK_AUTH_SECRET, LEDGER_TLS_SECRET} & secrets, secrets
    assert credential_users(rendered, DIGEST_FILE_ENV, "zk-auth") == ZK_CLIENTS
    assert credential_users(rendered, LEDGER_TLS_DIR_ENV, "ledger-tls") == LEDGER_PARTIES
    for invocation in invocations(rendered):
        if command_of(invocation) in ZK_CLIENTS:
            assert_has_the_credential(rendered, invocation, "ops-zk", "credential")
        if command_of(invocation) in LEDGER_PARTIES:
            assert_has_the_tls_files(rendered, invocation, "ops-ledger-tls")
    notes = rendered.notes
    assert "get secret ops-zk -o jsonpath='{.data.credential}' | base64 -d > zk.digest" in notes
    assert "enforce.auth.enabled=true and enforce.auth.schemes=digest on your ensemble" in notes
    assert "get secret ops-ledger-tls -o yaml > ledger-tls.yaml" in notes


def test_notes_tell_how_to_back_up_what_is_on() -> None:
    assert "ZooKeeper authentication" not in render().notes
    assert "Ledger TLS" not in render().notes
    notes = render(BOTH_ON).notes
    backup = f"get secret {ZK_AUTH_SECRET} -o jsonpath='{{.data.zk\\.digest}}' | base64 -d"
    assert f"{backup} > zk.digest" in notes, notes
    assert "The chart's ensemble refuses sessions that do not authenticate." in notes
    assert f"get secret {LEDGER_TLS_SECRET} -o yaml > ledger-tls.yaml" in notes


@pytest.mark.parametrize("value_set", sorted(SECURED_SETS))
def test_every_object_is_valid_kubernetes(value_set: str) -> None:
    rendered = render(SECURED_SETS[value_set])
    for o in rendered.objects:
        kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)
    for pod in executor_pod_templates(rendered):
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_the_chart_lints_clean() -> None:
    for values in SECURED_SETS.values():
        report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems and not report["errors"], report


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"zookeeper": {"auth": {"fileKey": ".."}}}, "at '/zookeeper/auth/fileKey'"),
        (
            {"zookeeper": {"auth": {"existingSecret": "Ops_Zk"}}},
            "at '/zookeeper/auth/existingSecret'",
        ),
        ({"zookeeper": {"auth": {"password": "x"}}}, "'password' not allowed"),
        ({"ledgerTls": {"enabled": "yes"}}, "at '/ledgerTls/enabled'"),
        ({"ledgerTls": {"caKey": "x"}}, "'caKey' not allowed"),
    ],
)
def test_bad_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(values)
    assert message in str(refused.value), str(refused.value)
