#!/usr/bin/env bash
# System packages the end-to-end test needs: Debian's Chromium and its chromedriver (the test
# drives the distribution's browser; nothing is downloaded by Selenium or Playwright).
# Idempotent: does nothing when both are already installed. Needs root (or sudo).
set -euo pipefail

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
        SUDO="sudo"
    else
        echo "install-system-deps: need root to install chromium and chromium-driver" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
/usr/bin/chromium --version
/usr/bin/chromedriver --version
