// Package contract is the deployment's contract between the stack and the
// code: the names and facts that the CDK stack (infra/, a module of its
// own), the runtimes that start workers, and the programs they start (the
// Lambda functions, galley serve, the worker harness, the egress proxy)
// must agree on. It holds the environment variables each one sets and
// another reads, the functions' names and kitchn's route table, the
// longest hold of a long poll, the worker image's subcommands and mount
// paths, and how the deployment names its resources.
//
// Each name is spelled here once and means what its comment says; every
// other place uses these constants (a test counts that no product file
// spells one). The package imports nothing but the standard library's
// time, so that every module can import it, infra's included, as
// Kubernetes' cri-api is imported by the kubelet and by every runtime.
package contract
