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
	"syscall"
	"testing"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/workerapi"
)

// groupDriver runs an agent that looks at its cgroup, tries to move itself
// into the group above it, leaves its process group with a process that
// ignores SIGTERM, and floods forks; it prints what it saw.
type groupDriver struct {
	mu   *sync.Mutex
	seen *string
}

func (d groupDriver) Needs() harness.AgentNeeds { return harness.AgentNeeds{} }

func (d groupDriver) Command(_ workerapi.Self, _, _, workspace string) (*exec.Cmd, error) {
	script := `P=$(grep ':pids:' /proc/self/cgroup | cut -d: -f3)
echo "group $P"
if echo $$ > "/sys/fs/cgroup/pids$(dirname "$P")/cgroup.procs" 2>/dev/null; then echo "escape succeeded"; else echo "escape refused"; fi
echo "after $(grep ':pids:' /proc/self/cgroup | cut -d: -f3)"
setsid sh -c 'trap "" TERM HUP INT; while :; do sleep 1; done' >/dev/null 2>&1 &
echo "leaver $!"
(i=0; while [ $i -lt 300 ]; do sleep 300 & i=$((i+1)); done) >/dev/null 2>&1
# No fork from here: the flood's sleepers hold every pid of the group.
while read -r l; do echo "events $l"; done < "/sys/fs/cgroup/pids$P/pids.events"
read -r m < "/sys/fs/cgroup/pids$P/pids.max"; echo "max $m"
while IFS= read -r l; do case "$l" in *:memory:*) M="${l##*:}"; echo "memory $M";; esac; done < /proc/self/cgroup
read -r ml < "/sys/fs/cgroup/memory$M/memory.limit_in_bytes"; echo "memlimit $ml"
echo done
exit 0`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = workspace
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd, nil
}

func (d groupDriver) Observe(stdout io.Reader, ev harness.Events) {
	ev.Started("the agent runs")
	b, _ := io.ReadAll(stdout)
	d.mu.Lock()
	*d.seen = string(b)
	d.mu.Unlock()
}

func field(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return v
		}
	}
	return ""
}

// TestAgentInItsCgroup (issue 21, item 2): where the harness may make
// cgroups (root, v1 pids and memory hierarchies), the agent runs in a
// group of its own with pids.max and memory.limit_in_bytes set, from its
// first process; it cannot move itself out (uid: the group above is
// root's; Landlock, where the agent is root and RLIMIT_NPROC does not bind
// it: /sys is read-only in its domain); under Landlock its fork flood is
// stopped by the group's pids limit (pids.events counts the refusals); and a process that
// left its process group and ignores SIGTERM is ended with the group,
// which is removed, before the harness returns.
func TestAgentInItsCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make cgroups")
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err != nil {
		t.Skip("no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
	}
	const budget = 64
	t.Setenv(contract.EnvAgentMaxProcs, strconv.Itoa(budget))
	t.Setenv(contract.EnvAgentMaxMemory, strconv.Itoa(512<<20))
	for _, mode := range []harness.Confinement{harness.ConfineUser, harness.ConfineLandlock} {
		t.Run(string(mode), func(t *testing.T) {
			uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
			var (
				mu   sync.Mutex
				seen string
			)
			handle := "w-cg-" + strconv.Itoa(int(uid))
			_, err := confinedWith(t, workerapi.Self{Handle: handle, Run: "run-1", Brief: "Fix it.", Branch: testBranch, AgentUID: uid}, mode, "cgroup", groupDriver{mu: &mu, seen: &seen})
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			mu.Lock()
			out := seen
			mu.Unlock()
			if !strings.Contains(out, "done") {
				t.Fatalf("the agent did not finish:\n%s", out)
			}
			group := field(out, "group")
			name := filepath.Base(group)
			if !strings.HasPrefix(name, "galley-agent-"+handle+"-"+strconv.Itoa(os.Getpid())+"-") {
				t.Errorf("the agent's pids group is %q, want one of its own:\n%s", group, out)
			}
			if !strings.Contains(out, "escape refused") || field(out, "after") != group {
				t.Errorf("the agent left its group:\n%s", out)
			}
			if field(out, "max") != strconv.Itoa(budget) || filepath.Base(field(out, "memory")) != name || field(out, "memlimit") != strconv.Itoa(512<<20) {
				t.Errorf("pids.max is not the budget, or the memory group is not the agent's or not of the memory budget:\n%s", out)
			}
			// Under uid the agent's RLIMIT_NPROC, the same budget, refuses
			// the flood first (TestAgentIsEndedWhole); under Landlock as
			// root the rlimit does not bind and the group's limit does.
			ev := strings.Fields(field(out, "events"))
			if mode == harness.ConfineLandlock && (len(ev) < 2 || ev[0] != "max" || ev[1] == "0") {
				t.Errorf("the fork flood was not stopped by the group's pids limit (pids.events %v):\n%s", ev, out)
			}
			if pid, err := strconv.Atoi(field(out, "leaver")); err != nil {
				t.Errorf("no leaver pid:\n%s", out)
			} else if err := syscall.Kill(pid, 0); err == nil {
				if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !strings.Contains(string(b), ") Z") {
					t.Errorf("the process that left the process group (pid %d) outlived the harness: %s", pid, b)
				}
			}
			own := ""
			if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == "pids" {
						own = f[2]
					}
				}
			}
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", own, name)); !os.IsNotExist(err) {
				t.Errorf("the agent's group was not removed: %v", err)
			}
			if mode == harness.ConfineUser {
				if left := liveOf(int(uid)); len(left) > 0 {
					t.Errorf("processes of the agent's uid outlived the harness: %v", left)
				}
			}
			t.Logf("%s: %s", mode, strings.ReplaceAll(out, "\n", "; "))
		})
	}
}

