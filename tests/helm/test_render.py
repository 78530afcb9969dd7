"""The chart renders with its defaults and with each custom value set, every object is
valid against the schemas of a current Kubernetes release, and the schema and the
chart's own checks refuse bad values with a message naming the value."""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.helm.chart import (
    CHART,
    FULLNAME,
    NAMESPACE,
    VALUE_SETS,
    Rendered,
    containers,
    executor_pod_templates,
    pod_templates,
    render,
)

KUBERNETES_VERSION = kubernetes_validate.latest_version()
# The Prometheus Operator's ServiceMonitor is a custom resource Kubernetes' schemas do
# not hold: the fields the chart sets, as monitoring.coreos.com/v1 defines them.
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": {"type": "object"}},
                    "additionalProperties": False,
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "tlsConfig": {
                                "type": "object",
                                "properties": {"insecureSkipVerify": {"type": "boolean"}},
                                "additionalProperties": False,
                            },
                        },
                    },
                },
            },
        },
    },
}


def validate(o: dict[str, Any]) -> None:
    if o["kind"] == "ServiceMonitor":
        jsonschema.validate(o, SERVICE_MONITOR_SCHEMA)
    else:
        kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_object_is_valid_kubernetes(value_set: str) -> None:
    rendered = render(VALUE_SETS[value_set])
    assert rendered.objects
    for o in rendered.objects:
        validate(o)
        assert o["metadata"]["name"].startswith(FULLNAME), o["metadata"]["name"]
    for pod in executor_pod_templates(rendered):
        validate(pod)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_container_has_resources_and_a_memory_limit(value_set: str) -> None:
    rendered = render(VALUE_SETS[value_set])
    for workload, pod in pod_templates(rendered):
        if workload == "spark-executor":
            continue  # Spark sets the executors' resources (spark.executor.*)
        for c in containers(pod):
            assert c["resources"]["requests"], (workload, c["name"])
            assert c["resources"]["limits"]["memory"], (workload, c["name"])


def test_the_chart_lints_clean() -> None:
    for values in VALUE_SETS.values():
        report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems and not report["errors"], report


def replicas_and_claims(rendered: Rendered, name: str) -> tuple[int, list[str]]:
    spec = rendered.get("StatefulSet", name)["spec"]
    return spec["replicas"], [c["metadata"]["name"] for c in spec["volumeClaimTemplates"]]


