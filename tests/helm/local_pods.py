"""Pods of the rendered chart run as local processes: each container's command, arguments
and environment as the kubelet would start them, on this machine.

What stands in for Kubernetes:
- Addresses: every pod is 127.0.0.1, and the DNS names of the chart's pods resolve to
  it. Each pod's container ports are free local ports, rewritten where a program is told
  its port (`--port 3181`, `clientPort=2181`, `spark.driver.port=7078`) and in the
  `host:port` addresses other pods use (connect strings, ZooKeeper's server lines).
  Wildcard binds (0.0.0.0) become 127.0.0.1. After the rewriting no cluster DNS name may
  remain: a pod refers only to what the chart deploys.
- Volumes: directories. One per pod and claim for PVCs (kept across restarts, as a
  StatefulSet's are), emptyDirs, and ConfigMaps and Secrets written out from the
  rendered objects (Secrets a user brings are given by the test). /tmp is $TMPDIR.
- The image: its ENV and ENTRYPOINT are read from the Dockerfile, its paths (/opt/venv,
  the installed packages) are this checkout's (tests/helm/image.py).
- The kubelet: HOSTNAME, the downward API (metadata.name, status.podIP, spec.nodeName),
  `$(VAR)` expansion, the service account's token and CA, KUBERNETES_SERVICE_HOST/PORT.
  Init containers run to completion, in order, before the main container starts.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blobstore.cli.zookeeper_server import free_port
from tests.cluster.processes import ManagedProcess, ProcessReaper
from tests.helm.chart import NAMESPACE, Rendered
from tests.helm.image import IMAGE_PATHS, runtime
from tests.helm.kube_api import FakeKubeApi
from tests.waiting import wait_until

CLUSTER_DOMAIN = "cluster.local"
POD_IP = "127.0.0.1"
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# Where a program is told one of its own ports.
PORT_FLAGS = ("--port", "--http-port", "--metrics-port")
PORT_SETTINGS = re.compile(
    r"(clientPort=|spark\.driver\.port=|spark\.driver\.blockManager\.port=)(\d+)"
)
INIT_TIMEOUT_S = 120.0
# Variables of this test process a container must not inherit.
NOT_INHERITED = ("BLOBSTORE_", "SPARK_", "PYSPARK_", "PROMETHEUS_", "JAVA_TOOL_OPTIONS")


@dataclass
class PodProcess(ManagedProcess):
    """A container's main process: exactly the container's environment (not this test
    process's) and its working directory."""

    cwd: Path | None = None

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, self.name
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"\n=== start {' '.join(self.command)}\n".encode())
            log_file.flush()
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
                cwd=self.cwd,
            )


@dataclass
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class PodPlan:
    """A pod to be: its name, DNS name, spec and local ports (container port -> local)."""

    name: str
    dns: str
    spec: dict[str, Any]
    volume_claims: list[str]
    ports: dict[int, int]
    node: Node


