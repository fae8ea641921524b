// Package localproc runs galley's workers as local processes: one harness
// process per worker, in its own process group, started once per handle.
// Everything it knows about a worker lives on disk under the data directory,
// so a server that restarts (or was killed) can still observe and stop the
// workers an earlier server started:
//
//	<dir>/workers/<handle>/     mode 700; creating it is the claim that makes Start happen once
//	                            (a claim whose server died before the spawn is finished by the next Start)
//	    token                   the worker's own credential, mode 600; only its path reaches the
//	                            harness, and it is deleted once the harness has ended
//	    meta.json               the spec's labels and the start time, never the token
//	    harness.log             the harness's stdout and stderr
//	    pidstart, pid           the harness's start time (from /proc, against pid reuse) and pid
//	    stop                    when Stop was asked and when SIGKILL is due
//	    exit                    how the harness ended, when this server reaped it
//	    resume-<n>              the claim that made Resume start the harness again for parking n
//	<dir>/workspaces/           worktrees; RemoveWorkspace deletes only under here
//
// The harness inherits only an allow-list of the server's environment plus
// the GALLEY_* variables below, so no credential of the server (kitchn's
// bearer token above all) reaches a worker. It implements service.Runtime
// and passes the shared suite in package runtimetest.
//
// Files: runtime.go holds the Runtime, its options, New and Close;
// start.go starting a harness; resume.go starting it again for a parked
// worker; stop.go stopping its process group (and
// the stops an earlier server left pending); liveness.go whether a harness
// runs, the reaper and noticing an end; records.go each worker's folder
// and reading it back after a restart; workerlog.go the harness's log and
// its budget; workspace.go the workspaces folder; env.go the harness's
// environment; confine.go how agents are confined; proc*.go what /proc
// and wait4 say of a process.
package localproc
