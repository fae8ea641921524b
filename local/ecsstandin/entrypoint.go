package ecsstandin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/galley-run/galley/pkg/runtime/localproc"
)

// launchVersion marks a token file as a stand-in launch.
const launchVersion = 1

// launch is what the stand-in hands a task's entrypoint, through the token
// file localproc writes for its worker (mode 600).
type launch struct {
	Standin  int      `json:"ecsStandin"`
	Command  []string `json:"command"`
	Env      []string `json:"env"` // the container's environment
	Dir      string   `json:"dir"`
	ExitFile string   `json:"exitFile"`
	// ReadyFile is written once the command has started: the task is
	// RUNNING from then on.
	ReadyFile string `json:"readyFile"`
}

// Entrypoint runs a task's init if this process was started as one, and
// then exits with the command's status; otherwise it returns at once. A
// binary that serves as the stand-in's entrypoint (local/cmd/ecs-standin,
// a test binary) calls it first thing in main or TestMain.
//
// As a container's init it gives the command exactly the container's
// environment (nothing of its own, which localproc gave it from the host),
// finds a program named without a slash in the container's PATH, as the
// container runtime does, waits for it, forwards no signal (a stop signals
// the whole process group), and records the exit code as Docker reports
// it: the status, or 128 plus the signal that ended it.
func Entrypoint() {
	tf := os.Getenv(localproc.EnvTokenFile)
	if tf == "" {
		return
	}
	b, err := os.ReadFile(tf)
	if err != nil {
		return
	}
	var l launch
	if json.Unmarshal(b, &l) != nil || l.Standin != launchVersion {
		return
	}
	os.Exit(runInit(l))
}

func runInit(l launch) int {
	// The group's SIGTERM reaches the command too; the init outlives it to
	// record the exit. Caught (not ignored), so the command gets the
	// default handling.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if len(l.Command) == 0 {
		fmt.Fprintln(os.Stderr, "ecs-standin init: no command")
		return 127
	}
	// Not exec.Command: it would search this process's PATH (the host's).
	path, err := lookPath(l.Command[0], l.Env)
	// A nil Env would be this process's: never.
	cmd := &exec.Cmd{Path: path, Args: l.Command, Env: append([]string{}, l.Env...), Dir: l.Dir,
		Stdout: os.Stdout, Stderr: os.Stderr}
	if err == nil {
		err = cmd.Start()
	}
	code := 0
	if err != nil {
		fmt.Fprintln(os.Stderr, "ecs-standin init: cannot start the command:", err)
		code = 127
	} else {
		if err := writeFile(l.ReadyFile, nil); err != nil {
			fmt.Fprintln(os.Stderr, "ecs-standin init: cannot record the start:", err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			} else {
				code = ee.ExitCode()
			}
		default:
			code = 127
		}
	}
	if err := writeFile(l.ExitFile, []byte(strconv.Itoa(code)+"\n")); err != nil {
		fmt.Fprintln(os.Stderr, "ecs-standin init: cannot record the exit code:", err)
	}
	return code
}

func writeFile(name string, b []byte) error {
	if err := os.WriteFile(name+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(name+".tmp", name)
}

// lookPath finds name as the container runtime does: a name with a slash
// as it is, else the first executable file of that name in the container
// environment's PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	var path string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}
