// Package worker holds the worker images' build inputs (Dockerfile, with a
// target per agent family; agent-clis pins; the galley-worker command is
// cmd/galley-worker); its test checks the images scripts/worker-image.sh
// builds from them (docs/worker-image.md).
package worker
