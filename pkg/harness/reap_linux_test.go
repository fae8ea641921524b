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

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/workerapi"
)

// liveOf lists the live (not zombie) processes of uid.
func liveOf(uid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var state string
		mine := false
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 && f[0] == strconv.Itoa(uid) {
					mine = true
				}
			}
		}
		if mine && !strings.HasPrefix(state, "Z") {
			out = append(out, pid)
		}
	}
	return out
}

// fightDriver runs an agent that fights being ended: three processes in
// sessions of their own that ignore SIGTERM and keep forking new pids, one
// that keeps trying to kill the harness, and a fork flood of 500 sleepers.
// When the flood is done it counts the processes of its uid.
type fightDriver struct {
	uid     int
	mu      *sync.Mutex
	flooded *int
}

func (d fightDriver) Needs() harness.AgentNeeds { return harness.AgentNeeds{} }

func (d fightDriver) Command(_ workerapi.Self, _, _, workspace string) (*exec.Cmd, error) {
	script := `echo started
for i in 1 2 3; do setsid sh -c 'trap "" TERM HUP INT; while :; do sleep 1 & wait; done' >/dev/null 2>&1 & done
(while :; do kill -KILL ` + strconv.Itoa(os.Getpid()) + ` 2>/dev/null; sleep 0.05; done) &
(i=0; while [ $i -lt 500 ]; do sleep 300 & i=$((i+1)); done) >/dev/null 2>&1
echo flooded
sleep 1
exit 0`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = workspace
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd, nil
}

func (d fightDriver) Observe(stdout io.Reader, ev harness.Events) {
	b := make([]byte, 4096)
	var seen string
	for {
		n, err := stdout.Read(b)
		seen += string(b[:n])
		if strings.Contains(seen, "started") {
			ev.Started("the agent said started")
		}
		if strings.Contains(seen, "flooded") {
			d.mu.Lock()
			*d.flooded = len(liveOf(d.uid))
			d.mu.Unlock()
			_, _ = io.Copy(io.Discard, stdout)
			return
		}
		if err != nil {
			return
		}
	}
}

// TestAgentIsEndedWhole: under the uid confinement, an agent whose
// processes leave its session, ignore SIGTERM, fork new pids all the time
// and try to kill the harness is ended whole by the harness (from outside
// its uid) before the harness reports its exit and returns: no process of
// its uid remains. Its fork flood stops at its RLIMIT_NPROC
// (GALLEY_AGENT_MAX_PROCS).
func TestAgentIsEndedWhole(t *testing.T) {
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Skip("the uid confinement needs root here: " + why)
	}
	const budget = 64
	t.Setenv(contract.EnvAgentMaxProcs, strconv.Itoa(budget))
	uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
	var (
		mu      sync.Mutex
		flooded int
	)
	d := fightDriver{uid: int(uid), mu: &mu, flooded: &flooded}
	_, err := confinedWith(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "Fix it.", Branch: testBranch, AgentUID: uid}, harness.ConfineUser, "fight", d)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if left := liveOf(int(uid)); len(left) > 0 {
		t.Fatalf("%d processes of the agent's uid outlived the harness: %v", len(left), left)
	}
	mu.Lock()
	defer mu.Unlock()
	if flooded == 0 || flooded > budget {
		t.Fatalf("the fork flood ran %d processes, want between 1 and the budget %d", flooded, budget)
	}
	t.Logf("the fork flood stopped at %d processes (budget %d)", flooded, budget)
}
