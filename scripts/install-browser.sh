#!/usr/bin/env bash
# Chromium and its WebDriver from Debian's packages, for the dashboard's browser test
# (tests/service/test_dashboard_browser.py). Nothing is fetched at test time: the test skips
# with this command in its reason when chromium or chromedriver is missing.
#   bash scripts/install-browser.sh        # root (or sudo); idempotent
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
