//go:build unix

package ecsstandin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/local/container"
)

// containerPatience bounds waits on containers: podman on a busy machine
// takes seconds per step. A guard against hangs, not a speed check.
const containerPatience = 5 * time.Minute

// probeRef is the ECS image reference that maps to the probe image.
const probeRef = "000000000000.dkr.ecr.us-east-1.amazonaws.com/probe:test"

var (
	probeOnce sync.Once
	probeImg  string
	probeErr  error
	ctrRT     *container.Runtime
)

// containerRuntime returns the runtime and the local probe image (the
// container package's testdata/probe, built once), or skips where there is
// no runtime (fails with GALLEY_REQUIRE_STANDINS=1).
func containerRuntime(t *testing.T) (*container.Runtime, string) {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ecsstandin-probe-")
		if err != nil {
			probeErr = err
			return
		}
		if ctrRT, probeErr = container.New(container.WithDir(filepath.Join(dir, "rt"))); probeErr != nil {
			return
		}
		bin := filepath.Join(dir, "probe")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "../container/testdata/probe")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			probeErr = fmt.Errorf("go build probe: %v: %s", err, out)
			return
		}
		probeImg = "localhost/ecsstandin-probe:test"
		probeErr = container.BuildFromBinary(context.Background(), probeImg, bin, "/probe", nil)
	})
	if probeErr != nil {
		if os.Getenv("GALLEY_REQUIRE_STANDINS") != "1" && ctrRT == nil {
			t.Skipf("no container runtime: %v", probeErr)
		}
		t.Fatalf("container runtime: %v", probeErr)
	}
	return ctrRT, probeImg
}

