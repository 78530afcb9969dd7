#!/usr/bin/env bash
# Installs what blobstore needs, idempotently and without reading stdin:
#   - Debian packages: zookeeper, a JDK and rclone (only when missing)
#   - a virtual environment in .venv with the pinned Python dependencies
#   - the s3a jars (hadoop-aws 3.3.1 + aws-java-sdk-bundle 1.11.901) in .deps/jars
set -euo pipefail
cd "$(dirname "$0")/.."
exec </dev/null

log() { printf 'setup: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
        log "need root to run: $*"; return 1; fi
}

apt_missing=()
if ! command -v java >/dev/null 2>&1; then apt_missing+=(default-jre-headless); fi
if ! ls /usr/share/java/zookeeper-3*.jar >/dev/null 2>&1 && [ -z "${ZOOKEEPER_HOME:-}" ]; then
    apt_missing+=(zookeeper)
fi
if ! command -v rclone >/dev/null 2>&1; then apt_missing+=(rclone); fi
if [ ${#apt_missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${apt_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q >/dev/null || true
    as_root apt-get install -y -q --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$PYTHON" -m venv .venv
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
log "ready"
