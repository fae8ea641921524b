package harness

import (
	"slices"
	"testing"
)

func TestAgentUID(t *testing.T) {
	a, b := AgentUID("w-1"), AgentUID("w-2")
	if a != AgentUID("w-1") {
		t.Fatal("AgentUID is not stable")
	}
	for _, u := range []int{a, b} {
		if u < AgentUIDBase || u >= AgentUIDBase+agentUIDSpan {
			t.Errorf("uid %d outside the reserved range", u)
		}
	}
	if a == b {
		t.Errorf("two handles share uid %d", a)
	}
}

// TestLandlockReadOnly: no read-only folder of the domain holds the
// workspaces (a PATH entry of / or of the data folder would open it all)
// nor lies among them.
func TestLandlockReadOnly(t *testing.T) {
	ro := landlockReadOnly("/data/workspaces/wt-1", "/opt/galley/galley-worker", "/agents/bin",
		[]string{"PATH=/usr/bin:/:/data:relative:/data/workspaces/x", "SSL_CERT_FILE=/certs/ca.pem"})
	for _, bad := range []string{"/", "/data", "relative", "/data/workspaces/x"} {
		if slices.Contains(ro, bad) {
			t.Errorf("read-only folders hold %s: %v", bad, ro)
		}
	}
	for _, want := range []string{"/usr", "/opt/galley", "/agents/bin", "/certs/ca.pem"} {
		if !slices.Contains(ro, want) {
			t.Errorf("read-only folders lack %s: %v", want, ro)
		}
	}
}
