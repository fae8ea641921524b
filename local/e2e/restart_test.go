package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol/client"
)

func effectBody(run, key, effect string) string {
	return fmt.Sprintf(`{"run":%q,"request":{"house":"origin89","backend":"galley","credential":"galley-token","task":"issue-1","attempt":1,"key":%q,"effect":{"executor":"worker","effect":%s}}}`, run, key, effect)
}

func launchEffect(brief, branch string) string {
	b, _ := json.Marshal(brief)
	e := `{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":` + string(b)
	if branch != "" {
		e += `,"branch":"` + branch + `"`
	}
	return e + "}"
}

type appliedEffect struct {
	body, answer string
}

// TestRestartAfterSIGKILL kills the server with SIGKILL while effects are
// in flight, starts it again on the same data directory, and finds every
// receipt it answered and every unacknowledged message intact.
func TestRestartAfterSIGKILL(t *testing.T) {
	data := t.TempDir()
	addr := "" // the first server picks its port; restarts keep it
	a := serverOn(t, data, &addr)

	brief := "#!galley-script\nstatus one\nstatus two\nstatus three\nescalate sealed :: all rows are in\nsleep 1h"
	key := "k-restart-launch"
	body := effectBody("run-r", key, launchEffect(brief, "restart/branch"))
	st, launch := a.kitchn(t, contract.RouteEffects, body, "Idempotency-Key", key)
	if st != 200 || !strings.Contains(string(launch), `"applied"`) {
		t.Fatalf("launch: %d %s", st, launch)
	}
	var out struct {
		Receipt struct {
			Created []struct{ Kind, Backend, Handle string }
		}
	}
	_ = json.Unmarshal(launch, &out)
	worker := out.Receipt.Created[0].Handle

	// await seals only once the escalation waits, so the batch holds all
	// four rows.
	// An empty answer only means the wait ran out first (a worker starts
	// slowly on a busy machine): wait again.
	var sealed []byte
	for end := time.Now().Add(3 * time.Minute); ; {
		_, sealed = a.kitchn(t, contract.RouteAwait, `{"run":"run-r","coordinator":"c1","waitMs":20000}`)
		if !strings.Contains(string(sealed), `"status":"empty"`) || time.Now().After(end) {
			break
		}
	}
	if strings.Count(string(sealed), `"kind":"status"`) != 3 || !strings.Contains(string(sealed), `"escalation"`) {
		t.Fatalf("batch: %s", sealed)
	}

	// Effects under way when the server dies.
	var mu sync.Mutex
	var applied []appliedEffect
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("k-msg-%d-%d", g, i)
				eff := fmt.Sprintf(`{"type":"message-worker","worker":{"kind":"worker","backend":"galley","handle":%q},"body":"m %d %d"}`, worker, g, i)
				if i%5 == 4 {
					eff = launchEffect("idle", fmt.Sprintf("restart/%d-%d", g, i))
				}
				b := effectBody("run-r", k, eff)
				st, ans, err := tryCall(a, b, k)
				if err != nil {
					return
				}
				if st == 200 && strings.Contains(ans, `"applied"`) {
					mu.Lock()
					applied = append(applied, appliedEffect{b, ans})
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(400 * time.Millisecond)
	a.kill()
	close(stop)
	wg.Wait()
	if len(applied) < 5 {
		t.Fatalf("only %d effects applied before the kill; the test proves little", len(applied))
	}

	b := serverOn(t, data, &addr)
	for _, e := range append(applied, appliedEffect{body, string(launch)}) {
		var env struct{ Request struct{ Key string } }
		_ = json.Unmarshal([]byte(e.body), &env)
		st, ans := b.kitchn(t, contract.RouteLookup, e.body)
		if st != 200 || string(ans) != e.answer {
			t.Fatalf("lookup of %s after restart:\n got %d %s\nwant %s", env.Request.Key, st, ans, e.answer)
		}
		st, ans = b.kitchn(t, contract.RouteEffects, e.body, "Idempotency-Key", env.Request.Key)
		if st != 200 || string(ans) != e.answer {
			t.Fatalf("resubmission of %s after restart changed: %s", env.Request.Key, ans)
		}
	}
	_, again := b.kitchn(t, contract.RouteNext, `{"run":"run-r","coordinator":"c1"}`)
	if string(again) != string(sealed) {
		t.Fatalf("unacknowledged batch changed across the restart:\n%s\n%s", sealed, again)
	}
	t.Logf("%d effects answered applied before SIGKILL; all intact", len(applied))
}

// tryCall is a kitchn effect call without failing the test on a transport
// error (the server is being killed).
func tryCall(s *server, body, key string) (int, string, error) {
	a, err := client.New(s.Endpoint, s.Token).Call(context.Background(), contract.RouteEffects, []byte(body), key, 0)
	return a.Status, string(a.Body), err
}
