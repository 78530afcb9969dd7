"""What each container of the rendered chart runs, sorted by the program that reads it:
`blobstore` (the image's entrypoint, or after the rack wrapper), a script of the chart
(helm/blobstore/files), spark-submit, or the Spark executor's launcher."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.helm.chart import CHART, Rendered, containers, pod_templates
from tests.helm.image import runtime

SCRIPTS_MOUNT = "/opt/blobstore/scripts/"
RACK_WRAPPER = ["/bin/sh", f"{SCRIPTS_MOUNT}with_rack.sh"]
EXECUTOR_LAUNCHER = ["/bin/bash", "/opt/blobstore/spark/spark_executor.sh"]


@dataclass(frozen=True)
class Invocation:
    """One command line of a container: `program` is "blobstore", "spark-submit",
    "spark-executor" or a chart script's file name; `argv` what follows it."""

    workload: str
    container: dict[str, Any]
    program: str
    argv: list[str]

    @property
    def where(self) -> str:
        return f"{self.workload}/{self.container['name']}"


def invocations(rendered: Rendered) -> Iterator[Invocation]:
    """Every command line of every container, probes' exec commands included."""
    for workload, pod in pod_templates(rendered):
        for c in containers(pod):
            yield classify(
                workload, c, [*(c.get("command") or runtime().entrypoint), *c.get("args", [])]
            )
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                if "exec" in c.get(kind, {}):
                    yield classify(workload, c, c[kind]["exec"]["command"])


def classify(workload: str, c: dict[str, Any], words: list[str]) -> Invocation:
    if words[:2] == RACK_WRAPPER:
        # with_rack.sh FILE COMMAND...: runs COMMAND with --rack <the file's rack>.
        assert words[3] == "blobstore", words
        return Invocation(workload, c, "blobstore", [*words[4:], "--rack", "/a-rack"])
    if words[0] == "blobstore":
        return Invocation(workload, c, "blobstore", words[1:])
    if words[0] == "python" and words[1].startswith(SCRIPTS_MOUNT):
        return Invocation(workload, c, words[1][len(SCRIPTS_MOUNT) :], words[2:])
    if words == EXECUTOR_LAUNCHER:
        return Invocation(workload, c, "spark-executor", [])
    if words[0] == "spark-submit":
        return Invocation(workload, c, "spark-submit", words[1:])
    raise AssertionError(f"{workload}/{c['name']} runs an unknown program: {words}")


def spark_submit_parts(argv: list[str]) -> tuple[dict[str, str], dict[str, str], str, list[str]]:
    """(options, --conf settings, application file, application arguments) of a
    spark-submit command line."""
    options: dict[str, str] = {}
    conf: dict[str, str] = {}
    index = 0
    while not argv[index].endswith(".py"):
        flag, value = argv[index], argv[index + 1]
        if flag == "--conf":
            key, _, setting = value.partition("=")
            conf[key] = setting
        else:
            options[flag] = value
        index += 2
    return options, conf, argv[index], argv[index + 1 :]


def blobstore_argv(invocation: Invocation) -> list[str]:
    """The `blobstore` arguments of an invocation (spark-submit runs the same entry point)."""
    if invocation.program == "spark-submit":
        return spark_submit_parts(invocation.argv)[3]
    assert invocation.program == "blobstore", invocation
    return invocation.argv


@cache
def help_text(command: str) -> str:
    """`blobstore COMMAND --help`, as a user would read it."""
    done = subprocess.run(
        [sys.executable, "-m", "blobstore.cli", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@cache
def script(name: str) -> ModuleType:
    """A chart script, imported from helm/blobstore/files."""
    path = CHART / "files" / name
    spec = importlib.util.spec_from_file_location(f"chart_script_{Path(name).stem}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
