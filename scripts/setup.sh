#!/usr/bin/env bash
# Installs what blobstore needs, idempotently and without reading stdin:
#   - Debian packages: zookeeper, a JDK, rclone and iproute2 (only when missing)
#   - a virtual environment in .venv with the pinned Python dependencies
#   - the s3a jars (hadoop-aws 3.3.1 + aws-java-sdk-bundle 1.11.901) in .deps/jars
#   - the repository's git hooks (.githooks: commit-msg)
set -euo pipefail
cd "$(dirname "$0")/.."
exec </dev/null

log() { printf 'setup: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
        log "need root to run: $*"; return 1; fi
}

# The interpreter of .venv: $PYTHON when set, else the distribution's python3 when it is
# 3.11 or newer, else python3 from PATH. Distributions build CPython with profile-guided
# and link-time optimization; a plain source build (pyenv's default, which may come first
# on PATH) ran the gateway's Python ~40% slower here (docs/operations.md, "Interpreter").
python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if [ -n "${PYTHON:-}" ]; then
    :
elif [ -x /usr/bin/python3 ] && python_ok /usr/bin/python3; then
    PYTHON=/usr/bin/python3
else
    PYTHON=python3
fi

apt_missing=()
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 && [ "$PYTHON" = /usr/bin/python3 ]; then
    apt_missing+=(python3-venv)
fi
if ! command -v java >/dev/null 2>&1; then apt_missing+=(default-jre-headless); fi
if ! ls /usr/share/java/zookeeper-3*.jar >/dev/null 2>&1 && [ -z "${ZOOKEEPER_HOME:-}" ]; then
    apt_missing+=(zookeeper)
fi
if ! command -v rclone >/dev/null 2>&1; then apt_missing+=(rclone); fi
# ip and tc: the fault suite's hosts are network namespaces (tests/netns).
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then apt_missing+=(iproute2); fi
if [ ${#apt_missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${apt_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q >/dev/null || true
    as_root apt-get install -y -q --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

base=$(command -v "$PYTHON")
if [ -x .venv/bin/python ] && [ "$(cat .venv/.base-python 2>/dev/null)" != "$base" ]; then
    log "recreating .venv for $base"
    rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
    log "creating .venv with $base ($("$base" --version 2>&1))"
    "$base" -m venv .venv
    echo "$base" > .venv/.base-python
fi
stamp=.venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
    log "installing Python dependencies into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi

jars=.deps/jars
if [ ! -f "$jars/hadoop-aws-3.3.1.jar" ] || [ ! -f "$jars/aws-java-sdk-bundle-1.11.901.jar" ]; then
    log "fetching the s3a jars (sagemaker_pyspark 1.4.5 sdist)"
    tmp=$(mktemp -d)
    .venv/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
        -d "$tmp" sagemaker_pyspark==1.4.5
    tar -xzf "$tmp"/sagemaker_pyspark-1.4.5.tar.gz -C "$tmp"
    mkdir -p "$jars"
    find "$tmp" -name 'hadoop-aws-3.3.1.jar' -exec cp {} "$jars/" \;
    find "$tmp" -name 'aws-java-sdk-bundle-1.11.901.jar' -exec cp {} "$jars/" \;
    rm -rf "$tmp"
    test -f "$jars/hadoop-aws-3.3.1.jar" && test -f "$jars/aws-java-sdk-bundle-1.11.901.jar"
fi
# The repository's own hooks (commit-msg: short subjects), when this is a git work tree.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 \
    && [ "$(git config --get core.hooksPath || true)" != .githooks ]; then
    git config core.hooksPath .githooks
fi
log "ready"
