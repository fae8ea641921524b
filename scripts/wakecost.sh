#!/usr/bin/env bash
# wakecost.sh measures what a waiting worker's wake queue costs: the
# receives a minute of the harness's wake bell (pkg/harness, wakeBell)
# waiting a minute on a worker's queue of the SQS stand-in (fauxqs, through
# awsfault.HarshSQS) after a ring woke it, with nothing happening:
#
#   quiet   the queue empty once the ring was deleted
#   stale   every receive also returns a copy of that ring, as SQS may
#           (it delivers at least once), for the queue's 60 s retention
#
# It runs BenchmarkWakeBellWaiting once per case (two minutes), starting the
# stand-ins for the run (scripts/standins.sh run), under the machine-wide
# lock heavy test runs share (HEAVY_LOCK, default /tmp/galley-heavy.lock;
# empty: none). Extra arguments go to `go test` (e.g. -count 3).
#
#   scripts/wakecost.sh
#   scripts/wakecost.sh -count 3
#
# docs/BENCHMARKS.md ("A waiting worker's wake queue") has the figures.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
LOCK="${HEAVY_LOCK-/tmp/galley-heavy.lock}"
cmd=(scripts/standins.sh run -- env GALLEY_REQUIRE_STANDINS=1 GALLEY_WAKECOST_WINDOW=1m
	go test ./pkg/harness -run '^$' -bench '^BenchmarkWakeBellWaiting$' -benchtime 1x "$@")
if [ -n "$LOCK" ] && command -v flock >/dev/null 2>&1; then
	exec flock "$LOCK" "${cmd[@]}"
fi
exec "${cmd[@]}"
