#!/usr/bin/env bash
# Install Debian's headless-capable Chromium and its matching chromedriver for the
# browser test (tests/book/test_browser.py). Needs root (or sudo). Safe to run twice.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || true)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium chromium-driver fonts-dejavu-core
/usr/bin/chromium --version
/usr/bin/chromedriver --version
