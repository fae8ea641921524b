package harness_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/workerapi"
)

// A CLI the agent's uid cannot run (installed in a folder closed to other
// users) is a launch that fails with that reason, naming the folder, in
// the exit report the coordinator reads; the agent never starts (issue 28,
// item 8). The folder itself is closed: a closed folder above it is one
// the agent's own view opens (TestClosedFoldersAboveAreOpenedInTheView).
func TestUnrunnableCLIFailsTheLaunchWithItsReason(t *testing.T) {
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Skip(why)
	}
	closed := filepath.Join(t.TempDir(), "clis")
	if err := os.MkdirAll(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(closed, "claude"), []byte("#!/bin/sh\necho started\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
	d := shellDriver{script: "echo started", needs: harness.AgentNeeds{CLI: "claude"}}
	p, err := confinedWithConfig(t, workerapi.Self{Handle: "w-cli-" + strconv.Itoa(int(uid)), Run: "run-1", Brief: "x", Branch: testBranch, AgentUID: uid},
		harness.ConfineUser, "shell", d, func(c *harness.Config) { c.AgentBinDir = closed })
	if err == nil {
		t.Fatal("the harness started an agent whose CLI its uid cannot run")
	}
	s := p.fake.Snapshot()
	if len(s.Calls) != 1 || s.Calls[0].Exited == nil {
		t.Fatalf("calls = %+v, want only the exit report", s.Calls)
	}
	reason := s.Calls[0].Exited.Reason
	if !strings.Contains(reason, "cannot run the claude CLI at "+filepath.Join(closed, "claude")) ||
		!strings.Contains(reason, filepath.Dir(closed)) || !strings.Contains(reason, "closed to other users") {
		t.Errorf("the exit's reason does not say why the CLI cannot run: %q", reason)
	}
}
