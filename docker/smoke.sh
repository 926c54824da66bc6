#!/usr/bin/env bash
# Passed once by hand (00:40 UTC) on this root Debian 12 machine; issue 22 was cut short by the deadline:
# Builds docker/Dockerfile with podman on a
# Debian 12 root machine (no Docker engine, no registry) on a local debootstrap base, run it with
# the compose file's hardening flags, and smoke-test it. Not wired into .ci/run yet (CI cost unmeasured).
# Adapted from ../shared/tools/container-smoke/podman-smoke.sh (which passed here in ~75 s).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-18000}"; NAME=attserve-smoke; IMAGE=localhost/attserve:cpu; BASE=localhost/debian:bookworm
fail() { echo "SMOKE FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (podman + debootstrap)"
export DEBIAN_FRONTEND=noninteractive
command -v podman >/dev/null && command -v debootstrap >/dev/null && command -v runc >/dev/null || {
    apt-get update -qq && apt-get install -y -qq podman debootstrap runc >/dev/null; } \
    || fail "could not install podman/debootstrap from apt"
# No CAP_SYS_RESOURCE here: podman's root default rlimits make runc fail.
[ -f /etc/containers/containers.conf ] || printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=32768:32768"]\n' \
    "$(ulimit -Hn)" "$(ulimit -Hn)" > /etc/containers/containers.conf
# crun (podman's default here) fails with "cgroups in hybrid mode not supported"; runc works.
grep -q '^\[engine\]' /etc/containers/containers.conf || printf '[engine]\nruntime = "runc"\n' >> /etc/containers/containers.conf
# Local stand-in for python:3.11-slim-bookworm (built once per machine; later steps reuse it).
if ! podman image exists "$BASE"; then
    MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    R=$(mktemp -d)
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
        bookworm "$R" "$MIRROR" >/dev/null || fail "debootstrap failed"
    rm -f "$R/etc/apt/sources.list"; cp /etc/apt/sources.list.d/debian.sources "$R/etc/apt/sources.list.d/"
    cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/" 2>/dev/null || true
    chroot "$R" update-ca-certificates >/dev/null; chroot "$R" apt-get clean; rm -rf "$R/var/lib/apt/lists/"*
    tar -C "$R" -c . | podman import --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' --change 'ENV LANG=C.UTF-8' - "$BASE"
    rm -rf "$R"
fi
# --format docker: the OCI format silently drops HEALTHCHECK.
t0=$(date +%s)
podman build --format docker --network host -f docker/Dockerfile \
    --build-arg PYTHON_IMAGE="$BASE" -t "$IMAGE" . || fail "image build failed"
echo "build_s=$(( $(date +%s) - t0 )) size=$(podman image inspect "$IMAGE" --format '{{.Size}}')"
podman run --rm "$IMAGE" python -c 'import importlib.util,sys; sys.exit(importlib.util.find_spec("torch") is not None)' \
    || fail "torch is in the image"
podman rm -f "$NAME" >/dev/null 2>&1 || true
# Same hardening as docker-compose.yml's x-hardened / x-api (TODO: read from the compose file).
podman run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" --read-only --tmpfs /tmp:size=64m,mode=1777 \
    --cap-drop ALL --security-opt no-new-privileges --memory 2g --pids-limit 256 \
    -e ATTSERVE_SHUTDOWN_TIMEOUT_S=20 "$IMAGE" >/dev/null
trap 'podman logs --tail 30 "$NAME" || true; podman rm -f "$NAME" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 90); do curl -fsS "127.0.0.1:$PORT/health/ready" >/dev/null 2>&1 && break; sleep 1; done
curl -fsS "127.0.0.1:$PORT/health/ready" >/dev/null || fail "not ready after 90 s under the hardening flags"
post() { curl -fsS "127.0.0.1:$PORT/$1" -H 'content-type: application/json' -d "$2" | grep -q '"label"' || fail "/$1"; }
post classify '{"text":"A gripping, beautifully acted film."}'
post entailment '{"premise":"A man is playing a guitar.","hypothesis":"A person is making music."}'
post verify '{"claim":"Paris is the capital of France.","evidence":["Paris is the capital and largest city of France."]}'
[ "$(podman exec "$NAME" id -u)" = 10001 ] || fail "not uid 10001"
podman healthcheck run "$NAME" || fail "HEALTHCHECK"
podman stop -t 30 "$NAME" >/dev/null
[ "$(podman inspect "$NAME" --format '{{.State.ExitCode}}')" = 0 ] || fail "SIGTERM drain did not exit 0"
echo "SMOKE OK"
