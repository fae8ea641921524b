package protocol

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// secret is planted in refused values: no error message may repeat it.
const secret = "s3cr3t-VALUE"

// obj is a JSON object under construction for a test body.
type obj = map[string]any

func launchEffect() obj {
	return obj{
		"type":      OpLaunch,
		"role":      RoleStationCook,
		"workspace": obj{"type": WorkspaceIsolated},
		"brief":     "Fix the flaky test.",
		"branch":    "kitchen/issue-195",
		"agent":     obj{"agent": AgentCodex, "model": "gpt-6-sol"},
	}
}

func workerRes() obj { return obj{"kind": KindWorker, "backend": "sandbox", "handle": "w-17"} }

func callWith(effect any) obj {
	return obj{
		"run": "run-1",
		"request": obj{
			"house":      "origin89",
			"backend":    "sandbox",
			"credential": "sandbox-token",
			"task":       "issue-195",
			"attempt":    1,
			"key":        "k-8d2f",
			"effect":     obj{"executor": ExecutorWorker, "effect": effect},
		},
	}
}

// at returns the object at a dotted path of m, creating nothing.
func at(m obj, path string) obj {
	if path == "" {
		return m
	}
	for _, k := range strings.Split(path, ".") {
		m = m[k].(obj)
	}
	return m
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// accepted, as a wanted kind, means no error.
const accepted galleyerr.Kind = 255

// wantKind checks err's kind, that its message names field (when given) and
// that it never repeats the planted secret.
func wantKind(t *testing.T, err error, kind galleyerr.Kind, field string) {
	t.Helper()
	if kind == accepted {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want %v", kind)
	}
	if got := galleyerr.KindOf(err); got != kind {
		t.Fatalf("kind %v, want %v (%v)", got, kind, err)
	}
	if field != "" && !strings.Contains(err.Error(), field) {
		t.Errorf("error %q does not name %q", err, field)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error %q repeats a value", err)
	}
}

func ptr[T any](v T) *T { return &v }
