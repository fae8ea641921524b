package drive

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		root          bool
		argv          []string
		class, reaped string
	}{
		{true, []string{"/b/galley", "serve", "--stack", "aws-local"}, ClassGalley, ClassWorkers},
		{false, []string{"/b/aws-lambda-rie", "--runtime-interface-emulator-address", "127.0.0.1:1", "/b/lambda-local/mailbox/bootstrap"}, ClassRIE, "fn:mailbox"},
		{false, []string{"/b/lambda-local/effects/bootstrap"}, "fn:effects", "fn:effects"},
		{false, []string{"/b/ecs-standin"}, ClassWorkers, ClassWorkers},
		{false, []string{"/b/galley-worker", "agent-script"}, ClassWorkers, ClassWorkers},
		{false, []string{"java", "-Xmx512m", "-jar", "DynamoDBLocal.jar", "-port", "18000"}, ClassDynamo, ClassDynamo},
		{false, []string{"node", "--input-type=module", "-e", "import(...)", "--", "fauxqs"}, ClassFauxqs, ClassFauxqs},
		{false, []string{"git", "worktree", "add"}, ClassWorkers, ClassWorkers},
		{false, []string{"sh"}, ClassOther, ClassOther},
		{false, nil, ClassOther, ClassOther},
	} {
		c, r := classify(tc.root, tc.argv)
		if c != tc.class || r != tc.reaped {
			t.Errorf("classify(%v, %q) = %s, %s; want %s, %s", tc.root, tc.argv, c, r, tc.class, tc.reaped)
		}
	}
}

// A child that burns CPU and is reaped during the window still counts:
// its time moves into the root's reaped children.
func TestSnapProcsCountsReapedChildren(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// The root is a shell that runs a busy child and waits for it.
	cmd := exec.Command(sh, "-c", `sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'; read x`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	before := snapProcs(nil)
	if len(before.cpu) != 0 {
		t.Fatalf("no roots measured %v", before.cpu)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	s0 := snapProcs([]int{cmd.Process.Pid})
	// Wait until the busy child was reaped: the root alone is left.
	var s1 procSnap
	for range 600 {
		s1 = snapProcs([]int{cmd.Process.Pid})
		if s1.count[ClassGalley] == 1 && len(s1.count) == 1 && s1.cpu[ClassWorkers] > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := s1.since(s0)
	if p.CPU[ClassWorkers] <= 0 {
		t.Fatalf("the reaped child's CPU was lost: %+v", p)
	}
	if p.Count[ClassGalley] != 1 {
		t.Fatalf("counts %v", p.Count)
	}
}

func TestHarnessLogsBothLayouts(t *testing.T) {
	data := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	local := filepath.Join(data, "workers", "w-local", "harness.log")
	write(local, `{"msg":"agent started","time":"2026-01-01T00:00:00Z"}`+"\n")
	task := filepath.Join(data, "aws-local", "ecs", "procs", "workers", "0123abcd", "harness.log")
	write(task, "not json\n"+`{"msg":"preparing the workspace","worker":"w-ecs","run":"r"}`+"\n")
	anon := filepath.Join(data, "aws-local", "ecs", "procs", "workers", "4567ef", "harness.log")
	write(anon, `{"msg":"no worker yet"}`+"\n")
	got := harnessLogs(data)
	if got["w-local"] != local || got["w-ecs"] != task || len(got) != 2 {
		t.Fatalf("harnessLogs = %v", got)
	}
	if len(harnessLogs("")) != 0 {
		t.Fatal("no data directory found logs")
	}
}

// A rate-limited answer is definite: the resend waits and is not preceded
// by a lookup (whose promise would refuse it again).
func TestApplyResendsRateLimitedWithoutLookup(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.URL.Path)
		n := len(calls)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/effects/lookup" {
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "absent"})
			return
		}
		if n == 1 {
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "not-applied", "reason": "rate-limited", "retryAfterSeconds": 0})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "applied",
			"receipt": map[string]any{"reference": "r", "created": []any{}, "touched": []any{}}})
	}))
	defer srv.Close()
	c, err := newCaller(Target{Endpoint: srv.URL, Token: "t", House: "h", Backend: "galley", Credential: "c"}, history.NewRecorder(), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := "hi"
	call := c.effect("run", "task", "key-1", protocol.WorkerEffect{Type: protocol.OpMessage, Worker: ptr(c.worker("w-1")), Body: &body})
	out, err := c.apply(context.Background(), "client", call, 10*time.Second)
	if err != nil || !out.applied {
		t.Fatalf("apply = %+v, %v", out, err)
	}
	if got := strings.Join(calls, " "); got != "/v1/effects /v1/effects" {
		t.Fatalf("calls %s; want the effect twice and no lookup", got)
	}
}
