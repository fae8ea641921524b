//go:build unix

package localproc

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// Start starts the harness for spec once: a second Start of a handle this
// data directory has seen (running, exited, or started by an earlier
// server) does nothing, except to finish a start an earlier server claimed
// and died before spawning. It returns as soon as the process runs.
func (r *Runtime) Start(ctx context.Context, spec service.WorkerSpec) error {
	const op = galleyerr.Op("localproc.start")
	if err := checkHandle(op, spec.Handle); err != nil {
		return err
	}
	if spec.Token == "" {
		return galleyerr.E(op, galleyerr.Invalid, "no worker token")
	}
	// RemoveWorkspace deletes only inside WorkspacesDir: a worktree
	// elsewhere could never be released.
	if _, ok := inside(r.WorkspacesDir(), filepath.Clean(spec.WorkspacePath)); !filepath.IsAbs(spec.WorkspacePath) || !ok {
		return galleyerr.E(op, galleyerr.Invalid, "workspace path "+strconv.Quote(spec.WorkspacePath)+" is not inside "+r.WorkspacesDir())
	}
	if err := ctx.Err(); err != nil {
		return galleyerr.E(op, galleyerr.Unavailable, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return galleyerr.E(op, galleyerr.Unavailable, "runtime closed")
	}
	if _, ok := r.workers[spec.Handle]; ok {
		return nil
	}
	// Creating the worker's folder is the claim: it succeeds once per data
	// directory, whichever server process tries.
	wdir := r.workerDir(spec.Handle)
	if err := os.Mkdir(wdir, 0o700); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return galleyerr.E(op, err)
		}
		if !r.startInterrupted(spec.Handle) {
			return nil
		}
		// A server died between the claim and the spawn: nothing ever ran,
		// and a launch retried against its record (still starting) would
		// wait for ever. Give the claim back, as a failed spawn does, and
		// claim again.
		r.log.Warn("finishing a start an earlier server claimed but never ran", "handle", spec.Handle)
		if err := os.RemoveAll(wdir); err != nil {
			return galleyerr.E(op, err)
		}
		if err := os.Mkdir(wdir, 0o700); err != nil {
			return galleyerr.E(op, err)
		}
	}
	w, err := r.spawn(spec)
	if err != nil {
		// Nothing runs: give the claim back so that a retry can start it.
		if rmErr := os.RemoveAll(wdir); rmErr != nil {
			r.log.Error("cannot release a failed start", "handle", spec.Handle, "err", rmErr)
		}
		return galleyerr.E(op, "cannot start the harness", err)
	}
	r.workers[spec.Handle] = w
	r.log.Info("worker started", "handle", spec.Handle, "pid", w.pid, "run", spec.Run, "task", spec.Task)
	return nil
}

// startInterrupted reports whether h's claimed folder is a start whose
// harness never ran: no pid start file (written right after the spawn), no
// pid file, no stop asked for, and no harness found by its environment (one
// spawned in the instant before its server died). It relies on one server
// at a time per data directory (the local server's store is locked to it)
// and on r.mu, so that no other start of h is under way.
func (r *Runtime) startInterrupted(h string) bool {
	for _, f := range []string{r.pidStartFile(h), r.pidFile(h), r.stopFile(h)} {
		if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	_, found := findLeaderByEnv(contract.EnvWorkerTokenFile + "=" + r.tokenFile(h))
	return !found
}

// meta is what meta.json records for operators.
type meta struct {
	Handle        string    `json:"handle"`
	Run           string    `json:"run,omitempty"`
	Task          string    `json:"task,omitempty"`
	Key           string    `json:"key,omitempty"`
	Branch        string    `json:"branch,omitempty"`
	Workspace     string    `json:"workspace,omitempty"`
	WorkspacePath string    `json:"workspacePath,omitempty"`
	Agent         string    `json:"agent,omitempty"`
	StartedAt     time.Time `json:"startedAt"`
}

// spawn writes the worker's files and starts its harness. On error no
// process of it runs.
func (r *Runtime) spawn(spec service.WorkerSpec) (*worker, error) {
	h := spec.Handle
	wdir := r.workerDir(h)
	if err := writeNew(r.tokenFile(h), []byte(spec.Token)); err != nil {
		return nil, err
	}
	m, err := json.MarshalIndent(meta{
		Handle: h, Run: spec.Run, Task: spec.Task, Key: spec.Key, Branch: spec.Branch,
		Workspace: spec.Workspace, WorkspacePath: spec.WorkspacePath, Agent: spec.Agent,
		StartedAt: r.clock.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeNew(filepath.Join(wdir, "meta.json"), append(m, '\n')); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(r.logFile(h), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the harness holds its own copy

	// Not exec.CommandContext: the worker must outlive the request.
	cmd := exec.Command(r.harness)
	cmd.Env = r.harnessEnv(h, r.tokenFile(h), spec.WorkspacePath, spec.Branch)
	cmd.Dir = wdir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if r.nice != 0 {
		// The whole group: a process the harness already forked is niced
		// too, and every later one inherits the harness's niceness.
		if err := syscall.Setpriority(syscall.PRIO_PGRP, cmd.Process.Pid, r.nice); err != nil {
			r.log.Warn("could not lower the worker's priority", "handle", h, "err", err)
		}
	}
	w := &worker{handle: h, pid: cmd.Process.Pid, child: true}
	// The reaper waits by pid, so no goroutine blocks on a worker that
	// outlives Close.
	_ = cmd.Process.Release()
	// Our unreaped child: its stat is readable even if it already ended.
	if info, ok := procStat(w.pid); ok {
		w.start = info.start
	}
	// pidstart first: whoever finds pid finds its start time too.
	err = writeAtomic(r.pidStartFile(h), []byte(w.start+"\n"))
	if err == nil {
		err = writeAtomic(r.pidFile(h), []byte(strconv.Itoa(w.pid)+"\n"))
	}
	if err != nil {
		// Unrecorded, it could not be found again: take it back.
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(w.pid, &ws, 0, nil)
		return nil, err
	}
	return w, nil
}
