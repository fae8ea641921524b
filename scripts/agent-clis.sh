#!/usr/bin/env bash
# Installs the agent CLIs galley's worker image ships, at the versions it
# pins (worker/agent-clis/package.json, checksums in its package-lock.json),
# for the real-CLI test tier (local/realcli), and prints the folder of their
# executables (set it as GALLEY_AGENT_CLIS_BIN).
#
#   scripts/agent-clis.sh [DIR]    # default /tmp/galley-agent-clis
#
# The folder is keyed by the lockfile's hash, so a new pin installs afresh
# and an unchanged one is reused. It must be readable by every user: the
# agent runs under a uid of its own. Needs npm (Node >= 20 is enough: both
# packages run native binaries; Claude Code's engines field asks for 22).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
pins="$here/worker/agent-clis"
base=${1:-${GALLEY_AGENT_CLIS_DIR:-/tmp/galley-agent-clis}}
hash=$(cat "$pins/package.json" "$pins/package-lock.json" | sha256sum | cut -c1-16)
dir="$base/$hash"

if [ ! -x "$dir/node_modules/.bin/claude" ] || [ ! -x "$dir/node_modules/.bin/codex" ]; then
  mkdir -p "$base"
  tmp=$(mktemp -d "$base/.install-XXXXXX")
  cp "$pins/package.json" "$pins/package-lock.json" "$tmp/"
  # npm ci installs exactly the lockfile, verifying each package's integrity
  # checksum; Claude Code's postinstall links its native binary.
  (cd "$tmp" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >&2)
  chmod -R a+rX "$tmp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
fi
chmod a+rx "$base"
"$dir/node_modules/.bin/claude" --version >&2
"$dir/node_modules/.bin/codex" --version >&2
echo "$dir/node_modules/.bin"