class LocalCluster:
    """The rendered chart's pods on this machine (see the module docstring)."""

    def __init__(
        self,
        rendered: Rendered,
        root: Path,
        reaper: ProcessReaper,
        *,
        nodes: Sequence[Node],
        api: FakeKubeApi | None = None,
        secrets: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.rendered = rendered
        self.root = root
        self.reaper = reaper
        self.nodes = list(nodes)
        self.api = api
        self.secrets = {name: dict(data) for name, data in (secrets or {}).items()}
        self.plans: dict[str, PodPlan] = {}
        self.endpoints: dict[str, str] = {}
        self.hosts: dict[str, str] = {}

    # ------------------------------------------------------------------ planning

    def plan_workloads(self) -> None:
        """Give every pod of every StatefulSet and Deployment its name and ports (all are
        planned before any starts: each refers to the others' addresses); and the
        CronJobs' pods."""
        for o in self.rendered.objects:
            kind, name = o["kind"], o["metadata"]["name"]
            if kind == "StatefulSet":
                claims = [c["metadata"]["name"] for c in o["spec"].get("volumeClaimTemplates", [])]
                for ordinal in range(o["spec"]["replicas"]):
                    pod = f"{name}-{ordinal}"
                    dns = f"{pod}.{o['spec']['serviceName']}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"
                    self._plan(pod, dns, o["spec"]["template"]["spec"], claims, ordinal)
            elif kind == "Deployment":
                for index in range(o["spec"].get("replicas", 1)):
                    pod = f"{name}-{index}"
                    self._plan(pod, pod, o["spec"]["template"]["spec"], [], index)
            elif kind == "CronJob":
                spec = o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
                self._plan(f"{name}-run", f"{name}-run", spec, [], 0)

    def _plan(
        self, pod: str, dns: str, spec: dict[str, Any], claims: list[str], ordinal: int
    ) -> None:
        """Pod `ordinal` of a workload runs on node `ordinal` (round robin)."""
        ports = {
            p["containerPort"]: free_port() for c in spec["containers"] for p in c.get("ports", [])
        }
        node = self.nodes[ordinal % len(self.nodes)]
        self.plans[pod] = PodPlan(pod, dns, spec, claims, ports, node)
        self.hosts[dns] = POD_IP
        for port, local in ports.items():
            self.endpoints[f"{dns}:{port}"] = f"{POD_IP}:{local}"
            for other, other_local in ports.items():
                if other != port:  # ZooKeeper's server lines: host:quorum:election
                    self.endpoints[f"{dns}:{port}:{other}"] = f"{POD_IP}:{local}:{other_local}"

    def rendered_again(self, rendered: Rendered) -> LocalCluster:
        """The same running pods with another rendering's workloads to start: pods planned
        here keep their names and ports, new ones are planned."""
        other = LocalCluster(
            rendered, self.root, self.reaper, nodes=self.nodes, api=self.api, secrets=self.secrets
        )
        other.endpoints, other.hosts = dict(self.endpoints), dict(self.hosts)
        other.plan_workloads()
        for name, plan in self.plans.items():
            if name in other.plans and set(other.plans[name].ports) == set(plan.ports):
                other.plans[name].ports = plan.ports
        other.endpoints.update(self.endpoints)
        return other

    def pod(self, name: str, rewrite: Mapping[str, str] | None = None) -> LocalPod:
        plan = self.plans[name]
        return LocalPod(self, plan, self.root / name, dict(rewrite or {}))

    def pods_of(self, workload: str) -> list[LocalPod]:
        """The pods of a StatefulSet or Deployment (`<workload>-<n>`), or a CronJob's run."""
        return [
            self.pod(name)
            for name in self.plans
            if name.startswith(f"{workload}-")
            and (name[len(workload) + 1 :].isdigit() or name.endswith("-run"))
        ]


@dataclass
class Container:
    """A container made local: its command, environment and working directory."""

    name: str
    command: list[str]
    env: dict[str, str]
    cwd: Path
    spec: dict[str, Any]


class LocalPod:
    """One pod: volumes as directories, init containers, the main container's process
    and its probes."""

    def __init__(
        self, cluster: LocalCluster, plan: PodPlan, root: Path, rewrite: dict[str, str]
    ) -> None:
        self.cluster = cluster
        self.plan = plan
        self.root = root
        # Exact replacements of words of the manifest, before anything else (the one
        # thing no local process stands in for: Kubernetes' API as Spark's master).
        self.rewrite = rewrite
        self.process: PodProcess | None = None
        self.mounts = self._volumes()

    @property
    def name(self) -> str:
        return self.plan.name

    def port(self, name: str, container: str | None = None) -> int:
        """The local port of a named container port."""
        for c in self.plan.spec["containers"]:
            if container in (None, c["name"]):
                for p in c.get("ports", []):
                    if p["name"] == name:
                        return self.plan.ports[p["containerPort"]]
        raise KeyError(name)

    # ------------------------------------------------------------------ volumes

    def _volumes(self) -> dict[str, Path]:
        """mountPath -> local directory, for every mount of every container."""
        volumes = {v["name"]: v for v in self.plan.spec.get("volumes", [])}
        directories: dict[str, Path] = {}
        for claim in self.plan.volume_claims:
            directories[claim] = self.root / f"pvc-{claim}"
        mounts: dict[str, Path] = {}
        for c in self.plan.spec.get("initContainers", []) + self.plan.spec["containers"]:
            for mount in c.get("volumeMounts", []):
                name = mount["name"]
                if name not in directories:
                    assert name in volumes, f"{self.name}: mount of undeclared volume {name}"
                    directories[name] = self.root / f"volume-{name}"
                path = mount["mountPath"]
                assert mounts.get(path, directories[name]) == directories[name], path
                mounts[path] = directories[name]
        if self.plan.spec.get("automountServiceAccountToken"):
            mounts[SERVICE_ACCOUNT_PATH] = self.root / "serviceaccount"
        return mounts

    def write_volumes(self) -> None:
        """Create the directories; write ConfigMaps, Secrets and the service account's
        files (localized as every other text of the pod). PVCs keep their contents."""
        volumes = {v["name"]: v for v in self.plan.spec.get("volumes", [])}
        for path, directory in self.mounts.items():
            directory.mkdir(parents=True, exist_ok=True)
            volume = volumes.get(directory.name.removeprefix("volume-"), {})
            if "configMap" in volume:
                data = self.cluster.rendered.config_map(volume["configMap"]["name"])
                self._write_files(directory, data, volume["configMap"])
            elif "secret" in volume:
                self._write_files(
                    directory, self._secret(volume["secret"]["secretName"]), volume["secret"]
                )
            elif path == SERVICE_ACCOUNT_PATH:
                api = self.cluster.api
                assert api is not None, (
                    f"{self.name} mounts a service account: give the cluster an API"
                )
                (directory / "token").write_text(api.token)
                shutil.copyfile(api.cert, directory / "ca.crt")

    def _secret(self, name: str) -> dict[str, str]:
        if name in self.cluster.secrets:
            return self.cluster.secrets[name]
        secret = self.cluster.rendered.get("Secret", name)
        return dict(secret.get("stringData", {}))

    def _write_files(
        self, directory: Path, data: Mapping[str, str], source: Mapping[str, Any]
    ) -> None:
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        mode = source.get("defaultMode", 0o644)
        for item in items:
            target = directory / item["path"]
            target.write_text(self.localize(data[item["key"]]))
            target.chmod(mode | 0o600)  # the test's user owns it, as fsGroup would let it read

    # ------------------------------------------------------------------ localizing

    def localize(self, text: str) -> str:
        """A text of the pod with cluster addresses, ports and paths made local."""
        for old in sorted(self.cluster.endpoints, key=len, reverse=True):
            text = text.replace(old, self.cluster.endpoints[old])
        for old in sorted(self.cluster.hosts, key=len, reverse=True):
            text = text.replace(old, self.cluster.hosts[old])
        text = re.sub(r"(?<![\w.])0\.0\.0\.0(?![\w.])", POD_IP, text)
        text = PORT_SETTINGS.sub(lambda m: m.group(1) + str(self._local_port(m.group(2))), text)
        paths = {
            **{p: str(d) for p, d in self.mounts.items()},
            **{p: str(d) for p, d in IMAGE_PATHS.items()},
        }
        # One pass (a local directory may itself be under /tmp), longest path first; a
        # whole path or a prefix of one, never the middle of a word ("/var/tmp").
        choices = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w./-])({choices})(?![\w.-])")
        text = pattern.sub(lambda m: paths[m.group(1)], text)
        assert ".svc" not in text and CLUSTER_DOMAIN not in text, (
            f"{self.name}: unknown address in {text!r}"
        )
        return text

    def _local_port(self, port: str) -> int:
        assert int(port) in self.plan.ports, f"{self.name}: port {port} is not a container port"
        return self.plan.ports[int(port)]

    def _words(self, words: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """A command line: rewritten, $(VAR) expanded, localized, ports made local."""
        result = [self.localize(expand(self.rewrite.get(w, w), env)) for w in words]
        for index, word in enumerate(result[:-1]):
            if word in PORT_FLAGS:
                result[index + 1] = str(self._local_port(result[index + 1]))
        return result

    def container(self, spec: dict[str, Any]) -> Container:
        image = runtime()
        env = self._base_env()
        for name, value in image.env.items():
            env[name] = self.localize(value.replace("$PATH", env["PATH"]))
        declared: dict[str, str] = {}
        for variable in spec.get("env", []):
            declared[variable["name"]] = self._env_value(variable, declared)
        env.update({k: self.localize(v) for k, v in declared.items()})
        command = self._words(
            [*(spec.get("command") or image.entrypoint), *spec.get("args", [])], declared
        )
        cwd = (
            Path(self.localize(spec["workingDir"])) if "workingDir" in spec else self.root / "home"
        )
        cwd.mkdir(parents=True, exist_ok=True)
        return Container(spec["name"], command, env, cwd, spec)

    def _base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}
        env["HOSTNAME"] = self.name
        if "/tmp" in self.mounts:
            env["TMPDIR"] = str(self.mounts["/tmp"])
        if self.cluster.api is not None:
            env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
            env["KUBERNETES_SERVICE_PORT"] = str(self.cluster.api.port)
        return env

    def _env_value(self, variable: Mapping[str, Any], declared: Mapping[str, str]) -> str:
        if "value" in variable:
            return expand(str(variable["value"]), declared)
        field_path = variable["valueFrom"]["fieldRef"]["fieldPath"]
        return {
            "metadata.name": self.name,
            "status.podIP": POD_IP,
            "spec.nodeName": self.plan.node.name,
        }[field_path]

    # ------------------------------------------------------------------ running

    def run_init_containers(self) -> None:
        for spec in self.plan.spec.get("initContainers", []):
            c = self.container(spec)
            done = subprocess.run(
                c.command, env=c.env, cwd=c.cwd, stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=INIT_TIMEOUT_S,
            )  # fmt: skip
            assert done.returncode == 0, f"{self.name} init {c.name}: {done.stdout}{done.stderr}"

    def main_container(self) -> Container:
        specs = self.plan.spec["containers"]
        assert len(specs) == 1, [c["name"] for c in specs]
        return self.container(specs[0])

    def start(self) -> LocalPod:
        """Write the volumes, run the init containers, start the main container."""
        self.write_volumes()
        self.run_init_containers()
        c = self.main_container()
        self.process = PodProcess(
            self.name, c.command, self.root / "container.log", env=c.env, cwd=c.cwd
        )
        self.cluster.reaper.add(self.process)
        self.process.start()
        return self

    def run_to_completion(self, timeout_s: float) -> subprocess.CompletedProcess[str]:
        """A Job's pod: volumes, init containers, then the main container to its end."""
        self.write_volumes()
        self.run_init_containers()
        c = self.main_container()
        return subprocess.run(
            c.command, env=c.env, cwd=c.cwd, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip

    def exec(self, words: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        """`kubectl exec POD -- WORDS`: a command beside the main container's process, with
        its environment and volumes."""
        c = self.main_container()
        return subprocess.run(
            self._words(words, {}), env=c.env, cwd=c.cwd, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip

    def stop(self) -> int | None:
        assert self.process is not None
        return self.process.stop()

    def log(self) -> str:
        return self.process.log_tail(60) if self.process else ""

    # ------------------------------------------------------------------ probes

    def probe(self, kind: str) -> bool:
        """Whether the main container's probe of this kind (livenessProbe, ...) passes."""
        spec = self.plan.spec["containers"][0]
        probe = spec[kind]
        if "httpGet" in probe:
            return http_probe(probe["httpGet"], self.port(probe["httpGet"]["port"]))
        c = self.container(spec)
        command = self._words(probe["exec"]["command"], {})
        done = subprocess.run(command, env=c.env, capture_output=True, timeout=30)
        return done.returncode == 0

    def wait_probe(self, kind: str, timeout_s: float) -> None:
        assert self.process is not None
        process = self.process

        def passed() -> bool:
            assert process.alive(), f"{self.name} exited:\n{self.log()}"
            return self.probe(kind)

        wait_until(
            passed, timeout_s, message=lambda: f"{self.name} {kind}:\n{self.log()}", interval_s=0.2
        )


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined variables are replaced, $$ escapes, others
    stay as written."""
    return re.sub(
        r"\$\$|\$\((\w+)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


def http_probe(get: Mapping[str, Any], port: int) -> bool:
    """A kubelet httpGet probe: any status from 200 to 399 passes; certificates are not
    verified."""
    scheme = get.get("scheme", "HTTP").lower()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = f"{scheme}://{POD_IP}:{port}{get['path']}"
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return 200 <= int(response.status) < 400
    except (urllib.error.URLError, OSError):
        return False
