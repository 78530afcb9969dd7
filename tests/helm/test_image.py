"""The Dockerfile, checked without building it (no container engine here): its base, user
and entrypoint are what the chart expects, everything it copies exists and is not
ignored, its pins come from pyproject.toml, and it follows the usual hygiene."""

from __future__ import annotations

import fnmatch
import re
import tomllib

from tests.helm.chart import ROOT, render
from tests.helm.image import DOCKERFILE, SITE_PACKAGES, VENV, instructions, runtime, stages


def test_one_image_for_every_role_runs_blobstore_as_a_non_root_user() -> None:
    image = runtime()
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", image.base), image.base
    assert image.entrypoint == ["blobstore"]
    assert image.user == "10001:10001"
    assert render().objects and all(
        o["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
        for o in render().objects
        if o["kind"] in ("StatefulSet", "Deployment")
    )
    assert image.env["PATH"].startswith(f"{VENV}/bin:")
    assert image.env["SPARK_HOME"] == f"{SITE_PACKAGES}/pyspark"
    assert "PYTHONOPTIMIZE" not in image.env  # bookies and gateways need assertions on


def test_the_runtime_has_java_17_and_debians_zookeeper() -> None:
    runs = " ".join(rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "RUN")
    install = re.search(r"apt-get install ([^&]*)", runs)
    assert install is not None
    packages = install.group(1).split()
    assert "--no-install-recommends" in packages
    assert {"openjdk-17-jre-headless", "zookeeper"} <= set(packages)
    assert "rm -rf /var/lib/apt/lists/*" in runs


def ignored(path: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(path, p) or path.startswith(f"{p}/") for p in patterns)


def test_everything_copied_exists_and_is_not_ignored() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [source for stage in stages() for copy in stage.copies for source in copy]
    assert {"pyproject.toml", "bookie", "blobstore", "s3api"} <= set(copied)
    for source in copied:
        assert (ROOT / source).exists(), source
        assert not ignored(source, patterns), source
    for unwanted in (".venv", ".git", "tests", "data"):
        assert ignored(unwanted, patterns), unwanted


def test_pyspark_comes_with_the_project() -> None:
    """The maintenance job needs PySpark at run time: `pip install .` brings it."""
    runs = " ".join(rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "RUN")
    assert "/opt/venv/bin/pip install ." in runs
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("pyspark==") for d in project["dependencies"])


def test_the_venv_the_chart_names_is_the_one_built() -> None:
    build = stages()[0]
    runs = " ".join(rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "RUN")
    assert f"python -m venv {VENV}" in runs
    assert f"{VENV}/bin/pip install ." in runs
    assert build.base == runtime().base  # the venv's interpreter is the runtime's
    assert "COPY --from=build /opt/venv /opt/venv" in DOCKERFILE.read_text()
