#!/usr/bin/env bash
# The HTML report's tests open report.html in a real headless Chromium (screenshot, DOM,
# print to PDF). Install Debian's package when no Chromium is on the machine; a CHROMIUM
# variable naming another binary is used as it is.
set -euo pipefail
if [ -n "${CHROMIUM:-}" ] && [ -x "${CHROMIUM}" ]; then
    exit 0
fi
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
