package harness_test

import (
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// idDriver runs an agent that prints its uid, its gid and its
// workspace's owner (or runs script, needing cli), and keeps what it
// printed.
type idDriver struct {
	mu     *sync.Mutex
	out    *string
	script string
	cli    string
}

func (d idDriver) Needs() harness.AgentNeeds { return harness.AgentNeeds{CLI: d.cli} }

func (d idDriver) Command(_ workerapi.Self, _, _, workspace string) (*exec.Cmd, error) {
	script := d.script
	if script == "" {
		script = `echo started; echo "$(id -u) $(id -g) $(stat -c %u .)"`
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = workspace
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd, nil
}

func (d idDriver) Observe(stdout io.Reader, ev harness.Events) {
	b, _ := io.ReadAll(stdout)
	d.mu.Lock()
	*d.out = string(b)
	d.mu.Unlock()
	if strings.Contains(string(b), "started") {
		ev.Started("id said started")
	}
}

// confinedByUID runs the harness in process under ConfineUser for self and
// answers what its agent printed ("" when it never ran) and the harness's
// error. The harness's binary and the workspace's folder are opened to
// other users, as an operator's must be.
func confinedByUID(t *testing.T, self workerapi.Self, opts ...fakeapi.Option) (string, error) {
	t.Helper()
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Skip("the uid confinement needs root here: " + why)
	}
	return confinedAs(t, self, harness.ConfineUser, opts...)
}

// confinedAs is confinedByUID under the confinement mode, whatever this
// process may do.
func confinedAs(t *testing.T, self workerapi.Self, mode harness.Confinement, opts ...fakeapi.Option) (string, error) {
	t.Helper()
	var (
		mu  sync.Mutex
		out string
	)
	_, err := confinedWith(t, self, mode, "id", idDriver{mu: &mu, out: &out}, opts...)
	mu.Lock()
	defer mu.Unlock()
	return strings.TrimSpace(strings.TrimPrefix(out, "started\n")), err
}

// confinedWith runs the harness in process under mode for self with the
// driver d of family, and answers the run and the harness's error.
func confinedWith(t *testing.T, self workerapi.Self, mode harness.Confinement, family string, d harness.Driver, opts ...fakeapi.Option) (*inproc, error) {
	t.Helper()
	return confinedWithConfig(t, self, mode, family, d, nil, opts...)
}

// confinedWithConfig is confinedWith with more of the harness's Config set
// by cfg.
func confinedWithConfig(t *testing.T, self workerapi.Self, mode harness.Confinement, family string, d harness.Driver, cfg func(*harness.Config), opts ...fakeapi.Option) (*inproc, error) {
	t.Helper()
	open, err := os.MkdirTemp("", "galley-agent-uid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(open, "galley-worker")
	bin, err := os.ReadFile(workerBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	self.Agent = protocol.AgentSelection{Agent: family}
	f := fakeFor(t, self, opts...)
	p := runInProcess(t, ctx, f, family, d, func(c *harness.Config) {
		c.Confine, c.ConfineExe, c.Workspace = mode, exe, filepath.Join(open, "ws")
		if cfg != nil {
			cfg(c)
		}
	})
	return p, p.wait(t, ctx)
}

// The agent runs under the uid (and gid) its Self names, in a workspace
// that uid owns.
func TestAgentRunsUnderSelfsUID(t *testing.T) {
	uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
	got, err := confinedByUID(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "Fix it.", Branch: testBranch, AgentUID: uid})
	if err != nil {
		t.Fatal(err)
	}
	u := strconv.FormatUint(uint64(uid), 10)
	if want := u + " " + u + " " + u; got != want {
		t.Fatalf("agent printed %q (uid gid workspace owner), want %q", got, want)
	}
}

// A Self without a uid (a worker launched before the service allocated
// them) gets the uid hashed from its handle. The handle is drawn, so that
// a run beside this one never hashes to the same uid.
func TestAgentWithoutSelfUIDRunsUnderHashedUID(t *testing.T) {
	handle := "w-" + strconv.FormatUint(rand.Uint64(), 36)
	got, err := confinedByUID(t, workerapi.Self{Handle: handle, Run: "run-1", Brief: "Fix it.", Branch: testBranch}, fakeapi.WithoutAgentUID())
	if err != nil {
		t.Fatal(err)
	}
	u := strconv.Itoa(harness.AgentUID(handle))
	if want := u + " " + u + " " + u; got != want {
		t.Fatalf("agent printed %q (uid gid workspace owner), want %q", got, want)
	}
}

// A uid outside the service's range (root's, a system user's, one of the
// hashed range) is refused: the agent never starts.
func TestAgentUIDOutsideTheRangeIsRefused(t *testing.T) {
	for _, uid := range []uint32{1, 1000, harness.AgentUIDBase, workerapi.AgentUIDEnd} {
		t.Run(strconv.FormatUint(uint64(uid), 10), func(t *testing.T) {
			got, err := confinedByUID(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "Fix it.", Branch: testBranch, AgentUID: uid})
			if err == nil || !strings.Contains(err.Error(), "outside") {
				t.Fatalf("harness answered %v, want a refusal of the uid", err)
			}
			if got != "" {
				t.Fatalf("the agent ran: %q", got)
			}
		})
	}
}

func TestAgentUIDOf(t *testing.T) {
	if u, err := harness.AgentUIDOf(workerapi.Self{Handle: "w-9"}); err != nil || u != harness.AgentUID("w-9") {
		t.Errorf("no uid in Self: %d %v, want the hashed %d", u, err, harness.AgentUID("w-9"))
	}
	for _, uid := range []uint32{workerapi.AgentUIDBase, workerapi.AgentUIDEnd - 1} {
		if u, err := harness.AgentUIDOf(workerapi.Self{Handle: "w-9", AgentUID: uid}); err != nil || u != int(uid) {
			t.Errorf("uid %d in Self: %d %v", uid, u, err)
		}
	}
	// The hashed range lies below the service's: an old worker never
	// shares a uid with a new one.
	if harness.AgentUIDBase+1<<28 > workerapi.AgentUIDBase {
		t.Error("the hashed range meets the service's")
	}
}
