// Package worker holds the worker image's build inputs (Dockerfile,
// agent-clis pins; the galley-worker command is cmd/galley-worker); its
// test checks the image scripts/worker-image.sh builds from them
// (docs/worker-image.md).
package worker
