package eventlog

import (
	"maps"
	"slices"
	"testing"

	"github.com/galley-run/galley/pkg/store"
)

// An event with more fields than a log keeps loses the same ones every
// time (the last by name), never a random few.
func TestCleanKeepsTheSameFields(t *testing.T) {
	f := map[string]string{}
	for _, k := range []string{"role", "client", "method", "host", "port", "addr", "allowed", "reason", "count", "event"} {
		f[k] = "v-" + k
	}
	want := []string{"addr", "allowed", "client", "count", "event", "host", "method", "port"}
	for range 50 {
		got := Clean(store.Event{Kind: KindHarness, Fields: maps.Clone(f)}).Fields
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
			t.Fatalf("kept %v, want %v", keys, want)
		}
	}
}
