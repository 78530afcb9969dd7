"""The Helm chart (helm/blobstore) rendered offline with Helm's own engine (the
helm-python-sdk package: Helm 4 as a library, no binary, no cluster), and the value sets
the tests render it with.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "blobstore"
RELEASE = "bs"
NAMESPACE = "store"
FULLNAME = f"{RELEASE}-blobstore"

# Value sets: the defaults, and one per feature the defaults leave off.
EXISTING_ZOOKEEPER: dict[str, Any] = {
    "zookeeper": {
        "enabled": False,
        "chroot": "/tenants/blue",
        "external": {"servers": ["zk-0.zk.infra.svc:2181", "zk-1.zk.infra.svc:2181"]},
        "requestBytesMax": 1048576,
    },
    "bookies": {"rack": {"nodeLabel": ""}, "hostAntiAffinity": "soft"},
}
TLS_INGRESS: dict[str, Any] = {
    "gateway": {
        "tls": {"enabled": True, "secretName": "s3-tls"},
        "domain": "s3.example.com",
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "hosts": ["s3.example.com", "*.s3.example.com"],
            "tlsSecretName": "s3-ingress-tls",
        },
        "users": {"existingSecret": "s3-users", "usersFileKey": "users.json"},
        "workers": 4,
        "server": {"limit_concurrency": 2048, "acls": "ignore", "body_idle_timeout_s": 30.5},
    },
    "objects": {"entry_size_bytes": 524288, "ledger_age_s_max": 300},
    "catalog": {"page_read_cache_pages": 1024},
    "clusterKey": {"existingSecret": "s3-cluster-key", "fileKey": "key.b64"},
}
SPARK_KUBERNETES: dict[str, Any] = {
    "maintenance": {
        "spark": {"mode": "kubernetes", "kubernetes": {"executorInstances": 3}},
        "graceSeconds": 600,
        "phases": ["gc", "compact"],
        "json": True,
        "bookieGc": False,
    },
    "ledger": {"bookie_request_timeout_s": 20, "pending_add_bytes_max": 268435456},
    "image": {"repository": "registry.example.com/blobstore", "pullSecrets": ["regcred"]},
}
SERVICE_MONITOR: dict[str, Any] = {
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "bookies": {
        "settings": {"journal_max_group_wait_ms": 1, "disk_usage_threshold": 0.9},
        "rack": {"nodeLabel": "topology.kubernetes.io/rack"},
        "rackSpread": "hard",
    },
    "autorecovery": {"lostBookieDelayS": 3600, "recoveryRateMBs": 100},
}
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "existing-zookeeper": EXISTING_ZOOKEEPER,
    "tls-ingress": TLS_INGRESS,
    "spark-kubernetes": SPARK_KUBERNETES,
    "service-monitor": SERVICE_MONITOR,
}


@dataclass(frozen=True)
class Rendered:
    """The objects of one rendering, and its NOTES.txt."""

    objects: list[dict[str, Any]]
    notes: str

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        assert len(found) == 1, (
            kind,
            name,
            [(o["kind"], o["metadata"]["name"]) for o in self.objects],
        )
        return found[0]

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def names(self) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in self.objects}

    def config_map(self, name: str) -> dict[str, str]:
        data: dict[str, str] = self.get("ConfigMap", name)["data"]
        return data


def render(values: Mapping[str, Any] | None = None) -> Rendered:
    """The chart rendered as an install of release `bs` in namespace `store`; raises
    helm's HelmValuesError (schema) or HelmRenderError (a template's `fail`)."""
    with helm.Chart.load(CHART) as chart:
        files = chart.render(dict(values or {}), name=RELEASE, namespace=NAMESPACE, is_install=True)
    return parsed(files)


def parsed(files: Mapping[str, str]) -> Rendered:
    """A rendering's objects and notes from its files."""
    objects: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return Rendered(objects, notes)


def pod_templates(rendered: Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every workload, and the Spark executor pod template
    the maintenance job's ConfigMap carries."""
    for o in rendered.objects:
        kind = o["kind"]
        if kind in ("StatefulSet", "Deployment"):
            yield o["metadata"]["name"], o["spec"]["template"]["spec"]
        elif kind == "CronJob":
            yield o["metadata"]["name"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    for pod in executor_pod_templates(rendered):
        yield "spark-executor", pod["spec"]


def executor_pod_templates(rendered: Rendered) -> list[dict[str, Any]]:
    return [
        yaml.safe_load(o["data"]["executor-pod.yaml"])
        for o in rendered.kinds("ConfigMap")
        if "executor-pod.yaml" in o.get("data", {})
    ]


def containers(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def render_in_cluster(
    kubeconfig: str, values: Mapping[str, Any] | None = None, *, upgrade: bool
) -> Rendered:
    """The chart rendered as an install or upgrade of release `bs` against the cluster
    `kubeconfig` names: `lookup` reads that cluster's objects."""
    with (
        helm.Config(kubeconfig_content=kubeconfig, namespace=NAMESPACE) as config,
        helm.Chart.load(CHART) as chart,
    ):
        files = config.render(
            chart,
            dict(values or {}),
            name=RELEASE,
            namespace=NAMESPACE,
            is_install=not upgrade,
            is_upgrade=upgrade,
        )
    return parsed(files)
