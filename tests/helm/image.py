"""What the container image (the Dockerfile at the repository's root) gives a container,
read from the Dockerfile, and where each of its paths is in this checkout.

No image is built here: the tests run the chart's containers against this checkout's
.venv and packages, which the Dockerfile installs at /opt/venv.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
VENV = "/opt/venv"
SITE_PACKAGES = f"{VENV}/lib/python3.11/site-packages"
# Image path -> this checkout's path. The packages are installed from the checkout, so
# their installed copies are the checkout's own files (longest prefix first).
IMAGE_PATHS: dict[str, Path] = {
    f"{SITE_PACKAGES}/blobstore": ROOT / "blobstore",
    f"{SITE_PACKAGES}/bookie": ROOT / "bookie",
    f"{SITE_PACKAGES}/s3api": ROOT / "s3api",
    VENV: ROOT / ".venv",
}


@dataclass
class Stage:
    base: str
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    user: str = ""
    workdir: str = "/"
    copies: list[list[str]] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) of each instruction, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        found.append((word.upper(), rest.strip()))
    return found


def stages(text: str = "") -> list[Stage]:
    """The Dockerfile's stages with their FROM (ARGs substituted), ENV, ENTRYPOINT, USER,
    WORKDIR and COPY sources."""
    text = text or DOCKERFILE.read_text()
    args: dict[str, str] = {}
    result: list[Stage] = []
    for word, rest in instructions(text):
        if word == "ARG" and not result:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0])
            result.append(Stage(base))
        elif word == "ENV":
            for token in rest.split():
                name, _, value = token.partition("=")
                result[-1].env[name] = value
        elif word == "ENTRYPOINT":
            result[-1].entrypoint = json.loads(rest)
        elif word == "USER":
            result[-1].user = rest
        elif word == "WORKDIR":
            result[-1].workdir = rest
        elif word == "COPY" and not rest.startswith("--from"):
            result[-1].copies.append(rest.split()[:-1])
    return result


def runtime() -> Stage:
    """The image's final stage: what containers run in."""
    return stages()[-1]
