#!/usr/bin/env bash
# The image and the compose api + Prometheus pair, built and run for real without a Docker
# engine or a registry (root, Debian 12; .ci/run runs it). See docker/README.md, "Smoke test".
#
#   1. podman, runc and debootstrap from Debian; podman-compose (pinned, hashed) in a venv.
#   2. A local Debian bookworm base with Python 3.11 (debootstrap, once per machine), standing
#      in for python:3.11-slim-bookworm; docker/Dockerfile built on it, and a Prometheus image
#      built on it from Debian's package (docker/prometheus/Dockerfile.local).
#   3. `podman-compose up api prometheus jaeger` with docker-compose.yml itself (plus
#      docker/smoke/compose.override.yml: the api's port published, the local Prometheus image,
#      the api image's OTLP sink standing in for jaegertracing/all-in-one),
#      so the api runs under exactly the hardening compose sets; checked from podman inspect
#      and /proc inside the container against `docker-compose config` of docker-compose.yml.
#   4. Ready, each task answered, uid 10001, the HEALTHCHECKs, no torch in the image;
#      Prometheus scrapes the api (up == 1, attserve_requests_total == the requests sent);
#      SIGTERM drains with exit 0 within compose's stop_grace_period; a traced request's
#      answer names its trace (traceresponse) and its spans reach http://jaeger:4318.
# Idempotent: the base and the layers stay cached between runs; leftovers of an interrupted run
# are removed first. Exit status non-zero with a `SMOKE FAIL: ...` line when any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE="${SMOKE_STATE_DIR:-/var/lib/attserve-smoke}"   # podman-compose venv, containers.conf
LOGS="$(mktemp -d /tmp/attserve-smoke.XXXXXX)"
PROJECT=attserve-smoke
BASE=localhost/debian:bookworm
API_IMAGE=attserve:cpu                                # docker-compose.yml's name (podman: localhost/)
PROM_IMAGE=localhost/attserve-prometheus:debian       # docker/smoke/compose.override.yml's name
JOB=attserve                                          # docker/prometheus/prometheus.yml's job

say() { printf '[smoke %3ds] %s\n' "$SECONDS" "$*"; }
# Once the containers are up, the exit trap shows their logs first and this line last.
fail() { FAILED="$*"; [ -n "${TRAPPED:-}" ] || echo "SMOKE FAIL: $*" >&2; exit 1; }
# run LOGNAME CMD...: the command's output goes to a log, whose tail is shown when it fails.
run() {
    local log="$LOGS/$1.log"; shift
    "$@" >"$log" 2>&1 && return 0
    echo "--- last lines of $log:" >&2; tail -n 25 "$log" >&2; return 1
}

[ "$(id -u)" = 0 ] || fail "needs root (podman, debootstrap)"
export DEBIAN_FRONTEND=noninteractive

# --- tools -------------------------------------------------------------------------------------
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
    say "installing podman, runc, debootstrap from Debian"
    run apt apt-get update -qq || fail "apt-get update failed"
    run apt apt-get install -y -qq podman runc debootstrap || fail "could not install podman/runc/debootstrap from apt"
fi
# Compose v2, the reference parser of docker-compose.yml (docker/ci-deps.sh pins it).
command -v docker-compose >/dev/null || run ci-deps bash docker/ci-deps.sh || fail "docker/ci-deps.sh failed"
mkdir -p "$STATE"
if ! "$STATE/venv/bin/podman-compose" --version 2>/dev/null | grep -q "podman-compose version 1.6.0"; then
    say "installing podman-compose 1.6.0 (docker/smoke/podman-compose.lock) into $STATE/venv"
    rm -rf "$STATE/venv"
    # Debian's own python3 needs python3-venv for `-m venv`.
    { run venv python3 -m venv "$STATE/venv" \
        || { run apt apt-get install -y -qq python3-venv && run venv /usr/bin/python3 -m venv "$STATE/venv"; }; } \
        && run venv "$STATE/venv/bin/pip" install -q --disable-pip-version-check --require-hashes \
            -r docker/smoke/podman-compose.lock \
        || fail "could not install podman-compose"
