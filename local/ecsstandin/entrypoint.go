package ecsstandin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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
// As a container's init it gives the command the container's environment
// (and of this process's, only what localproc let through, less every
// GALLEY_ variable), waits for it, forwards no signal (a stop signals the
// whole process group), and records the exit code as Docker reports it:
// the status, or 128 plus the signal that ended it.
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
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GALLEY_") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(l.Command[0], l.Command[1:]...)
	cmd.Env = append(env, l.Env...)
	cmd.Dir = l.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	code := 0
	if err := cmd.Start(); err != nil {
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
