"""The chart's scripts (helm/blobstore/files) pass the project's gates: ruff, mypy --strict
for the Python ones, bash's own parser for the shell ones. tests/test_lint.py covers the
packages; these live in the chart."""

from __future__ import annotations

import subprocess
import sys

from tests.helm.chart import CHART, ROOT

FILES = CHART / "files"


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_python_scripts_pass_ruff_and_mypy_strict() -> None:
    scripts = sorted(str(p) for p in FILES.glob("*.py"))
    assert len(scripts) == 4, scripts
    for command in (
        ("ruff", "check", "--no-cache"),
        ("ruff", "format", "--check", "--no-cache"),
        ("mypy", "--no-incremental", "--strict"),
    ):
        done = run(sys.executable, "-m", *command, *scripts)
        assert done.returncode == 0, done.stdout + done.stderr


def test_shell_scripts_parse() -> None:
    for script in sorted(FILES.glob("*.sh")):
        shell = "/bin/bash" if script.read_text().startswith("#!/bin/bash") else "/bin/sh"
        done = run(shell, "-n", str(script))
        assert done.returncode == 0, (script, done.stderr)
