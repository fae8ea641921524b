package harness_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/workerapi"
)

// A child test process runs with exactly the capabilities these name
// (comma-separated, without CAP_), as the worker container does; envMissing
// names the one a child was made without.
const (
	envTestCaps    = "GALLEY_TEST_CAPS"
	envTestCapsSet = "GALLEY_TEST_CAPS_SET"
	envMissing     = "GALLEY_TEST_MISSING_CAP"
)

func init() { beforeMain = dropToTestCaps }

// dropToTestCaps, in a child asked for envTestCaps, drops every other
// capability from the bounding set and executes the test binary again:
// root's exec then permits (and makes effective) the bounding set alone,
// on every thread, as a container's runtime leaves it.
func dropToTestCaps() {
	names := os.Getenv(envTestCaps)
	if names == "" {
		return
	}
	want := capMask(strings.Split(names, ","))
	if os.Getenv(envTestCapsSet) != "" {
		if got := effective(); got != want {
			fmt.Fprintf(os.Stderr, "the child's effective capabilities are %#x, want %#x\n", got, want)
			os.Exit(2)
		}
		return
	}
	runtime.LockOSThread() // the bounding set is per thread; exec keeps this one's
	last, _ := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	n, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil {
		n = 40
	}
	for c := 0; c <= n; c++ {
		if want&(1<<c) == 0 {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				fmt.Fprintf(os.Stderr, "PR_CAPBSET_DROP %d: %v\n", c, err)
				os.Exit(2)
			}
		}
	}
	err = unix.Exec("/proc/self/exe", os.Args, append(os.Environ(), envTestCapsSet+"=1"))
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(2)
}

func capMask(names []string) uint64 {
	var m uint64
	for _, n := range names {
		for _, c := range harness.UIDCapabilities {
			if c.Name == n {
				m |= 1 << c.Bit
			}
		}
	}
	return m
}

func effective() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			m, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return m
		}
	}
	return 0
}

// inChild runs the named tests of this binary in a child holding exactly
// caps, and answers its output and whether it passed.
func inChild(t *testing.T, caps []string, run string, env ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^("+run+")$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), append(env, envTestCaps+"="+strings.Join(caps, ","), envTestWorkerBin+"="+workerBin)...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestUIDConfinementWithTheContainersCapabilities runs the uid confinement
// with exactly the capabilities the worker container keeps
// (harness.UIDCapabilities, which infra/stack keeps and its test checks):
// the agent starts under its uid in the worktree it owns. Before FOWNER was
// among them, this failed (chmod of the worktree: operation not
// permitted). Then, for each capability, a harness without it refuses the
// uid confinement, declared or chosen, naming the capability and what it
// is for, and the agent never runs (never as root under something weaker).
func TestUIDConfinementWithTheContainersCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dropping to the container's capabilities needs root")
	}
	var all []string
	for _, c := range harness.UIDCapabilities {
		all = append(all, c.Name)
	}
	if kept := containerCapabilities(t); !slices.Equal(kept, all) {
		t.Fatalf("the worker container keeps %v (infra/stack WorkerCapabilities), the harness needs %v", kept, all)
	}
	out, ok := inChild(t, all, "TestAgentRunsUnderSelfsUID")
	if !ok || !strings.Contains(out, "--- PASS: TestAgentRunsUnderSelfsUID") {
		t.Fatalf("with the container's capabilities %v the uid confinement failed:\n%s", all, out)
	}
	for _, c := range harness.UIDCapabilities {
		t.Run("without "+c.Name, func(t *testing.T) {
			caps := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == c.Name })
			out, ok := inChild(t, caps, "TestUIDConfinementRefusedWithoutACapability", envMissing+"="+c.Name)
			if !ok || !strings.Contains(out, "--- PASS: TestUIDConfinementRefusedWithoutACapability") {
				t.Fatalf("without CAP_%s:\n%s", c.Name, out)
			}
		})
	}
}

// containerCapabilities reads the capabilities the worker container keeps
// from infra/stack's WorkerCapabilities (infra is a module of its own, so
// its source is read; its own test checks the template keeps exactly those).
func containerCapabilities(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../infra/stack/workertask.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(b), "var WorkerCapabilities = []awsecs.Capability{")
	body, _, _ = strings.Cut(body, "}")
	if !ok {
		t.Fatal("infra/stack/workertask.go has no WorkerCapabilities list")
	}
	var names []string
	for _, f := range strings.Fields(body) {
		if n, ok := strings.CutPrefix(strings.TrimSuffix(f, ","), "awsecs.Capability_"); ok {
			names = append(names, n)
		}
	}
	return names
}

// TestUIDConfinementRefusedWithoutACapability runs only in a child made
// without one of harness.UIDCapabilities (envMissing).
func TestUIDConfinementRefusedWithoutACapability(t *testing.T) {
	missing := os.Getenv(envMissing)
	if missing == "" {
		t.Skip("run by TestUIDConfinementWithTheContainersCapabilities")
	}
	var why string
	for _, c := range harness.UIDCapabilities {
		if c.Name == missing {
			why = c.Why
		}
	}
	for _, mode := range []harness.Confinement{harness.ConfineUser, harness.ConfineAuto} {
		t.Run(string(mode), func(t *testing.T) {
			uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
			got, err := confinedAs(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "Fix it.", Branch: testBranch, AgentUID: uid}, mode)
			if err == nil || !strings.Contains(err.Error(), "CAP_"+missing+" (to "+why+")") {
				t.Fatalf("harness answered %v, want a refusal naming CAP_%s and what it is for", err, missing)
			}
			if got != "" {
				t.Fatalf("the agent ran: %q", got)
			}
		})
	}
}
