// Package service is galley's domain logic: the five worker effects with
// idempotency and lookup, observing and listing workers, the coordinator
// mailbox with adoption and fencing, and the worker-facing calls a harness
// makes. It owns the small interfaces it depends on (stores, runtime, git
// host, doorbell, clock); packages elsewhere implement them for AWS and for
// one machine.
package service
