package history

import (
	"fmt"
	"slices"
	"testing"
)

func TestReleasedNeverRevives(t *testing.T) {
	kA := effectBody("k-a", launch("a"))
	release := effectBody("k-r", `{"type":"release-resource","resource":{"kind":"worker","backend":"galley","handle":"w-a"}}`)
	released := `{"status":"applied","receipt":{"reference":"r-r","created":[],"touched":[{"kind":"worker","backend":"galley","handle":"w-a"}]}}`
	row := func(kind, handle string) string {
		return fmt.Sprintf(`{"resource":{"kind":%q,"backend":"galley","handle":%q},"owner":"k-a","liveness":"live"}`, kind, handle)
	}
	for _, tc := range []struct {
		name string
		b    *builder
		want []string
	}{
		{"released stays missing", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, release, 200, released, 3, 4).
			op("c", Observe, observeBody("w-a"), 200, `{"state":"missing"}`, 5, 6).
			op("c", Inventory, "", 200, `{"resources":[`+row("branch", "b-a")+`]}`, 7, 8).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 9, 10).
			op("c", Observe, observeBody("w-a"), 200, `{"state":"missing"}`, 11, 12), nil},
		{"released, then starting", new(builder).
			op("c", Effect, kA, 0, "", 1, 0).
			op("d", Effect, release, 200, released, 3, 4).
			op("d", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 5, 6).
			op("d", Observe, observeBody("w-a"), 200, `{"state":"starting"}`, 7, 8), []string{"released-revived"}},
		{"released, then listed", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, release, 200, released, 3, 4).
			op("c", Inventory, "", 200, `{"resources":[`+row("worker", "w-a")+","+row("branch", "b-a")+`]}`, 5, 6), []string{"released-revived"}},
		{"missing after its launch applied, then ready", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, release, 0, "", 3, 0).
			op("d", Observe, observeBody("w-a"), 200, `{"state":"missing"}`, 5, 6).
			op("d", Observe, observeBody("w-a"), 200, `{"state":"ready"}`, 7, 8), []string{"released-revived"}},
		{"missing before its launch applied", new(builder).
			op("d", Observe, observeBody("w-a"), 200, `{"state":"missing"}`, 1, 2).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 3, 4).
			op("d", Observe, observeBody("w-a"), 200, `{"state":"starting"}`, 5, 6), nil},
		{"an observe racing the release", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, release, 200, released, 3, 6).
			op("d", Observe, observeBody("w-a"), 200, `{"state":"ready"}`, 4, 5), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.b.ops, Options{})
			if got := invariants(r); !slices.Equal(got, tc.want) {
				t.Fatalf("violations %v, want %v\n%s", got, tc.want, r)
			}
			if tc.want == nil && r.Checked["released"] == 0 && tc.name == "released stays missing" {
				t.Fatalf("nothing checked:\n%s", r)
			}
		})
	}
}
