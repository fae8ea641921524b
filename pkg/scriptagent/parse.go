package scriptagent

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
)

// Shebang is the first line that makes a brief a script.
const Shebang = "#!galley-script"

// Directive operations, as written in a script.
const (
	OpStatus      = "status"
	OpHeartbeat   = "heartbeat"
	OpAsk         = "ask"
	OpEscalate    = "escalate"
	OpWaitMessage = "wait-message"
	OpSleep       = "sleep"
	OpCommit      = "commit"
	OpWrite       = "write"
	OpShow        = "show"
	OpUsage       = "usage"
	OpDone        = "done"
	OpExit        = "exit"
)

// Directive is one parsed line of a script. Only the fields of its Op are
// set.
type Directive struct {
	Line int    // 1-based line number in the brief (the shebang is line 1)
	Op   string // one of the Op constants

	Text     string        // status
	Subject  string        // ask, escalate
	Body     string        // ask, escalate, done (optional)
	Duration time.Duration // sleep
	Path     string        // commit, write, show: a local, slash-separated path
	Content  string        // commit, write: the file's exact content
	Input    int64         // usage
	Output   int64         // usage
	Cost     *int64        // usage, optional, in millionths of a dollar
	Outcome  string        // done
	Code     int           // exit
}

// LineError is a malformed directive: the line and why.
type LineError struct {
	Line   int
	Text   string
	Reason string
}

func (e *LineError) Error() string {
	return fmt.Sprintf("line %d %q: %s", e.Line, e.Text, e.Reason)
}

// IsScript reports whether a brief is a script: its first line is exactly
// the shebang (a trailing carriage return or blanks aside).
func IsScript(brief string) bool {
	first, _, _ := strings.Cut(brief, "\n")
	return strings.TrimRight(first, " \t\r") == Shebang
}

// Parse parses a script brief (one for which IsScript holds) into its
// directives. Blank lines and lines starting with "#" are skipped. It stops
// at the first malformed line and returns it as a *LineError.
func Parse(brief string) ([]Directive, error) {
	lines := strings.Split(brief, "\n")
	var out []Directive
	for i, raw := range lines[1:] {
		n := i + 2
		line := strings.TrimRight(raw, "\r")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		d, err := parseLine(trimmed)
		if err != nil {
			return nil, &LineError{Line: n, Text: trimmed, Reason: err.Error()}
		}
		d.Line = n
		out = append(out, d)
	}
	return out, nil
}

func parseLine(line string) (Directive, error) {
	op, rest, _ := strings.Cut(line, " ")
	d := Directive{Op: op}
	switch op {
	case OpStatus:
		if rest == "" {
			return d, fmt.Errorf("status needs text")
		}
		d.Text = rest
	case OpHeartbeat, OpWaitMessage:
		if rest != "" {
			return d, fmt.Errorf("%s takes no arguments", op)
		}
	case OpAsk, OpEscalate:
		subject, body, ok := strings.Cut(rest, " :: ")
		if !ok {
			return d, fmt.Errorf(`%s needs "<subject> :: <body>"`, op)
		}
		if strings.TrimSpace(subject) == "" || body == "" {
			return d, fmt.Errorf("%s needs a subject and a body", op)
		}
		d.Subject, d.Body = strings.TrimSpace(subject), body
	case OpSleep:
		dur, err := time.ParseDuration(rest)
		if err != nil || dur < 0 {
			return d, fmt.Errorf("sleep needs a non-negative Go duration such as 1.5s")
		}
		d.Duration = dur
	case OpCommit:
		path, content, ok := strings.Cut(rest, " ")
		if !ok || path == "" || content == "" {
			return d, fmt.Errorf("commit needs a path and text")
		}
		if err := checkPath(path); err != nil {
			return d, err
		}
		d.Path, d.Content = path, content
	case OpWrite:
		// A file written and left uncommitted (a new one untracked, a
		// tracked one changed).
		path, content, ok := strings.Cut(rest, " ")
		if !ok || path == "" || content == "" {
			return d, fmt.Errorf("write needs a path and text")
		}
		if err := checkPath(path); err != nil {
			return d, err
		}
		d.Path, d.Content = path, content
	case OpShow:
		if rest == "" || strings.Contains(rest, " ") {
			return d, fmt.Errorf("show needs one path")
		}
		if err := checkPath(rest); err != nil {
			return d, err
		}
		d.Path = rest
	case OpUsage:
		f := strings.Fields(rest)
		if len(f) != 2 && len(f) != 3 {
			return d, fmt.Errorf("usage needs <input> <output> [<cost>]")
		}
		nums := make([]int64, len(f))
		for i, s := range f {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				return d, fmt.Errorf("usage needs non-negative integers, not %q", s)
			}
			nums[i] = v
		}
		d.Input, d.Output = nums[0], nums[1]
		if len(nums) == 3 {
			d.Cost = &nums[2]
		}
	case OpDone:
		outcome, body, _ := strings.Cut(rest, " ")
		switch outcome {
		case protocol.OutcomeSucceeded, protocol.OutcomeFailed, protocol.OutcomeCancelled:
		default:
			return d, fmt.Errorf("done needs succeeded, failed or cancelled")
		}
		d.Outcome, d.Body = outcome, body
	case OpExit:
		code, err := strconv.Atoi(rest)
		if err != nil || code < 0 || code > 255 {
			return d, fmt.Errorf("exit needs a code from 0 to 255")
		}
		d.Code = code
	default:
		return d, fmt.Errorf("unknown directive %q", op)
	}
	return d, nil
}

// checkPath accepts only a relative path inside the workspace, outside .git.
// (Its messages say "commit path" for every directive that takes a path.)
func checkPath(path string) error {
	if !filepath.IsLocal(path) || strings.Contains(path, `\`) {
		return fmt.Errorf("commit path %q must be relative and stay inside the workspace", path)
	}
	first, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(path)), "/")
	if strings.EqualFold(first, ".git") {
		return fmt.Errorf("commit path %q may not be inside .git", path)
	}
	return nil
}