fi
# podman's own settings, for this script's podman calls only (/etc/containers is left alone):
# - root's default rlimits (nofile 1048576) exceed what these machines allow: runc fails;
# - crun (Debian's default) fails with "cgroups in hybrid mode not supported"; runc works.
nofile=$(ulimit -Hn); [ "$nofile" != unlimited ] || nofile=1048576
printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=32768:32768"]\n[engine]\nruntime = "runc"\n' \
    "$nofile" "$nofile" >"$STATE/containers.conf"
export CONTAINERS_CONF="$STATE/containers.conf"
say "$(podman --version), $(runc --version | head -n 1), $("$STATE/venv/bin/podman-compose" --version | head -n 1)"

# --- images ------------------------------------------------------------------------------------
if ! podman image exists "$BASE"; then
    say "making $BASE with debootstrap (once per machine)"
    SOURCES=/etc/apt/sources.list.d/debian.sources
    MIRROR=$(awk '/^URIs:/{print $2; exit}' "$SOURCES" 2>/dev/null || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
    ROOTFS=$(mktemp -d /tmp/attserve-smoke-rootfs.XXXXXX)
    run debootstrap debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
        bookworm "$ROOTFS" "$MIRROR" || { rm -rf "$ROOTFS"; fail "debootstrap of the base image failed"; }
    # The image's apt uses the host's mirror; the host's extra CAs (an egress proxy) are trusted.
    [ ! -f "$SOURCES" ] || { rm -f "$ROOTFS/etc/apt/sources.list"; cp "$SOURCES" "$ROOTFS/etc/apt/sources.list.d/"; }
    cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/" 2>/dev/null || true
    chroot "$ROOTFS" update-ca-certificates >/dev/null 2>&1
    chroot "$ROOTFS" apt-get clean; rm -rf "$ROOTFS/var/lib/apt/lists/"*
    tar -C "$ROOTFS" -c . | run import podman import \
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
        --change 'ENV LANG=C.UTF-8' - "$BASE" || { rm -rf "$ROOTFS"; fail "podman import of the base failed"; }
    rm -rf "$ROOTFS"
fi
say "building $API_IMAGE from docker/Dockerfile"
# --format docker: the OCI format silently drops HEALTHCHECK.
t0=$SECONDS
run build-api podman build --format docker --network host -f docker/Dockerfile \
    --build-arg PYTHON_IMAGE="$BASE" -t "$API_IMAGE" . || fail "docker/Dockerfile did not build"
build_s=$((SECONDS - t0))
size_mb=$(( $(podman image inspect "$API_IMAGE" --format '{{.Size}}') / 1000000 ))
say "built $API_IMAGE in ${build_s} s, ${size_mb} MB"
[ "$(podman image inspect "$API_IMAGE" --format '{{.Config.User}}')" = "10001:10001" ] \
    || fail "the image's USER is not 10001:10001"
podman image inspect "$API_IMAGE" --format '{{json .Config.Healthcheck}}' | grep -q /health/ready \
    || fail "the image has no HEALTHCHECK on /health/ready"
say "building $PROM_IMAGE from docker/prometheus/Dockerfile.local (Debian's prometheus package)"
run build-prometheus podman build --format docker --network host -f docker/prometheus/Dockerfile.local \
    --build-arg BASE_IMAGE="$BASE" -t "$PROM_IMAGE" docker/prometheus \
    || fail "docker/prometheus/Dockerfile.local did not build"

# --- the compose pair --------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export SMOKE_API_PORT PROMETHEUS_PORT JAEGER_UI_PORT GRAFANA_ADMIN_PASSWORD=smoke-grafana-not-started
SMOKE_API_PORT=$(free_port); PROMETHEUS_PORT=$(free_port); JAEGER_UI_PORT=$(free_port)
API="http://127.0.0.1:$SMOKE_API_PORT"; PROM="http://127.0.0.1:$PROMETHEUS_PORT"
# What docker-compose.yml alone sets (the override must not be where the hardening comes from).
docker-compose -f docker-compose.yml config --format json >"$LOGS/compose.json" \
    || fail "docker-compose config rejects docker-compose.yml"
COMPOSE=("$STATE/venv/bin/podman-compose" -p "$PROJECT" -f docker-compose.yml -f docker/smoke/compose.override.yml)
"${COMPOSE[@]}" down -v >/dev/null 2>&1 || true
container() { podman ps -a --filter "label=io.podman.compose.project=$PROJECT" \
    --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -n 1; }
on_exit() {
    local status=$?
    if [ "$status" != 0 ]; then
        for service in api prometheus jaeger; do
            local name; name=$(container "$service")
            [ -n "$name" ] && { echo "--- podman logs --tail 15 $name:" >&2; podman logs --tail 15 "$name" >&2 || true; }
        done
        echo "(build and compose logs: $LOGS)" >&2
        [ -z "${FAILED:-}" ] || echo "SMOKE FAIL: $FAILED" >&2
    fi
    "${COMPOSE[@]}" down -v >/dev/null 2>&1 || true
    [ "$status" = 0 ] && rm -rf "$LOGS"
    exit "$status"
}
trap on_exit EXIT; TRAPPED=1
check() { python3 docker/smoke/checks.py "$@" 2>"$LOGS/check.err" || fail "$(sed 's/^SMOKE FAIL: //' "$LOGS/check.err" | tail -n 5)"; }
say "podman-compose up api prometheus jaeger (docker-compose.yml + docker/smoke/compose.override.yml)"
say "not run here: grafana (grafana/grafana cannot be pulled: no registry, and Grafana has no Debian or PyPI package)"
say "not run here: proxy (nginxinc/nginx-unprivileged cannot be pulled; Debian's nginx 1.22 lacks upstream 'resolve'), the api is reached directly"
say "not run here: jaeger's own image (jaegertracing/all-in-one cannot be pulled); the api image's OTLP sink (bench.otlp_sink) stands in as jaeger:4318"
check single-ports "$LOGS/compose.json"
run compose-up "${COMPOSE[@]}" up -d --no-build api prometheus jaeger || fail "podman-compose up failed"
API_CTR=$(container api); PROM_CTR=$(container prometheus); TRACES_CTR=$(container jaeger)
[ -n "$API_CTR" ] && [ -n "$PROM_CTR" ] && [ -n "$TRACES_CTR" ] \
    || fail "podman-compose did not create the api, prometheus and jaeger containers"

ready=""
for _ in $(seq 1 120); do
    curl -fsS "$API/health/ready" >/dev/null 2>&1 && { ready=1; break; }
    # compose's restart policy restarts a crashing api: any restart is a failure.
    read -r running restarts exit_code < <(podman inspect "$API_CTR" --format '{{.State.Running}} {{.RestartCount}} {{.State.ExitCode}}')
    [ "$running" = true ] && [ "$restarts" = 0 ] \
        || fail "the api exited under docker-compose.yml's settings (running=$running, restarts=$restarts, last exit code $exit_code; its log above)"
    sleep 1
done
[ -n "$ready" ] || fail "the api is not ready after 120 s under docker-compose.yml's settings"
say "api ready on $API"
check hardening "$LOGS/compose.json" api "$API_CTR"
check hardening "$LOGS/compose.json" prometheus "$PROM_CTR"
[ "$(podman exec "$API_CTR" id -u)" = 10001 ] || fail "the api does not run as uid 10001"
podman exec "$API_CTR" python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is not None)' \
    || fail "torch is in the image"
