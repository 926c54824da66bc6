#!/usr/bin/env bash
# Installs, as root on Debian 12 (bookworm), what tests/deploy/test_ui_browser.py drives the /ui page
# with: Debian's `chromium` and `chromium-driver` (the driver matches the browser's version, and
# both come from the same archive, so no download outside apt). Selenium itself is in the
# [dev] extra. Idempotent: nothing is installed when both are already there.
set -euo pipefail

log() { printf '[browser-ci-deps] %s\n' "$*"; }

if [[ "$(id -u)" != "0" ]]; then
    echo "tests/browser-ci-deps.sh must run as root" >&2
    exit 1
fi

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    log "installing chromium and chromium-driver from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
log "$(chromium --version 2>/dev/null | head -n 1)"
log "$(chromedriver --version | head -n 1)"
