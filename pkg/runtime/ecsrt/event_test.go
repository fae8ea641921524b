package ecsrt_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
)

// The samples in testdata/events follow AWS's documented "ECS Task State
// Change" format (docs/runtime-ecs.md): one worker's task through its
// life, and the other ways a task ends.

func readEvent(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseTaskStateChange(t *testing.T) {
	const handle = "w-3f9a1c0d2b4e6f8a0c1e"
	tests := []struct {
		file              string
		handle            string
		status, stopCode  string
		version           int64
		liveness          service.Liveness
		exitCode          *int
		stopped, startedZ bool
	}{
		{file: "worker-1-provisioning.json", handle: handle, status: "PROVISIONING", version: 1, liveness: service.LivenessLive, startedZ: true},
		{file: "worker-2-pending.json", handle: handle, status: "PENDING", version: 2, liveness: service.LivenessLive, startedZ: true},
		{file: "worker-3-running.json", handle: handle, status: "RUNNING", version: 3, liveness: service.LivenessLive},
		{file: "worker-4-deprovisioning.json", handle: handle, status: "DEPROVISIONING", stopCode: ecsrt.StopEssentialContainerExited,
			version: 5, liveness: service.LivenessExited, exitCode: ptr(0)},
		{file: "worker-5-stopped.json", handle: handle, status: "STOPPED", stopCode: ecsrt.StopEssentialContainerExited,
			version: 6, liveness: service.LivenessExited, exitCode: ptr(0), stopped: true},
		{file: "cancelled-stopped.json", handle: handle, status: "STOPPED", stopCode: ecsrt.StopUserInitiated,
			version: 7, liveness: service.LivenessExited, exitCode: ptr(137), stopped: true},
		{file: "failed-to-start.json", handle: handle, status: "STOPPED", stopCode: ecsrt.StopTaskFailedToStart,
			version: 4, liveness: service.LivenessExited, stopped: true, startedZ: true},
		// Desired STOPPED, still running: live until it goes down.
		{file: "spot-interrupted.json", handle: handle, status: "RUNNING", stopCode: ecsrt.StopSpotInterruption,
			version: 4, liveness: service.LivenessLive},
		{file: "hashed-startedby.json", handle: "worker.with.dots/and a very long name beyond thirty", status: "RUNNING",
			version: 3, liveness: service.LivenessLive},
		{file: "not-galley.json", handle: "", status: "RUNNING", version: 3, liveness: service.LivenessLive},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ecsrt.ParseTaskStateChange(readEvent(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if c.Handle != tc.handle || c.LastStatus != tc.status || c.StopCode != tc.stopCode || c.Version != tc.version {
				t.Errorf("change = handle %q status %s stopCode %q version %d; want %q %s %q %d",
					c.Handle, c.LastStatus, c.StopCode, c.Version, tc.handle, tc.status, tc.stopCode, tc.version)
			}
			if c.Liveness() != tc.liveness || c.Stopped() != tc.stopped {
				t.Errorf("liveness %d stopped %v, want %d %v", c.Liveness(), c.Stopped(), tc.liveness, tc.stopped)
			}
			if c.StartedAt.IsZero() != tc.startedZ {
				t.Errorf("startedAt = %v", c.StartedAt)
			}
			ct, ok := c.Container("worker")
			if !ok {
				t.Fatal("no worker container")
			}
			if (ct.ExitCode == nil) != (tc.exitCode == nil) || (ct.ExitCode != nil && *ct.ExitCode != *tc.exitCode) {
				t.Errorf("exit code = %v, want %v", deref(ct.ExitCode), deref(tc.exitCode))
			}
			if c.TaskARN == "" || c.ClusterARN == "" || c.EventID == "" || c.Time.IsZero() || c.CreatedAt.IsZero() || c.UpdatedAt.IsZero() {
				t.Errorf("missing identity or times: %+v", c)
			}
		})
	}
}

func ptr(n int) *int { return &n }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestParseTaskStateChangeRefuses(t *testing.T) {
	tests := []struct {
		name string
		body []byte
		want galleyerr.Kind
	}{
		{"another event", readEvent(t, "container-instance-change.json"), galleyerr.Invalid},
		{"not JSON", []byte(`{"detail-type": `), galleyerr.Malformed},
		{"no version", []byte(`{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"taskArn":"a","lastStatus":"RUNNING"}}`), galleyerr.Malformed},
		{"detail not an object", []byte(`{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":[1]}`), galleyerr.Malformed},
		{"bad time", []byte(`{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"taskArn":"a","lastStatus":"RUNNING","version":1,"createdAt":"yesterday"}}`), galleyerr.Malformed},
	}
	for _, tc := range tests {
		if _, err := ecsrt.ParseTaskStateChange(tc.body); galleyerr.KindOf(err) != tc.want {
			t.Errorf("%s: err = %v, want kind %s", tc.name, err, tc.want)
		}
	}
}

// taskView is what a consumer keeps of a task: the change of the highest
// version it applied.
type taskView struct {
	applied int
	last    ecsrt.TaskChange
}

func (v *taskView) apply(c ecsrt.TaskChange) {
	if !c.Supersedes(v.last.Version) {
		return
	}
	v.applied++
	v.last = c
}

func TestEventsOutOfOrder(t *testing.T) {
	// EventBridge delivers at least once and in no particular order: late,
	// twice, interleaved. The versions put them back in order.
	deliveries := []string{
		"worker-3-running.json", "worker-1-provisioning.json", "worker-5-stopped.json",
		"worker-5-stopped.json", "worker-4-deprovisioning.json", "worker-2-pending.json", "worker-3-running.json",
	}
	var v taskView
	for _, f := range deliveries {
		c, err := ecsrt.ParseTaskStateChange(readEvent(t, f))
		if err != nil {
			t.Fatal(err)
		}
		v.apply(c)
	}
	if v.applied != 2 || !v.last.Stopped() || v.last.Version != 6 {
		t.Errorf("applied %d changes, last %s v%d; want 2, STOPPED v6", v.applied, v.last.LastStatus, v.last.Version)
	}
	// The same stream in order applies each change once.
	var inOrder taskView
	for _, f := range []string{"worker-1-provisioning.json", "worker-2-pending.json", "worker-3-running.json",
		"worker-3-running.json", "worker-4-deprovisioning.json", "worker-5-stopped.json"} {
		c, _ := ecsrt.ParseTaskStateChange(readEvent(t, f))
		inOrder.apply(c)
	}
	if inOrder.applied != 5 || inOrder.last.Version != 6 {
		t.Errorf("in order: applied %d, last v%d; want 5, v6", inOrder.applied, inOrder.last.Version)
	}
}

func TestLivenessOf(t *testing.T) {
	for status, want := range map[string]service.Liveness{
		"PROVISIONING": service.LivenessLive, "PENDING": service.LivenessLive, "ACTIVATING": service.LivenessLive,
		"RUNNING": service.LivenessLive, "DEACTIVATING": service.LivenessExited, "STOPPING": service.LivenessExited,
		"DEPROVISIONING": service.LivenessExited, "STOPPED": service.LivenessExited,
		"": service.LivenessUnknown, "DELETED": service.LivenessUnknown,
	} {
		if got := ecsrt.LivenessOf(status); got != want {
			t.Errorf("LivenessOf(%q) = %d, want %d", status, got, want)
		}
	}
}
