package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
)

func TestBudgetsFromEnv(t *testing.T) {
	env := map[string]string{
		contract.EnvMCPSessions: "3", contract.EnvMCPSessionIdle: "10m", contract.EnvMCPMaxBody: "65536", contract.EnvMCPBodyTimeout: "5s",
		contract.EnvMCPRequests: "4", contract.EnvPushTimeout: "1m", contract.EnvPushesInFlight: "1",
	}
	b, err := budgetsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Budgets{MCPSessions: 3, MCPSessionIdle: 10 * time.Minute, MCPMaxBody: 65536, MCPBodyTimeout: 5 * time.Second,
		MCPRequests: 4, PushTimeout: time.Minute, PushesInFlight: 1}
	if b != want || b.withDefaults() != want {
		t.Fatalf("budgets %+v, want %+v", b, want)
	}
	if b, err := budgetsFromEnv(func(string) string { return "" }); err != nil || b.withDefaults() != (Budgets{
		MCPSessions: DefaultMCPSessions, MCPSessionIdle: DefaultMCPSessionIdle, MCPMaxBody: DefaultMCPMaxBody,
		MCPBodyTimeout: DefaultMCPBodyTimeout, MCPRequests: DefaultMCPRequests, PushTimeout: DefaultPushTimeout,
		PushesInFlight: DefaultPushesInFlight,
	}) {
		t.Fatalf("unset: %+v, %v", b.withDefaults(), err)
	}
	for name, bad := range map[string]string{contract.EnvMCPSessions: "0", contract.EnvMCPMaxBody: "1MiB", contract.EnvMCPSessionIdle: "-1s", contract.EnvPushTimeout: "soon"} {
		_, err := budgetsFromEnv(func(k string) string {
			if k == name {
				return bad
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v", name, bad, err)
		}
	}
}
