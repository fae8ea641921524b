#!/bin/sh
# Times the agent workload in one run on local disk, on a worktree under
# EFS-like delays (issue 30's before), and on a local worktree cloned as the
# harness clones it through a git object cache under those delays (the
# after) and on local disk (docs/BENCHMARKS.md, "The worktree's file
# system"). Flags go to the driver: ./run.sh -repeats 3 -read-delay 1ms
# -write-delay 3ms -arms local,after; -h lists them.
# Needs /dev/fuse and root (or fusermount).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
cd "$here"
exec go run . -repo "$root" "$@"
