"""The chart agrees with the program: every command, flag, environment variable, port and
probe path in the rendered manifests is one the program (or Spark, for its own settings)
has, for every value set."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import zipfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from blobstore.catalog.config import CatalogConfig
from blobstore.cli import zookeeper_server
from blobstore.cli.main import build_parser
from blobstore.ledger.config import ENV_PREFIX as LEDGER_ENV_PREFIX
from blobstore.ledger.config import LedgerConfig
from blobstore.objects.config import ObjectStoreConfig
from bookie import config as bookie_config
from tests.helm.chart import (
    CHART,
    FULLNAME,
    ROOT,
    VALUE_SETS,
    Rendered,
    containers,
    pod_templates,
    render,
)
from tests.helm.commands import (
    Invocation,
    blobstore_argv,
    help_text,
    invocations,
    script,
    spark_submit_parts,
)
from tests.helm.image import IMAGE_PATHS, SITE_PACKAGES

PRODUCT = ("bookie", "blobstore", "s3api")
SPARK_JARS = ROOT / ".venv" / "lib" / "python3.11" / "site-packages" / "pyspark" / "jars"
PORT_FLAGS = ("--port", "--http-port", "--metrics-port")


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return render(VALUE_SETS[request.param])


@cache
def product_variables() -> frozenset[str]:
    """Every BLOBSTORE_* variable the program reads: those its code names, and those its
    configuration records derive from their fields."""
    named = {
        match
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        for match in re.findall(r"BLOBSTORE_[A-Z0-9_]*[A-Z0-9]", path.read_text())
    }
    fields = dataclasses.fields
    derived = {bookie_config.env_name(f.name) for f in fields(bookie_config.BookieConfig)}
    derived |= {f"BLOBSTORE_{f.name.upper()}" for f in fields(ObjectStoreConfig)}
    derived |= {f"BLOBSTORE_CATALOG_{f.name.upper()}" for f in fields(CatalogConfig)}
    derived |= {f"{LEDGER_ENV_PREFIX}{f.name.upper()}" for f in fields(LedgerConfig)}
    return frozenset(named | derived)


@cache
def jar_text(*jars: str) -> bytes:
    """The class files of some of PySpark's jars, concatenated (their string constants
    name Spark's settings, variables and flags)."""
    chunks: list[bytes] = []
    for jar in jars:
        with zipfile.ZipFile(next(SPARK_JARS.glob(f"{jar}_2.12-*.jar"))) as archive:
            chunks.extend(
                archive.read(i) for i in archive.infolist() if i.filename.endswith(".class")
            )
    return b"\n".join(chunks)


def blobstore_invocations(rendered: Rendered) -> Iterator[tuple[Invocation, list[str]]]:
    for invocation in invocations(rendered):
        if invocation.program in ("blobstore", "spark-submit"):
            yield invocation, blobstore_argv(invocation)


