#!/usr/bin/env bash
# Installs, as root on Debian 12 (bookworm), the system tools `attserve bench` drives:
#   wrk       the HTTP load generator (closed loop, Lua-scripted request bodies)
#   util-linux  taskset, to pin the server and the load generator to separate cores
# wrk2 (wrk's open-loop fork) is not packaged by Debian; bench/loadgen.py (its open loop) replaces it.
# Idempotent: tools already on PATH are left alone.
set -euo pipefail

log() { printf '[bench-ci-deps] %s\n' "$*"; }

if [[ "$(id -u)" != "0" ]]; then
    echo "bench/ci-deps.sh must run as root" >&2
    exit 1
fi

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
if (( ${#missing[@]} )); then
    log "installing ${missing[*]} from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
log "$(wrk --version 2>&1 | head -n 1)"
log "$(taskset --version 2>&1 | head -n 1)"