// probeDef is a Fargate task definition of the probe image, as the
// template's worker: Docker's defaults dropped to the harness's five,
// an init process, the workspaces file system through an access point.
func probeDef(cmd ...string) TaskDefinition {
	td := workerDef()
	c := &td.ContainerDefinitions[0]
	c.Image, c.Command, c.WorkingDirectory, c.User = probeRef, cmd, "/mnt/workspaces", "0"
	c.Environment = append(c.Environment, KeyValue{"PLAIN", "value with spaces"})
	c.LinuxParameters = &LinuxParameters{InitProcessEnabled: aws.Bool(true)}
	c.LinuxParameters.Capabilities = &struct {
		Add  []string `json:"add,omitempty"`
		Drop []string `json:"drop,omitempty"`
	}{Drop: []string{"AUDIT_WRITE", "FOWNER", "FSETID", "MKNOD", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETPCAP", "SYS_CHROOT"}}
	c.ReadonlyRootFilesystem = aws.Bool(true)
	c.StopTimeout = aws.Int(1)
	td.CPU, td.Memory = "256", "512"
	td.Volumes = []Volume{{Name: "workspaces", EFSVolumeConfiguration: &EFSVolume{FileSystemID: "fs-0123", TransitEncryption: "ENABLED",
		AuthorizationConfig: &struct {
			AccessPointID string `json:"accessPointId,omitempty"`
			IAM           string `json:"iam,omitempty"`
		}{AccessPointID: "fsap-1", IAM: "ENABLED"}}}}
	c.MountPoints = []MountPoint{{SourceVolume: "workspaces", ContainerPath: "/mnt/workspaces"}}
	return td
}

func containerHarness(t *testing.T, td TaskDefinition, fsDir string) *harness {
	rt, img := containerRuntime(t)
	return newHarnessDef(t, td, WithContainers(rt, ContainerNetwork{}),
		WithContainerImage(func(r string) bool { return r == probeRef }, ContainerImage{Ref: img, Env: map[string]string{"MACHINE_ADDED": "1"}}),
		WithFileSystem("fs-0123", fsDir),
		WithAccessPoint("fsap-1", AccessPoint{FileSystemID: "fs-0123", RootDirectory: "/workspaces",
			CreationInfo: &CreationInfo{OwnerUID: 0, OwnerGID: 0, Permissions: 0o711}}))
}

func awaitStopped(t *testing.T, h *harness, arn string) TaskInfo {
	t.Helper()
	deadline := time.Now().Add(containerPatience)
	for {
		ti := h.task(t, arn)
		if ti.LastStatus == statusStopped {
			return ti
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s after %v", arn, ti.LastStatus, containerPatience)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func probeValues(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && k != "env" {
			m[k] = v
		}
	}
	return m
}

// TestContainerTaskAppliesTheDefinition: a task of the probe image runs as
// a container with its definition applied: the capability set after the
// drops, the user, working folder, environment, cpu and memory of the
// task size, a read-only root, its ulimits, and the access point's root as
// the mount.
func TestContainerTaskAppliesTheDefinition(t *testing.T) {
	fsDir := t.TempDir()
	td := probeDef("status")
	// Soft equal to hard: the probe, a Go program, raises its soft limit
	// to the hard one at start.
	td.ContainerDefinitions[0].Ulimits = []Ulimit{{Name: "nofile", SoftLimit: 2048, HardLimit: 2048}}
	h := containerHarness(t, td, fsDir)
	out, err := h.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	ti := awaitStopped(t, h, arn)
	logb, _ := h.srv.ContainerLog(ti.ID)
	if ti.ExitCode == nil || *ti.ExitCode != 0 || ti.StopCode != "EssentialContainerExited" {
		t.Fatalf("task = %+v\n%s", ti, logb)
	}
	v := probeValues(string(logb))
	want := fmt.Sprintf("%016x", container.Mask([]string{"CHOWN", "DAC_OVERRIDE", "KILL", "SETGID", "SETUID"}))
	if v["CapEff"] != want || v["CapBnd"] != want {
		t.Errorf("CapEff %s CapBnd %s, want %s", v["CapEff"], v["CapBnd"], want)
	}
	if v["Uid"] != "0" || v["cwd"] != "/mnt/workspaces" || v["rootfs"] != "readonly" {
		t.Errorf("uid %s cwd %s rootfs %s", v["Uid"], v["cwd"], v["rootfs"])
	}
	if v["nofile"] != "2048:2048" {
		t.Errorf("nofile %q, want the definition's 2048:2048", v["nofile"])
	}
	m, ok := v["cgroup:/sys/fs/cgroup/memory/memory.limit_in_bytes"]
	if !ok {
		m = v["cgroup:/sys/fs/cgroup/memory.max"]
	}
	if m != strconv.Itoa(512<<20) {
		t.Errorf("memory limit %q, want 512 MiB", m)
	}
	if q, ok := v["cgroup:/sys/fs/cgroup/cpu/cpu.cfs_quota_us"]; ok {
		if p := v["cgroup:/sys/fs/cgroup/cpu/cpu.cfs_period_us"]; atoi(q)*4 != atoi(p) {
			t.Errorf("cpu quota %s of %s, want a quarter", q, p)
		}
	}
	// Exactly the init under the probe: the probe is not PID 1.
	if v["pid"] == "1" {
		t.Error("initProcessEnabled: the command ran as PID 1")
	}
	for _, kv := range []string{"PLAIN=value with spaces", "GALLEY_HOUSE=house-a", "MACHINE_ADDED=1", "AWS_EXECUTION_ENV=AWS_ECS_FARGATE"} {
		if !strings.Contains(string(logb), "env="+kv+"\n") {
			t.Errorf("environment lacks %s:\n%s", kv, logb)
		}
	}
	fi, err := os.Stat(filepath.Join(fsDir, "workspaces"))
	if err != nil {
		t.Fatalf("the access point's root was not made: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o711 || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("access point root %v %d:%d, want 0711 0:0", fi.Mode(), st.Uid, st.Gid)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestContainerTaskWritesThroughTheAccessPoint: the mount shows the access
// point's root, not the file system's.
func TestContainerTaskWritesThroughTheAccessPoint(t *testing.T) {
	fsDir := t.TempDir()
	h := containerHarness(t, probeDef("write", "/mnt/workspaces/made-by-task"), fsDir)
	out, err := h.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
	if err != nil {
		t.Fatal(err)
	}
	ti := awaitStopped(t, h, aws.ToString(out.Tasks[0].TaskArn))
	logb, _ := h.srv.ContainerLog(ti.ID)
	if ti.ExitCode == nil || *ti.ExitCode != 0 {
		t.Fatalf("task = %+v\n%s", ti, logb)
	}
	if _, err := os.Stat(filepath.Join(fsDir, "workspaces", "made-by-task")); err != nil {
		t.Errorf("the file is not below the access point's root: %v", err)
	}
}

// TestContainerStopTask: StopTask sends SIGTERM, and SIGKILL after the
// definition's stopTimeout to a command that ignores it.
func TestContainerStopTask(t *testing.T) {
	h := containerHarness(t, probeDef("term"), t.TempDir())
	out, err := h.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	deadline := time.Now().Add(containerPatience)
	for {
		ti := h.task(t, arn)
		logb, _ := h.srv.ContainerLog(ti.ID)
		if ti.LastStatus == statusRunning && strings.Contains(string(logb), "ready") {
			break
		}
		if ti.LastStatus == statusStopped || time.Now().After(deadline) {
			t.Fatalf("never running and ready: %+v\n%s", ti, logb)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := h.client().StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String("galley"), Task: aws.String(arn)}); err != nil {
		t.Fatal(err)
	}
	ti := awaitStopped(t, h, arn)
	logb, _ := h.srv.ContainerLog(ti.ID)
	if ti.ExitCode == nil || *ti.ExitCode != 137 || ti.StopCode != "UserInitiated" {
		t.Errorf("task = %+v, want exit 137 (SIGKILL after the stop timeout)", ti)
	}
	if !strings.Contains(string(logb), "got terminated") {
		t.Errorf("SIGTERM did not come first: %s", logb)
	}
}

// TestFargateRefusesLinuxParameters: what Fargate refuses of a task
// definition, RegisterTaskDefinition refuses; a definition only EC2 can
// run is refused at RunTask with launch type FARGATE.
func TestFargateRefusesLinuxParameters(t *testing.T) {
	h := newHarness(t)
	client := h.client()
	ctx := context.Background()
	for name, mut := range map[string]func(*types.LinuxParameters){
		"add SYS_ADMIN": func(lp *types.LinuxParameters) {
			lp.Capabilities = &types.KernelCapabilities{Add: []string{"SYS_ADMIN"}}
		},
		"add FOWNER":       func(lp *types.LinuxParameters) { lp.Capabilities = &types.KernelCapabilities{Add: []string{"FOWNER"}} },
		"devices":          func(lp *types.LinuxParameters) { lp.Devices = []types.Device{{HostPath: aws.String("/dev/fuse")}} },
		"sharedMemorySize": func(lp *types.LinuxParameters) { lp.SharedMemorySize = aws.Int32(64) },
		"tmpfs":            func(lp *types.LinuxParameters) { lp.Tmpfs = []types.Tmpfs{{ContainerPath: aws.String("/t"), Size: 8}} },
		"maxSwap":          func(lp *types.LinuxParameters) { lp.MaxSwap = aws.Int32(0) },
		"swappiness":       func(lp *types.LinuxParameters) { lp.Swappiness = aws.Int32(0) },
		"unknown cap": func(lp *types.LinuxParameters) {
			lp.Capabilities = &types.KernelCapabilities{Drop: []string{"WIZARDRY"}}
		},
		"drop ALL, add one": func(lp *types.LinuxParameters) {
			lp.Capabilities = &types.KernelCapabilities{Drop: []string{"ALL"}, Add: []string{"CHOWN"}}
		},
	} {
		_, err := client.RegisterTaskDefinition(ctx, sdkDef(func(c *types.ContainerDefinition, _ *ecs.RegisterTaskDefinitionInput) {
			c.LinuxParameters = &types.LinuxParameters{}
			mut(c.LinuxParameters)
		}))
		if code, msg := apiCode(err); code != "ClientException" {
			t.Errorf("%s: %v, want ClientException", name, err)
		} else if strings.HasPrefix(name, "add ") && !strings.Contains(msg, "only support adding the SYS_PTRACE") {
			t.Errorf("%s: message %q", name, msg)
		}
	}
	if _, err := client.RegisterTaskDefinition(ctx, sdkDef(func(c *types.ContainerDefinition, _ *ecs.RegisterTaskDefinitionInput) {
		c.LinuxParameters = &types.LinuxParameters{InitProcessEnabled: aws.Bool(true),
			Capabilities: &types.KernelCapabilities{Add: []string{"SYS_PTRACE"}, Drop: []string{"NET_RAW"}}}
	})); err != nil {
		t.Errorf("Fargate takes SYS_PTRACE: %v", err)
	}
	// Registered for EC2 only, then run on Fargate.
	in := sdkDef(func(c *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) {
		c.LinuxParameters = &types.LinuxParameters{Capabilities: &types.KernelCapabilities{Add: []string{"SYS_ADMIN"}}}
		in.RequiresCompatibilities = nil
		in.Family = aws.String("ec2-only")
	})
	if _, err := client.RegisterTaskDefinition(ctx, in); err != nil {
		t.Fatalf("EC2 takes SYS_ADMIN: %v", err)
	}
	_, err := client.RunTask(ctx, runInput("ec2-only", "galley"))
	if code, msg := apiCode(err); code != "InvalidParameterException" || !strings.Contains(msg, "does not support launch_type FARGATE") {
		t.Errorf("RunTask of an EC2-only definition on Fargate: %v", err)
	}
}

// TestContainerTaskOwnStorage: what a container task writes outside its
// mounts is in its own storage, as a Fargate task's ephemeral storage: the
// host sees it at the task's Workspace (GALLEY_WORKSPACE, through
// HostPath) while the task runs, another task of the same definition does
// not have it, and it is gone once the task stopped.
func TestContainerTaskOwnStorage(t *testing.T) {
	td := probeDef("write", "/workspace", "hold")
	c := &td.ContainerDefinitions[0]
	c.ReadonlyRootFilesystem = nil // the worker's: the worktree is in its own storage
	c.WorkingDirectory = "/"
	h := containerHarness(t, td, t.TempDir())
	running := func(arn string) TaskInfo {
		t.Helper()
		for deadline := time.Now().Add(containerPatience); ; time.Sleep(50 * time.Millisecond) {
			ti := h.task(t, arn)
			logb, _ := h.srv.ContainerLog(ti.ID)
			if ti.LastStatus == statusRunning && strings.Contains(string(logb), "ready") {
				return ti
			}
			if ti.LastStatus == statusStopped || time.Now().After(deadline) {
				t.Fatalf("never running and ready: %+v\n%s", ti, logb)
			}
		}
	}
	var tasks []TaskInfo
	for range 2 {
		out, err := h.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, running(aws.ToString(out.Tasks[0].TaskArn)))
	}
	first, second := tasks[0], tasks[1]
	if first.Workspace == "" || first.Workspace == second.Workspace {
		t.Fatalf("the tasks' workspaces on the host: %q and %q, want one each", first.Workspace, second.Workspace)
	}
	if got := h.srv.HostPath(first.ID, "/workspace"); got != first.Workspace {
		t.Errorf("HostPath of GALLEY_WORKSPACE = %q, want the task's Workspace %q", got, first.Workspace)
	}
	if b, err := os.ReadFile(first.Workspace); err != nil || string(b) != "x" {
		t.Fatalf("the host reads %q (%v) where the task wrote", b, err)
	}
	// Each task wrote its own; what the host puts in one task's storage
	// is not in the other's.
	if err := os.WriteFile(filepath.Join(filepath.Dir(first.Workspace), "from-host"), []byte("first's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(second.Workspace), "from-host")); err == nil {
		t.Error("a file of the first task's storage is in the second's")
	}
	if _, err := h.client().StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String("galley"), Task: aws.String(first.ARN)}); err != nil {
		t.Fatal(err)
	}
	awaitStopped(t, h, first.ARN)
	for deadline := time.Now().Add(containerPatience); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Lstat(first.Workspace); err != nil {
			break // the container removed, its storage with it
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped task's storage is still at %s", first.Workspace)
		}
	}
	if _, err := os.Stat(second.Workspace); err != nil {
		t.Errorf("the running task's storage went with the other's: %v", err)
	}
}