// agent-exec --wait-fd runs the agent only once the harness has sent the
// byte that says the agent is in its cgroup; a gate closed without it (the
// harness could not place the agent) ends agent-exec with 126 before the
// agent runs.
func TestAgentExecWaitsForItsGroup(t *testing.T) {
	for _, placed := range []bool{true, false} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(workerBin, harness.AgentExecCommand, "--wait-fd", "3", "--", "/bin/echo", "echo", "the agent ran")
		cmd.ExtraFiles = []*os.File{r}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		if placed {
			_, _ = w.Write([]byte{1})
		}
		w.Close()
		err = cmd.Wait()
		switch {
		case placed && (err != nil || stdout.String() != "the agent ran\n"):
			t.Errorf("placed: %v %q %q", err, stdout.String(), stderr.String())
		case !placed && (cmd.ProcessState.ExitCode() != 126 || stdout.String() != "" || !strings.Contains(stderr.String(), "did not put the agent in its cgroup")):
			t.Errorf("not placed: exit %d, stdout %q, stderr %q; want 126 and no agent", cmd.ProcessState.ExitCode(), stdout.String(), stderr.String())
		}
	}
}

// ownGroupDir is this process's folder in the v1 hierarchy of controller c.
func ownGroupDir(t *testing.T, c string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == c {
			return filepath.Join("/sys/fs/cgroup", c, f[2])
		}
	}
	t.Skipf("no cgroup v1 %s hierarchy", c)
	return ""
}

// A group a killed harness left, with a process of its agent still in it,
// is ended and removed by the next harness that makes a group beside it:
// nothing of an agent outlives its harness for long.
func TestDeadHarnessGroupIsSwept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make cgroups")
	}
	dirs := []string{ownGroupDir(t, "pids"), ownGroupDir(t, "memory")}
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	name := "galley-agent-w-stale-" + strconv.Itoa(gone.Process.Pid) + "-1"
	left := exec.Command("/bin/sleep", "300")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- left.Wait() }()
	t.Cleanup(func() { _ = left.Process.Kill() })
	for _, d := range dirs {
		g := filepath.Join(d, name)
		if err := os.Mkdir(g, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Rmdir(g) })
		if err := os.WriteFile(filepath.Join(g, "cgroup.procs"), []byte(strconv.Itoa(left.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		seen string
	)
	uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
	if _, err := confinedWith(t, workerapi.Self{Handle: "w-sweeper", Run: "run-1", Brief: "Fix it.", Branch: testBranch, AgentUID: uid}, harness.ConfineUser, "cgroup", groupDriver{mu: &mu, seen: &seen}); err != nil {
		t.Fatalf("harness: %v", err)
	}
	select {
	case <-ended:
	case <-testCtx(t).Done():
		t.Fatal("the process in the dead harness's group still runs")
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, name)); !os.IsNotExist(err) {
			t.Errorf("the dead harness's group %s was not removed: %v", filepath.Join(d, name), err)
		}
	}
}