run healthcheck podman healthcheck run "$API_CTR" || fail "the api's compose healthcheck fails"
run healthcheck podman healthcheck run "$PROM_CTR" || fail "prometheus's compose healthcheck fails"
say "uid 10001, no torch, api and prometheus healthchecks pass"

# Each task answered; the status codes the client saw are what Prometheus must count.
declare -A sent=()
post() {  # post ENDPOINT BODY EXPECTED_STATUS
    local code
    code=$(curl -sS -o "$LOGS/answer.json" -w '%{http_code}' "$API/$1" -H 'content-type: application/json' -d "$2") \
        || fail "POST /$1: no answer"
    [ "$code" = "$3" ] || fail "POST /$1 answered $code, expected $3: $(head -c 300 "$LOGS/answer.json")"
    [ "$code" != 200 ] || grep -q '"label"' "$LOGS/answer.json" || fail "POST /$1: no label in $(head -c 300 "$LOGS/answer.json")"
    sent["$1/$code"]=$(( ${sent["$1/$code"]:-0} + 1 ))
}
post classify '{"text":"A gripping, beautifully acted film."}' 200
post classify '{"text":"Dull and far too long."}' 200
post classify '{"text":"An uneven but charming debut."}' 200
post entailment '{"premise":"A man is playing a guitar.","hypothesis":"A person is making music."}' 200
post entailment '{"premise":"A dog runs in a park.","hypothesis":"A cat sleeps indoors."}' 200
post verify '{"claim":"Paris is the capital of France.","evidence":["Paris is the capital and largest city of France."]}' 200
post classify '{}' 422
post entailment '{"premise":"A man is playing a guitar.","hypothesis":"A person is making music.","explain":true}' 200
grep -q '"alignment"' "$LOGS/answer.json" || fail "POST /entailment with explain: no alignment in $(head -c 300 "$LOGS/answer.json")"
# the /ui page's files are in the installed package (package-data), served with their CSP
curl -fsS -D "$LOGS/ui.headers" -o "$LOGS/ui.html" "$API/ui/" || fail "GET /ui/: no page"
grep -q '<form' "$LOGS/ui.html" || fail "GET /ui/: not the explanation page: $(head -c 200 "$LOGS/ui.html")"
grep -qi '^content-security-policy:' "$LOGS/ui.headers" || fail "GET /ui/: no Content-Security-Policy header"
for file in ui.js ui.css; do curl -fsS -o /dev/null "$API/ui/$file" || fail "GET /ui/$file: missing from the image"; done
say "explain answered; /ui served from the image"
# A caller's sampled traceparent is honoured (within ATTSERVE_TRACE_FORCED_PER_S): the answer
# names its trace, and its spans must reach the trace backend (checked after the api's SIGTERM,
# which flushes them).
TRACE_ID=4bf92f3577b34da6a3ce929d0e0e4736
code=$(curl -sS -D "$LOGS/traced.headers" -o "$LOGS/answer.json" -w '%{http_code}' "$API/classify" \
    -H 'content-type: application/json' -H "traceparent: 00-$TRACE_ID-00f067aa0ba902b7-01" \
    -d '{"text":"A traced request."}') || fail "POST /classify with a traceparent: no answer"
