#!/usr/bin/env bash
# test-go.sh runs make test's Go tests and then every benchmark once, in two
# lanes side by side (make test-go calls it inside the stand-ins' run):
#
#   lane 1  local/e2e, then aws-local's benchmarks
#   lane 2  every other package, the longest first, then efsbench's
#           delayfs, then every other benchmark
#
# Why two lanes: local/e2e is mostly waiting on its servers and workers
# (about 100 CPU-s in 500 s), and in one go test with -p 2 it held one of
# the two slots all that while, so the rest of the packages queued behind
# it. As a lane of its own it waits beside the CPU-bound rest. Its own tests
# stay one at a time (run in parallel they contended and slowed each
# other: docs/BENCHMARKS.md, "make test's own time"). Benchmarks run one
# package after another within a go test (-bench makes cmd/go serial), so
# each lane runs its share when its tests are done.
#
# Environment: GO (go), GOTESTFLAGS (more flags for every go test, e.g.
# -json for a timeline). A lane that fails does not stop the other; the
# script fails if either did.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GO=${GO:-go}
read -r -a flags <<<"${GOTESTFLAGS:-}"
mod=$("$GO" list -m)
e2e="$mod/local/e2e"
awslocal="$mod/local/awslocal"
# go test starts packages in the order given, -p at a time: the long ones
# first, so they run beside the many short ones rather than after them.
first=("$awslocal" "$mod/local/realcli" "$mod/pkg/harness" "$mod/worker" "$mod/scripts/load" "$mod/local/container")
mapfile -t all < <("$GO" list ./cmd/... ./pkg/... ./local/... ./worker/... ./functions/... ./scripts/...)
rest=()
for p in "${all[@]}"; do
	[[ $p == "$e2e" || " ${first[*]} " == *" $p "* ]] || rest+=("$p")
done
# The packages that hold a benchmark.
mapfile -t benches < <(grep -rl --include='*_test.go' '^func Benchmark' cmd pkg local worker functions scripts |
	xargs -n1 dirname | sort -u | sed "s|^|$mod/|")
other_benches=()
for p in "${benches[@]}"; do
	[[ $p == "$awslocal" ]] || other_benches+=("$p")
done

bench() { "$GO" test -count=1 -timeout 20m "${flags[@]}" -run '^$' -bench . -benchtime 1x "$@"; }

(
	"$GO" test -count=1 -timeout 45m "${flags[@]}" "$e2e" && bench "$awslocal"
) &
lane1=$!
(
	"$GO" test -count=1 -timeout 45m "${flags[@]}" "${first[@]}" "${rest[@]}" &&
		(cd scripts/efsbench && "$GO" test -count=1 -timeout 2m "${flags[@]}" ./delayfs/) &&
		bench "${other_benches[@]}"
) &
lane2=$!
rc=0
wait "$lane1" || { rc=1; echo "test-go: lane 1 (local/e2e, aws-local's benchmarks) failed" >&2; }
wait "$lane2" || { rc=1; echo "test-go: lane 2 (every other package, the other benchmarks) failed" >&2; }
exit "$rc"
