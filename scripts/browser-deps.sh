#!/usr/bin/env bash
# What the console's browser test (local/e2e TestConsoleBrowser) needs on a
# fresh machine: Debian's Chromium, installed when missing, and the pinned
# playwright-core (npm ci of the repository's package-lock.json).
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then apt=(apt-get); else apt=(sudo apt-get); fi
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq chromium
fi
cd "$(dirname "$0")/.."
if [ ! -f node_modules/playwright-core/package.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci
fi