def test_every_blobstore_command_line_parses_and_its_flags_are_in_help(rendered: Rendered) -> None:
    seen = set()
    for invocation, argv in blobstore_invocations(rendered):
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit as e:
            raise AssertionError(f"{invocation.where}: blobstore {argv} refused ({e})") from None
        seen.add(argv[0])
        for flag in (w for w in argv if w.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", help_text(argv[0])), (invocation.where, flag)
    assert {"bookie", "gateway", "maintain"} <= seen


def test_every_chart_script_command_line_parses(rendered: Rendered) -> None:
    scripts = rendered.config_map(f"{FULLNAME}-scripts")
    for invocation in invocations(rendered):
        if invocation.program.endswith(".py"):
            assert invocation.program in scripts, invocation.where
            parser: argparse.ArgumentParser = script(invocation.program).argument_parser()
            try:
                parser.parse_args(invocation.argv)
            except SystemExit as e:
                raise AssertionError(f"{invocation.where}: {invocation.argv} ({e})") from None
    for name, text in scripts.items():
        assert text.strip() == (CHART / "files" / name).read_text().strip(), name


def env_names(c: dict[str, Any]) -> list[str]:
    return [variable["name"] for variable in c.get("env", [])]


def test_every_variable_is_one_the_program_or_spark_reads(rendered: Rendered) -> None:
    known = product_variables()
    for workload, pod in pod_templates(rendered):
        for c in containers(pod):
            used = " ".join([*c.get("command", []), *c.get("args", [])])
            for name in env_names(c):
                if name.startswith("BLOBSTORE_"):
                    assert name in known, (workload, c["name"], name)
                elif f"$({name})" not in used:
                    # Not for the manifest's own $(VAR): a variable Spark's launcher reads.
                    assert name.encode() in jar_text("spark-launcher"), (workload, c["name"], name)
    for invocation in invocations(rendered):
        if invocation.program == "spark-submit":
            conf = spark_submit_parts(invocation.argv)[1]
            for key in conf:
                if key.startswith("spark.executorEnv.BLOBSTORE_"):
                    assert key.removeprefix("spark.executorEnv.") in known, key


def test_every_spark_setting_exists_in_spark(rendered: Rendered) -> None:
    for invocation in invocations(rendered):
        if invocation.program != "spark-submit":
            continue
        options, conf, application, argv = spark_submit_parts(invocation.argv)
        assert set(options) == {"--master", "--deploy-mode", "--name"}, options
        assert options["--master"].startswith("k8s://"), options
        classes = jar_text("spark-core", "spark-kubernetes")
        for key in conf:
            known = "spark.executorEnv." if key.startswith("spark.executorEnv.") else key
            assert spark_knows(classes, known), key
        assert application == f"{SITE_PACKAGES}/blobstore/cli/__main__.py"
        assert (IMAGE_PATHS[f"{SITE_PACKAGES}/blobstore"] / "cli" / "__main__.py").is_file()
        assert argv[0] == "maintain" and "--master" not in argv  # spark-submit's master


def spark_knows(classes: bytes, key: str) -> bool:
    """Whether Spark's classes name a setting: whole, or as a prefix constant and the
    rest (Scala builds `s"$PREFIX.name"` at run time)."""
    cuts = [index for index, char in enumerate(key) if char == "."]
    return key.encode() in classes or any(
        key[:cut].encode() in classes and key[cut:].encode() in classes for cut in cuts[1:]
    )


def ports_of(c: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in c.get("ports", [])}


def told_ports(invocation: Invocation, argv: list[str]) -> set[int]:
    """The ports a blobstore command line tells the program to listen on."""
    told = {int(argv[i + 1]) for i, word in enumerate(argv[:-1]) if word in PORT_FLAGS}
    if invocation.program == "spark-submit":
        conf = spark_submit_parts(invocation.argv)[1]
        told |= {int(conf["spark.driver.port"]), int(conf["spark.driver.blockManager.port"])}
    return told


def test_every_port_a_program_listens_on_is_declared_and_every_declared_port_is_used(
    rendered: Rendered,
) -> None:
    for invocation, argv in blobstore_invocations(rendered):
        declared = set(ports_of(invocation.container).values())
        if invocation.container in [
            c for _, p in pod_templates(rendered) for c in p.get("initContainers", [])
        ]:
            assert not declared
            continue
        assert told_ports(invocation, argv) == declared, (invocation.where, argv)
    zookeeper = [
        o for o in rendered.kinds("StatefulSet") if o["metadata"]["name"].endswith("-zookeeper")
    ]
    for o in zookeeper:
        config = rendered.config_map(o["metadata"]["name"])["zoo.cfg"]
        ports = ports_of(o["spec"]["template"]["spec"]["containers"][0])
        assert f"clientPort={ports['client']}\n" in config
        servers = re.findall(r"^server\.\d+=[^:]+:(\d+):(\d+)$", config, re.MULTILINE)
        assert servers and set(servers) == {(str(ports["quorum"]), str(ports["election"]))}


def test_services_probes_and_monitors_name_declared_ports(rendered: Rendered) -> None:
    pods = {w: p for w, p in pod_templates(rendered)}
    for service in rendered.kinds("Service"):
        selector = service["spec"]["selector"]
        matching = [
            p
            for o in rendered.objects
            if o["kind"] in ("StatefulSet", "Deployment")
            and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
            for p in [o["spec"]["template"]["spec"]]
        ]
        assert matching, service["metadata"]["name"]
        names = {n for p in matching for c in p["containers"] for n in ports_of(c)}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in names, (service["metadata"]["name"], port)
    for workload, pod in pods.items():
        for c in pod["containers"]:
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                if "httpGet" in c.get(kind, {}):
                    assert c[kind]["httpGet"]["port"] in ports_of(c), (workload, kind)


# Where each container's HTTP probe paths are served: the program's source that answers them.
PROBE_SOURCES = {
    "bookie": ROOT / "bookie" / "http_admin.py",
    "gateway": ROOT / "s3api" / "app.py",
}


def test_http_probe_paths_are_ones_the_program_serves(rendered: Rendered) -> None:
    for workload, pod in pod_templates(rendered):
        for c in pod["containers"]:
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                path = c.get(kind, {}).get("httpGet", {}).get("path")
                if path is None:
                    continue
                if c["name"] == "autorecovery":
                    assert path == "/metrics"  # prometheus_client's server answers any path
                    continue
                assert f'"{path}"' in PROBE_SOURCES[c["name"]].read_text(), (workload, path)


def test_the_ensemble_runs_with_the_settings_of_blobstore_zookeeper(tmp_path: Path) -> None:
    """zoo.cfg of the chart holds every setting `blobstore zookeeper` writes, but the
    ones of one server (its address and directory), and its JVM flags are the program's
    own (the start script asks blobstore.cli.zookeeper_server for them)."""
    own = dict(
        line.split("=", 1)
        for line in zookeeper_server.write_config(tmp_path, "127.0.0.1", 2181)
        .read_text()
        .splitlines()
        if line
    )
    chart = dict(
        line.split("=", 1)
        for line in render().config_map(f"{FULLNAME}-zookeeper")["zoo.cfg"].splitlines()
        if line
    )
    for key in set(own) - {"dataDir", "clientPortAddress", "jute.maxbuffer"}:
        assert chart.get(key) == own[key], key
    source = (CHART / "files" / "zookeeper_server.py").read_text()
    assert "zookeeper_server._server_command(" in source and "zookeeper_classpath()" in source


def test_the_executor_launcher_starts_sparks_kubernetes_executor(tmp_path: Path) -> None:
    """spark_executor.sh names flags and variables Spark 3.5's Kubernetes executor has,
    and its JVM command starts that executor: it comes up and tries the driver."""
    launcher = (CHART / "files" / "spark_executor.sh").read_text()
    backend = jar_text("spark-kubernetes")
    for flag in set(re.findall(r"\s(--[A-Za-z-]+)\s", launcher)):
        assert flag.encode() in backend, flag
    for variable in set(re.findall(r"\$\{?(SPARK_[A-Z_]+)", launcher)) - {"SPARK_HOME"}:
        assert variable.encode() in backend, variable
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))},
        "SPARK_HOME": str(SPARK_JARS.parent),
        "SPARK_EXECUTOR_MEMORY": "256m",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:1",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-application-1",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "blobstore-maintain-exec-1",
        "SPARK_JAVA_OPT_0": "-Dblobstore.test=1",
    }
    launched = subprocess.run(
        ["/bin/bash", CHART / "files" / "spark_executor.sh", "executor"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = launched.stdout + launched.stderr
    assert launched.returncode != 0  # no driver at that address
    assert "KubernetesExecutorBackend: Started daemon" in output, output[-3000:]
    assert "setupEndpointRefByURI" in output, output[-3000:]
