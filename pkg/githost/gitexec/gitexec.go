// Package gitexec runs the git command-line tool for galley's git packages
// (githost and workspace) the same way every time: with an environment
// scrubbed of variables that would point git at another repository (a hook
// or a parent git process may have set GIT_DIR), with prompts off so a
// missing credential fails instead of hanging, in the C locale, and with
// errors whose text has any URL credentials redacted.
package gitexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

// Error is a failed git command: its exit code (-1 when it did not run to an
// exit) and its redacted standard error.
type Error struct {
	Args     []string // the subcommand and its arguments, redacted
	ExitCode int
	Stderr   string
	Err      error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("git %s: exit %d", strings.Join(e.Args, " "), e.ExitCode)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	} else if e.Err != nil {
		msg += ": " + Redact(e.Err.Error())
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode returns err's git exit code: 0 for a nil err, -1 when err is not
// a git exit.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.ExitCode
	}
	return -1
}

// repoLocalVars are the variables that make git act on a repository other
// than the one named by -C or --git-dir (git rev-parse --local-env-vars, less
// the configuration ones, which a harness may use to pass a credential
// helper).
var repoLocalVars = map[string]bool{
	"GIT_DIR": true, "GIT_WORK_TREE": true, "GIT_INDEX_FILE": true,
	"GIT_OBJECT_DIRECTORY": true, "GIT_ALTERNATE_OBJECT_DIRECTORIES": true,
	"GIT_COMMON_DIR": true, "GIT_IMPLICIT_WORK_TREE": true, "GIT_GRAFT_FILE": true,
	"GIT_NO_REPLACE_OBJECTS": true, "GIT_REPLACE_REF_BASE": true, "GIT_PREFIX": true,
	"GIT_SHALLOW_FILE": true, "GIT_NAMESPACE": true, "GIT_QUARANTINE_PATH": true,
	"GIT_CEILING_DIRECTORIES": true, "GIT_DISCOVERY_ACROSS_FILESYSTEM": true,
}

// Env returns the environment git runs with: the process's own, scrubbed,
// plus extra ("KEY=value" entries, which win).
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if repoLocalVars[k] || k == "LC_ALL" || k == "LANGUAGE" || k == "GIT_TERMINAL_PROMPT" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LC_ALL=C", "LANGUAGE=C", "GIT_TERMINAL_PROMPT=0")
	return append(env, extra...)
}

// Cmd describes one git invocation.
type Cmd struct {
	Dir   string   // working directory ("" for the current one)
	Env   []string // extra "KEY=value" entries
	Stdin string
}

// Run runs git with args and returns its standard output. A non-zero exit
// is an *Error.
func (c Cmd) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = c.Dir
	cmd.Env = Env(c.Env...)
	if c.Stdin != "" {
		cmd.Stdin = strings.NewReader(c.Stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		code := -1
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		red := make([]string, len(args))
		for i, a := range args {
			red[i] = Redact(a)
		}
		return stdout.String(), &Error{Args: red, ExitCode: code, Stderr: Redact(strings.TrimSpace(stderr.String())), Err: err}
	}
	return stdout.String(), nil
}

// Run is Cmd{Dir: dir}.Run(ctx, args...).
func Run(ctx context.Context, dir string, args ...string) (string, error) {
	return Cmd{Dir: dir}.Run(ctx, args...)
}

var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@`)

// Redact replaces the user information (user, password, token) of every URL
// in s, so that the text is safe for logs and error messages.
func Redact(s string) string {
	return userinfo.ReplaceAllString(s, "${1}<redacted>@")
}
