#!/usr/bin/env bash
# What the console's browser test (local/e2e TestConsoleBrowser) needs on a
# fresh machine: Debian's Chromium, installed when missing, and the pinned
# playwright-core (npm ci of the repository's package-lock.json).
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  # One apt at a time: make test installs the image's tools beside this
  # (scripts/worker-image.sh takes the same lock), and apt waits out others.
  apt=(flock /var/lock/galley-apt.lock apt-get -o DPkg::Lock::Timeout=600)
  if [ "$(id -u)" != 0 ]; then apt=(sudo "${apt[@]}"); fi
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq chromium
fi
cd "$(dirname "$0")/.."
if [ ! -f node_modules/playwright-core/package.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci
fi
