package harness

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/gitserve"
)

// Defaults of Budgets, what the harness holds for its agent beside the
// push budget: its MCP server's sessions and requests
// (contract.EnvMCPSessions, EnvMCPSessionIdle, EnvMCPMaxBody,
// EnvMCPBodyTimeout, EnvMCPRequests) and its push gate's pushes in flight
// and their time (contract.EnvPushesInFlight, EnvPushTimeout);
// docs/security.md ("Budgets") gives each bound and what happens at it.
// The CLIs open one MCP session or two a turn (and a
// session a turn when they are started again for the next), each holding
// a request or two: a blocking tool call, the server's event stream. A
// tool's texts are at most 64 KiB each, two a call: 256 KiB leaves room
// for JSON's escapes of ordinary text. The SDK decodes a call's body
// several times over (BenchmarkMCPLargeCall: a call of 256 KiB allocates
// about 6.7 MB), so the body bound is the main factor of what the MCP
// server can be made to hold.
const (
	DefaultMCPSessions    = 8
	DefaultMCPSessionIdle = time.Hour
	DefaultMCPMaxBody     = 256 << 10
	DefaultMCPBodyTimeout = 30 * time.Second
	DefaultMCPRequests    = 16
	DefaultPushTimeout    = gitserve.DefaultBodyTimeout
	DefaultPushesInFlight = gitserve.DefaultPushesInFlight
)

// Budgets bound what the harness holds for its agent outside the agent's
// own cgroup: memory, descriptors, disk and time its MCP server and push
// gate spend on the agent's requests. Zero fields take the defaults.
type Budgets struct {
	MCPSessions    int
	MCPSessionIdle time.Duration
	MCPMaxBody     int64
	MCPBodyTimeout time.Duration
	MCPRequests    int
	PushTimeout    time.Duration
	PushesInFlight int
}

// withDefaults fills in the unset bounds.
func (b Budgets) withDefaults() Budgets {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&b.MCPSessions, DefaultMCPSessions)
	setDur(&b.MCPSessionIdle, DefaultMCPSessionIdle)
	if b.MCPMaxBody <= 0 {
		b.MCPMaxBody = DefaultMCPMaxBody
	}
	setDur(&b.MCPBodyTimeout, DefaultMCPBodyTimeout)
	set(&b.MCPRequests, DefaultMCPRequests)
	setDur(&b.PushTimeout, DefaultPushTimeout)
	set(&b.PushesInFlight, DefaultPushesInFlight)
	return b
}

// budgetsFromEnv reads the Env settings above: zero where unset (the
// defaults apply), an error naming the variable where one is not a
// positive number or Go duration.
func budgetsFromEnv(getenv func(string) string) (Budgets, error) {
	var b Budgets
	var mcpMaxBody int
	for _, v := range []struct {
		name string
		to   *int
	}{
		{contract.EnvMCPSessions, &b.MCPSessions}, {contract.EnvMCPMaxBody, &mcpMaxBody},
		{contract.EnvMCPRequests, &b.MCPRequests}, {contract.EnvPushesInFlight, &b.PushesInFlight},
	} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return Budgets{}, fmt.Errorf("%s must be a positive number", v.name)
		}
		*v.to = n
	}
	b.MCPMaxBody = int64(mcpMaxBody)
	for _, v := range []struct {
		name string
		to   *time.Duration
	}{{contract.EnvMCPSessionIdle, &b.MCPSessionIdle}, {contract.EnvMCPBodyTimeout, &b.MCPBodyTimeout}, {contract.EnvPushTimeout, &b.PushTimeout}} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return Budgets{}, fmt.Errorf("%s must be a positive Go duration", v.name)
		}
		*v.to = d
	}
	return b, nil
}