def test_the_defaults_deploy_every_component() -> None:
    r = render()
    assert replicas_and_claims(r, f"{FULLNAME}-zookeeper") == (3, ["data"])
    assert replicas_and_claims(r, f"{FULLNAME}-bookie") == (4, ["journal", "ledgers"])
    assert r.get("PodDisruptionBudget", f"{FULLNAME}-zookeeper")["spec"]["maxUnavailable"] == 1
    assert r.get("PodDisruptionBudget", f"{FULLNAME}-bookie")["spec"]["maxUnavailable"] == 1
    bookie = r.get("StatefulSet", f"{FULLNAME}-bookie")["spec"]["template"]["spec"]
    anti = bookie["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert bookie["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    main = bookie["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert main[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    hpa = r.get("HorizontalPodAutoscaler", f"{FULLNAME}-gateway")["spec"]
    assert hpa["scaleTargetRef"]["name"] == f"{FULLNAME}-gateway"
    assert "replicas" not in r.get("Deployment", f"{FULLNAME}-gateway")["spec"]
    assert r.get("Service", f"{FULLNAME}-gateway")["spec"]["ports"][0]["targetPort"] == "s3"
    assert r.get("Deployment", f"{FULLNAME}-autorecovery")
    cron = r.get("CronJob", f"{FULLNAME}-maintenance")["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"
    job = cron["jobTemplate"]["spec"]["template"]["spec"]
    assert job["containers"][0]["args"][:2] == ["maintain", "--zk"]
    assert ("Ingress", f"{FULLNAME}-gateway") not in r.names()
    assert not r.kinds("ServiceMonitor")
    assert r.get("Secret", f"{FULLNAME}-users")["stringData"]["access-key"]


def test_an_existing_ensemble_replaces_the_charts_own() -> None:
    r = render(VALUE_SETS["existing-zookeeper"])
    assert ("StatefulSet", f"{FULLNAME}-zookeeper") not in r.names()
    assert not [o for o in r.objects if "zookeeper" in o["metadata"]["name"]]
    connect = "zk-0.zk.infra.svc:2181,zk-1.zk.infra.svc:2181/tenants/blue"
    for workload, pod in pod_templates(r):
        for c in containers(pod):
            args = c.get("args", [])
            if "--zk" in args:
                assert args[args.index("--zk") + 1] == connect, (workload, c["name"])
    assert not r.kinds("ClusterRole")  # no rack label, no node lookup


def test_tls_and_ingress() -> None:
    r = render(VALUE_SETS["tls-ingress"])
    ingress = r.get("Ingress", f"{FULLNAME}-gateway")["spec"]
    assert ingress["tls"][0]["secretName"] == "s3-ingress-tls"
    assert [rule["host"] for rule in ingress["rules"]] == ["s3.example.com", "*.s3.example.com"]
    pod = r.get("Deployment", f"{FULLNAME}-gateway")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--tls-cert") + 1] == "/etc/blobstore/tls/tls.crt"
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"s3-tls", "s3-users", "s3-cluster-key"}
    assert ("Secret", f"{FULLNAME}-users") not in r.names()  # the user's Secret instead
    assert "s3-users" in r.notes


def test_spark_on_kubernetes_has_its_service_account_and_rbac() -> None:
    r = render(VALUE_SETS["spark-kubernetes"])
    name = f"{FULLNAME}-maintenance"
    verbs = {
        resource: set(rule["verbs"])
        for rule in r.get("Role", name)["rules"]
        for resource in rule["resources"]
    }
    for resource in ("pods", "services", "configmaps"):
        assert {"create", "get", "list", "delete"} <= verbs[resource], resource
    assert r.get("RoleBinding", name)["subjects"][0]["name"] == name
    pod = r.get("CronJob", name)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    container = pod["containers"][0]
    assert container["command"] == ["spark-submit"]
    conf = spark_conf(container["args"])
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    assert conf["spark.kubernetes.container.image"] == "registry.example.com/blobstore:0.1.0"
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.executorEnv.BLOBSTORE_LEDGER_BOOKIE_REQUEST_TIMEOUT_S"] == "20"
    assert executor_pod_templates(r)[0]["spec"]["containers"][0]["name"] == "spark-executor"


def spark_conf(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")


def test_service_monitors_scrape_every_metrics_port() -> None:
    r = render(VALUE_SETS["service-monitor"])
    monitors = {m["metadata"]["name"]: m for m in r.kinds("ServiceMonitor")}
    assert set(monitors) == {f"{FULLNAME}-{c}" for c in ("gateway", "bookie", "autorecovery")}
    for name, monitor in monitors.items():
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        service = r.get("Service", name)
        assert (
            service["metadata"]["labels"] | monitor["spec"]["selector"]["matchLabels"]
            == (service["metadata"]["labels"])
        )
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports, name


def test_large_integers_render_without_an_exponent() -> None:
    r = render({"maintenance": {"compactMaxBytes": 68719476736}})
    args = r.get("CronJob", f"{FULLNAME}-maintenance")["spec"]["jobTemplate"]["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    assert args[args.index("--compact-max") + 1] == "68719476736"


def test_notes_print_the_endpoint_and_how_to_read_the_credentials() -> None:
    notes = render().notes
    assert f"http://{FULLNAME}-gateway.{NAMESPACE}.svc.cluster.local:9000" in notes
    assert f"kubectl -n {NAMESPACE} get secret {FULLNAME}-users" in notes
    assert "{.data.access-key}" in notes and "{.data.secret-key}" in notes
    tls_notes = render(VALUE_SETS["tls-ingress"]).notes
    assert "https://s3.example.com" in tls_notes


# (values, what the message must say): each refused before anything is deployed.
BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"bookies": {"replicas": 0}}, "at '/bookies/replicas': minimum: got 0, want 1"),
    ({"bookies": {"settings": {"journal_max_wait_ms": 1}}}, "'journal_max_wait_ms' not allowed"),
    ({"bookies": {"settings": {"gc_interval_s": "often"}}}, "at '/bookies/settings/gc_interval_s'"),
    ({"zookeeper": {"replicas": 2}}, "at '/zookeeper/replicas': value must be one of 1, 3, 5"),
    ({"gateway": {"server": {"acls": "public"}}}, "at '/gateway/server/acls'"),
    ({"maintenance": {"spark": {"mode": "yarn"}}}, "at '/maintenance/spark/mode'"),
    ({"maintenance": {"phases": ["gc", "tier"]}}, "at '/maintenance/phases/1'"),
    ({"objects": {"ensemble_sise": 3}}, "'ensemble_sise' not allowed"),
    # null removes a default in Helm: a container without a memory limit.
    (
        {"gateway": {"resources": {"limits": {"memory": None}}}},
        "at '/gateway/resources/limits': missing property 'memory'",
    ),
    ({"imagePullPolicy": "Always"}, "'imagePullPolicy' not allowed"),
    ({"zookeeper": {"enabled": False}}, "zookeeper.external.servers: name the servers"),
    ({"bookies": {"replicas": 2}}, "bookies.replicas=2: fewer bookies than an ensemble"),
    (
        {"bookies": {"replicas": 4}, "objects": {"ensemble_size": 5}},
        "bookies.replicas=4: fewer bookies than an ensemble (objects.ensemble_size=5)",
    ),
    ({"gateway": {"tls": {"enabled": True}}}, "gateway.tls.secretName: name a Secret"),
    ({"objects": {"audit_interval_s": 0}}, "objects.audit_interval_s=0 would stop autorecovery"),
    (
        {"gateway": {"autoscaling": {"minReplicas": 5, "maxReplicas": 3}}},
        "gateway.autoscaling.minReplicas=5 is above maxReplicas=3",
    ),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES)
def test_bad_values_are_refused_with_a_clear_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as refused:
        render(values)
    assert message in str(refused.value), str(refused.value)


def test_values_yaml_documents_every_field() -> None:
    """Every key of values.yaml has a comment right above it, except the fields of
    Kubernetes' own shapes (resources, security contexts)."""
    generic = {"resources", "podSecurityContext", "securityContext"}
    lines = (CHART / "values.yaml").read_text().splitlines()
    parents: list[tuple[int, str]] = []
    undocumented = []
    for index, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z0-9_.-]+):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = [k for _, k in parents]
        parents.append((indent, key))
        if not generic & set(path) and not lines[index - 1].strip().startswith("#"):
            undocumented.append(".".join([*path, key]))
    assert not undocumented
