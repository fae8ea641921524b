//go:build unix

package localproc

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// TestResume: a parked worker's harness is started again, once per
// parking, with its new credential in the token file, only after the
// harness that parked has ended (Unavailable before); each harness's end
// is told once; a stopped worker is never resumed.
func TestResume(t *testing.T) {
	ctx := context.Background()
	exits := make(chan string, 8)
	r := newRuntime(t, "", WithOnExit(func(h string) { exits <- h }))
	spec := fakeSpec(r, "w-park", "run")
	if err := r.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	first := awaitRecord(t, spec.WorkspacePath)

	again := spec
	again.Token = spec.Handle + ".resumed-credential"
	if _, err := r.Resume(ctx, again, 1); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("resume while the parked harness runs: %v, want Unavailable", err)
	}
	// The parked harness ends by itself (here: told to, by signal).
	if err := syscall.Kill(first.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, exits, spec.Handle)
	if started, err := r.Resume(ctx, again, 1); err != nil || !started {
		t.Fatalf("resume: started %v, %v", started, err)
	}
	// Again, it says an earlier call had started it: the service then
	// asks whether that harness still runs.
	if started, err := r.Resume(ctx, again, 1); err != nil || started {
		t.Fatalf("the same resume again: started %v, %v; want false, nil", started, err)
	}
	second := awaitNthRecord(t, spec.WorkspacePath, 2)
	if second.Pid == first.Pid {
		t.Fatal("the resume did not start a new harness")
	}
	if starts(r, spec.Handle) != 2 {
		t.Fatalf("%d harnesses started, want 2", starts(r, spec.Handle))
	}
	tok, err := os.ReadFile(r.tokenFile(spec.Handle))
	if err != nil || string(tok) != again.Token {
		t.Fatalf("the resumed harness's token file holds %q (%v), want its new credential", tok, err)
	}
	if !second.TokenReadable || !hasEnv(second.Env, contract.EnvWorkerTokenFile+"="+r.tokenFile(spec.Handle)) {
		t.Fatal("the resumed harness did not get its token file")
	}
	if l, err := r.Liveness(ctx, spec.Handle); err != nil || l != service.LivenessLive {
		t.Fatalf("resumed worker's liveness %v, %v; want live", l, err)
	}
	// Its end is told once more.
	if err := r.Stop(ctx, spec.Handle); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, exits, spec.Handle)
	// The resumed harness ended: the same resume says it had started, and
	// the liveness says it ended (the service settles the worker failed).
	if started, err := r.Resume(ctx, again, 1); err != nil || started {
		t.Fatalf("the resume after its harness ended: started %v, %v; want false, nil", started, err)
	}
	if l, err := r.Liveness(ctx, spec.Handle); err != nil || l != service.LivenessExited {
		t.Fatalf("the ended resumed harness's liveness %v, %v; want exited", l, err)
	}
	select {
	case h := <-exits:
		t.Fatalf("a third exit of %s", h)
	case <-time.After(200 * time.Millisecond):
	}
	// A stopped worker was cancelled or released: never resumed.
	if _, err := r.Resume(ctx, again, 2); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("resume of a stopped worker: %v, want Invalid", err)
	}
	if _, err := r.Resume(ctx, fakeSpec(r, "w-never", "run"), 1); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Fatalf("resume of a worker never started: %v, want NotFound", err)
	}
}

func awaitExit(t *testing.T, exits <-chan string, handle string) {
	t.Helper()
	select {
	case h := <-exits:
		if h != handle {
			t.Fatalf("exit noticed for %s, want %s", h, handle)
		}
	case <-time.After(patience):
		t.Fatalf("the exit of %s was never noticed", handle)
	}
}

// awaitNthRecord waits for the n-th start's record in ws.
func awaitNthRecord(t *testing.T, ws string, n int) record {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		b, _ := os.ReadFile(filepath.Join(ws, "starts"))
		if lines := strings.Fields(string(b)); len(lines) >= n && strings.HasSuffix(string(b), "\n") {
			var rec record
			if err := json.Unmarshal(awaitFile(t, filepath.Join(ws, "record-"+lines[n-1]+".json")), &rec); err != nil {
				t.Fatal(err)
			}
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("start %d never came in %s", n, ws)
		}
		time.Sleep(pollStep)
	}
}

func hasEnv(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}
