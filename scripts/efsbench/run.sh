#!/bin/sh
# Times the agent workload on local disk and under EFS-like delays, in one
# run (docs/BENCHMARKS.md, "The worktree's file system"). Flags go to the
# driver: ./run.sh -repeats 3 -read-delay 1ms -write-delay 3ms; -h lists them.
# Needs /dev/fuse and root (or fusermount).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
cd "$here"
exec go run . -repo "$root" "$@"
