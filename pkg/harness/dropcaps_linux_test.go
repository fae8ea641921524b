package harness_test

import (
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/workerapi"
)

// An agent that runs as root (Landlock as root) holds no capability, so it
// cannot read the environment or memory of a root process outside its
// domain: the harness's, where the provider keys are, nor galley serve's
// (issue 28, item 1). Landlock alone does not refuse that read.
func TestRootAgentHoldsNoCapability(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent is root under Landlock only when its harness is")
	}
	var (
		mu   sync.Mutex
		seen string
	)
	script := `grep -E '^Cap(Eff|Prm|Bnd|Inh|Amb):' /proc/self/status
if cat /proc/` + strconv.Itoa(os.Getpid()) + `/environ >/dev/null 2>&1; then echo "environ read"; else echo "environ refused"; fi
if head -c 1 /proc/` + strconv.Itoa(os.Getpid()) + `/mem >/dev/null 2>&1; then echo "mem read"; else echo "mem refused"; fi
echo "uid $(id -u)"
echo done`
	uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
	probe := scriptDriver{script: func(string) string { return script }, mu: &mu, seen: &seen}
	if _, err := confinedWith(t, workerapi.Self{Handle: "w-caps-" + strconv.Itoa(int(uid)), Run: "run-1", Brief: "x", Branch: testBranch, AgentUID: uid},
		harness.ConfineLandlock, "capsprobe", probe); err != nil {
		t.Fatalf("harness: %v", err)
	}
	mu.Lock()
	out := seen
	mu.Unlock()
	if !strings.Contains(out, "done") || field(out, "uid") != "0" {
		t.Fatalf("the agent did not run as root to the end:\n%s", out)
	}
	sets := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "Cap") {
			sets++
			if f[1] != "0000000000000000" {
				t.Errorf("%s %s, want none", f[0], f[1])
			}
		}
	}
	if sets != 5 {
		t.Errorf("read %d capability sets, want 5:\n%s", sets, out)
	}
	if !strings.Contains(out, "environ refused") || !strings.Contains(out, "mem refused") {
		t.Errorf("the agent read the harness's environment or memory:\n%s", out)
	}
}

// scriptDriver runs a shell script as the agent (made from the agent's MCP
// URL) and keeps what it prints.
type scriptDriver struct {
	script func(mcpURL string) string
	bash   bool // /bin/bash rather than /bin/sh
	mu     *sync.Mutex
	seen   *string
}

func (d scriptDriver) Needs() harness.AgentNeeds { return harness.AgentNeeds{} }

func (d scriptDriver) Command(_ workerapi.Self, mcpURL, _, workspace string) (*exec.Cmd, error) {
	sh := "/bin/sh"
	if d.bash {
		sh = "/bin/bash"
	}
	cmd := exec.Command(sh, "-c", d.script(mcpURL))
	cmd.Dir = workspace
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd, nil
}

func (d scriptDriver) Observe(stdout io.Reader, ev harness.Events) {
	ev.Started("the agent runs")
	b, _ := io.ReadAll(stdout)
	d.mu.Lock()
	*d.seen = string(b)
	d.mu.Unlock()
}
