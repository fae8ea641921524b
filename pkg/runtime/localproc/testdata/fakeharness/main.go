// Command fakeharness stands in for galley-worker in localproc's tests. It
// records each start and its environment in its workspace, then behaves as
// the last element of its branch says:
//
//	run       runs until SIGTERM, which it records before exiting
//	exit      exits at once
//	stubborn  ignores SIGTERM (recording it), so only SIGKILL ends it
//	family    starts a child in its process group that ignores SIGTERM,
//	          then runs like "run"
//
// Its records, in $GALLEY_WORKSPACE: "starts" (one pid a line),
// "record-<pid>.json", "sigterm-<pid>", and "child-pid" for a family.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
)

// record is what the tests read back.
type record struct {
	Pid           int      `json:"pid"`
	Pgid          int      `json:"pgid"`
	Cwd           string   `json:"cwd"`
	Env           []string `json:"env"`
	TokenReadable bool     `json:"tokenReadable"`
}

func main() {
	// Before anything else, so that a stubborn harness never dies of an
	// early SIGTERM.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ws := os.Getenv("GALLEY_WORKSPACE")
	if ws == "" {
		fail(fmt.Errorf("GALLEY_WORKSPACE is unset"))
	}
	if len(os.Args) > 1 && os.Args[1] == "child" {
		child(ws)
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		fail(err)
	}
	pid := os.Getpid()
	pgid, _ := syscall.Getpgid(0)
	cwd, _ := os.Getwd()
	tok, err := os.ReadFile(os.Getenv("GALLEY_WORKER_TOKEN_FILE"))
	rec := record{Pid: pid, Pgid: pgid, Cwd: cwd, Env: os.Environ(), TokenReadable: err == nil && len(tok) > 0}
	b, _ := json.Marshal(rec)
	write(filepath.Join(ws, "record-"+strconv.Itoa(pid)+".json"), b)
	appendLine(filepath.Join(ws, "starts"), strconv.Itoa(pid))
	fmt.Println("fakeharness started")

	mode := path.Base(os.Getenv("GALLEY_BRANCH"))
	switch mode {
	case "exit":
		return
	case "family":
		self, err := os.Executable()
		if err != nil {
			fail(err)
		}
		c := exec.Command(self, "child")
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Start(); err != nil {
			fail(err)
		}
	case "run", "stubborn":
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
	for range term {
		write(filepath.Join(ws, "sigterm-"+strconv.Itoa(pid)), nil)
		if mode != "stubborn" {
			os.Exit(0)
		}
	}
}

// child ignores SIGTERM and runs until killed.
func child(ws string) {
	signal.Ignore(syscall.SIGTERM)
	write(filepath.Join(ws, "child-pid"), []byte(strconv.Itoa(os.Getpid())))
	select {}
}

// write replaces name whole, so a reader never sees part of it.
func write(name string, b []byte) {
	if err := os.WriteFile(name+".tmp", b, 0o600); err != nil {
		fail(err)
	}
	if err := os.Rename(name+".tmp", name); err != nil {
		fail(err)
	}
}

func appendLine(name, line string) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fakeharness:", err)
	os.Exit(3)
}
