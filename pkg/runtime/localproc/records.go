//go:build unix

package localproc

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
)

func (r *Runtime) workersDir() string        { return filepath.Join(r.dir, "workers") }
func (r *Runtime) workerDir(h string) string { return filepath.Join(r.workersDir(), h) }
func (r *Runtime) tokenFile(h string) string { return filepath.Join(r.workerDir(h), "token") }
func (r *Runtime) stopFile(h string) string  { return filepath.Join(r.workerDir(h), "stop") }
func (r *Runtime) pidFile(h string) string   { return filepath.Join(r.workerDir(h), "pid") }
func (r *Runtime) pidStartFile(h string) string {
	return filepath.Join(r.workerDir(h), "pidstart")
}

// lookupLocked returns what is known of handle: from memory, else from its
// folder on disk; nil if this data directory never started it.
func (r *Runtime) lookupLocked(h string) (*worker, error) {
	if w, ok := r.workers[h]; ok {
		return w, nil
	}
	if _, err := os.Stat(r.workerDir(h)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	b, err := os.ReadFile(r.pidFile(h))
	if errors.Is(err, fs.ErrNotExist) {
		return r.findUnrecorded(h)
	}
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, galleyerr.Errorf(galleyerr.Other, "worker %s has a bad pid file", h)
	}
	start, err := os.ReadFile(r.pidStartFile(h))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	w := &worker{handle: h, pid: pid, start: strings.TrimSpace(string(start))}
	r.workers[h] = w
	return w, nil
}

// findUnrecorded handles a claimed worker without a pid file: a server died
// between starting the harness and recording it. The harness, if it runs, is
// the group leader whose environment names this worker's token file; it is
// recorded now. If none runs, the worker reads as exited, and is not
// remembered, so a later look finds a harness that appears meanwhile (a
// Start that finishes a start interrupted before its spawn).
func (r *Runtime) findUnrecorded(h string) (*worker, error) {
	pid, ok := findLeaderByEnv(contract.EnvWorkerTokenFile + "=" + r.tokenFile(h))
	if !ok {
		return &worker{handle: h, exited: true}, nil
	}
	info, _ := procStat(pid)
	w := &worker{handle: h, pid: pid, start: info.start}
	err := writeAtomic(r.pidStartFile(h), []byte(w.start+"\n"))
	if err == nil {
		err = writeAtomic(r.pidFile(h), []byte(strconv.Itoa(pid)+"\n"))
	}
	if err != nil {
		return nil, err
	}
	r.log.Warn("found an unrecorded worker", "handle", h, "pid", pid)
	r.workers[h] = w
	return w, nil
}

// writeNew creates name with mode 600, failing if it exists.
func writeNew(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeAtomic replaces name, so that a reader sees the old or the new
// content, never part of it.
func writeAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