[ "$code" = 200 ] || fail "POST /classify with a traceparent answered $code: $(head -c 300 "$LOGS/answer.json")"
sent["classify/200"]=$(( ${sent["classify/200"]:-0} + 1 ))
grep -qi "^traceresponse: 00-$TRACE_ID-" "$LOGS/traced.headers" \
    || fail "the traced answer has no traceresponse header naming trace $TRACE_ID: $(tr -d '\r' <"$LOGS/traced.headers" | tr '\n' ' ')"
expected=$(for key in "${!sent[@]}"; do printf '%s\n%s\n' "$key" "${sent[$key]}"; done \
    | python3 -c 'import json, sys; l = sys.stdin.read().split(); print(json.dumps(dict(zip(l[::2], map(int, l[1::2])))))')
say "answered each task; sent $expected"
check scrape "$PROM" "$JOB" "$expected" 60

grace=$(python3 -c 'import json, re, sys; g = json.load(open(sys.argv[1]))["services"]["api"]["stop_grace_period"]; print(sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\d+)([hms])", g)))' "$LOGS/compose.json")
t0=$SECONDS
# (podman 4.3 without systemd logs an error about healthcheck timers here: harmless)
podman stop -t "$grace" "$API_CTR" >/dev/null 2>"$LOGS/stop.log"
code=$(podman inspect "$API_CTR" --format '{{.State.ExitCode}}')
[ "$code" = 0 ] || fail "SIGTERM: the api exited $code, not 0, within compose's stop_grace_period ${grace} s"
say "SIGTERM drained, exit 0 in $((SECONDS - t0)) s (stop_grace_period ${grace} s)"
# the sink prints {"requests", "spans", "bytes"} when stopped; the traced request alone makes 7 spans
podman stop -t 10 "$TRACES_CTR" >/dev/null 2>>"$LOGS/stop.log"
spans=$(podman logs "$TRACES_CTR" 2>/dev/null | tail -n 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["spans"])') \
    || fail "the OTLP sink standing in for jaeger printed no counts: $(podman logs --tail 5 "$TRACES_CTR" 2>&1)"
[ "$spans" -ge 7 ] || fail "the trace backend received $spans spans from the api, expected at least the traced request's 7"
say "traces: the api exported $spans spans to http://jaeger:4318"
echo "SMOKE OK total_s=$SECONDS build_s=$build_s image_mb=$size_mb"
