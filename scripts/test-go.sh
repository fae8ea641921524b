#!/usr/bin/env bash
# test-go.sh runs make test's Go tests and every benchmark once, in three
# lanes side by side (make test-go calls it inside the stand-ins' run):
#
#   lane 1  local/e2e, then local/container and worker
#   lane 2  every other package, the longest first, then efsbench's tests
#           (its delaying file system, the harness's clone through the
#           cache), then every benchmark but aws-local's
#   lane 3  aws-local's benchmarks (a stack, its workers' containers, and
#           the gaps the event-follow benchmark waits out)
#
# Why lanes: local/e2e and aws-local's benchmarks mostly wait on their
# servers, workers and containers (local/e2e about 100 CPU-s in 500 s);
# in one go test with -p 2, e2e held one of the two slots all that while,
# and the benchmarks ran after everything (-bench makes cmd/go run packages
# one after another). In lanes of their own they wait beside the CPU-bound
# rest. e2e's own tests stay one at a time: run in parallel they contended
# and slowed each other (docs/BENCHMARKS.md, "make test's own time").
#
# Environment: GO (go), GOTESTFLAGS (more flags for every go test, e.g.
# -json for a timeline). A lane that fails does not stop the others; the
# script fails if any did.
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
first=("$awslocal" "$mod/local/realcli" "$mod/pkg/harness" "$mod/scripts/load")
# What lane 1 runs after e2e: the container tests, which wait on podman.
after_e2e=("$mod/local/container" "$mod/worker")
mapfile -t all < <("$GO" list ./cmd/... ./pkg/... ./local/... ./worker/... ./functions/... ./scripts/...)
rest=()
for p in "${all[@]}"; do
	[[ $p == "$e2e" || " ${first[*]} ${after_e2e[*]} " == *" $p "* ]] || rest+=("$p")
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
	"$GO" test -count=1 -timeout 45m "${flags[@]}" "$e2e" && "$GO" test -count=1 -timeout 20m "${flags[@]}" "${after_e2e[@]}"
) &
lane1=$!
(
	"$GO" test -count=1 -timeout 45m "${flags[@]}" "${first[@]}" "${rest[@]}" &&
		(cd scripts/efsbench && "$GO" test -count=1 -timeout 2m "${flags[@]}" ./...) &&
		bench "${other_benches[@]}"
) &
lane2=$!
bench "$awslocal" &
lane3=$!
rc=0
wait "$lane1" || { rc=1; echo "test-go: lane 1 (local/e2e, local/container, worker) failed" >&2; }
wait "$lane2" || { rc=1; echo "test-go: lane 2 (every other package, the other benchmarks) failed" >&2; }
wait "$lane3" || { rc=1; echo "test-go: lane 3 (aws-local's benchmarks) failed" >&2; }
exit "$rc"
