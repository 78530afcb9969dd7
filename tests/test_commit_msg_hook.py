"""The commit-msg hook (.githooks/commit-msg, installed by `make setup`) refuses a subject
over 72 characters and a body not parted from the subject by a blank line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / ".githooks" / "commit-msg"


def run_hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run(
        [str(HOOK), str(path)], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize(
    "message",
    [
        "Split the catalog's commit into a decision and its writes\n",
        "x" * 72 + "\n\nThe body may be as long as it needs to be. " * 5,
        "\n# a comment git drops\nSubject after a blank line\n\nbody\n",
    ],
)
def test_accepts_a_short_subject(tmp_path: Path, message: str) -> None:
    result = run_hook(tmp_path, message)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("x" * 73 + "\n", "73 characters, at most 72"),
        ("Subject\nbody right under it\n", "blank line"),
        ("# only a comment\n", "empty"),
    ],
)
def test_refuses_with_one_clear_reason(tmp_path: Path, message: str, said: str) -> None:
    result = run_hook(tmp_path, message)
    assert result.returncode == 1
    assert said in result.stderr


def test_setup_installs_the_hooks() -> None:
    setup = (HOOK.parents[1] / "scripts" / "setup.sh").read_text()
    assert "git config core.hooksPath .githooks" in setup
