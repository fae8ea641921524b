package harness

import (
	"regexp"
	"strings"
)

// What an agent's stderr may add to the reason galley gives its
// coordinator when the agent ends without an outcome: its last lines, so
// that a CLI that could not start, or crashed, says why in kitchn's
// worker-done body and the worker's event log (issue 28, item 8).
const (
	stderrTailLines    = 8
	stderrTailLineSize = 240
	stderrTailBytes    = 900 // the service keeps 1 KiB of a reason
)

// tailLines keeps the last lines written to it, each cut to a size.
type tailLines struct {
	lines []string
}

func (t *tailLines) add(line string) {
	line = strings.TrimSpace(line)
	if line == "" {
		return
	}
	if len(line) > stderrTailLineSize {
		line = line[:stderrTailLineSize] + "…"
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > stderrTailLines {
		t.lines = t.lines[len(t.lines)-stderrTailLines:]
	}
}

// text is the kept lines, newest last, at most stderrTailBytes.
func (t *tailLines) text() string {
	s := strings.Join(t.lines, "\n")
	if len(s) > stderrTailBytes {
		s = "…" + s[len(s)-stderrTailBytes:]
	}
	return s
}

// secretShapes are what a credential looks like in a CLI's message: the
// providers' keys and a bearer or API-key header's value.
var secretShapes = regexp.MustCompile(`(?i)(sk-[a-z0-9_\-]{16,}|bearer\s+[a-z0-9._~+/\-=]{12,}|(x-api-key|authorization|api[_-]?key|token)(["']?\s*[:=]\s*["']?)[^\s"',;]{8,})`)

// redactSecrets replaces each of secrets, and anything shaped like a credential,
// in s.
func redactSecrets(s string, secrets ...string) string {
	for _, v := range secrets {
		if len(v) >= 8 {
			s = strings.ReplaceAll(s, v, redacted)
		}
	}
	return secretShapes.ReplaceAllStringFunc(s, func(m string) string {
		if sub := secretShapes.FindStringSubmatch(m); sub[2] != "" {
			return sub[2] + sub[3] + redacted // keep the name: it says what was there
		}
		return redacted
	})
}
