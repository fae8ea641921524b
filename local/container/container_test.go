package container

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testRuntime returns a Runtime, or skips (fails with
// GALLEY_REQUIRE_STANDINS=1) where podman or runc is missing.
func testRuntime(t *testing.T) *Runtime {
	t.Helper()
	r, err := New(WithDir(t.TempDir()))
	if err != nil {
		if os.Getenv("GALLEY_REQUIRE_STANDINS") == "1" {
			t.Fatalf("GALLEY_REQUIRE_STANDINS=1 and no container runtime: %v", err)
		}
		t.Skipf("no container runtime: %v", err)
	}
	return r
}

var (
	probeOnce sync.Once
	probeRef  string
	probeErr  error
)

// probeImage builds (once per test binary) an image holding only the
// static probe program (testdata/probe) as /probe, its entrypoint, with
// the environment PROBE_IMAGE=1 and working folder /.
func probeImage(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "galley-probe-")
		if err != nil {
			probeErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "probe")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/probe")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			probeErr = fmt.Errorf("go build probe: %v: %s", err, out)
			return
		}
		probeRef = "localhost/galley-container-probe:" + randHex(6)
		probeErr = BuildFromBinary(context.Background(), probeRef, bin, "/probe", map[string]string{"PROBE_IMAGE": "1"})
	})
	if probeErr != nil {
		t.Fatalf("probe image: %v", probeErr)
	}
	return probeRef
}

func TestMain(m *testing.M) {
	code := m.Run()
	if probeRef != "" {
		_ = exec.Command("podman", "rmi", "--force", probeRef).Run()
	}
	os.Exit(code)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// syncBuffer is an output sink that tests may read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// run starts spec, waits for it, removes it, and returns its exit code
// and output.
func run(t *testing.T, r *Runtime, spec Spec) (int, string) {
	t.Helper()
	out := &syncBuffer{}
	spec.Stdout, spec.Stderr = out, out
	if spec.Name == "" {
		spec.Name = "galley-test-" + randHex(6)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := r.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove(context.Background())
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// values reads the probe's "key=value" lines.
func values(out string) map[string][]string {
	m := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			m[k] = append(m[k], v)
		}
	}
	return m
}

func TestSpecIsApplied(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	caps, err := Capabilities(nil, []string{"AUDIT_WRITE", "FSETID", "MKNOD", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETPCAP", "SYS_CHROOT"})
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	code, out := run(t, r, Spec{
		Image: img, Command: []string{"status"}, User: "0:0", WorkingDir: "/mnt/x",
		Env:          map[string]string{"PLAIN": "a b=c", "MULTI": "line1\nline2", "PROBE_IMAGE": "overridden"},
		Capabilities: caps, CPUs: 0.5, MemoryMiB: 96,
		Mounts: []Mount{{Source: mnt, Target: "/mnt/x"}},
	})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	v := values(out)
	wantEff := fmt.Sprintf("%016x", Mask(caps))
	if got := v["CapEff"]; len(got) != 1 || got[0] != wantEff {
		t.Errorf("CapEff %v, want %s (%v)", got, wantEff, caps)
	}
	if got := v["CapBnd"]; len(got) != 1 || got[0] != wantEff {
		t.Errorf("CapBnd %v, want %s", got, wantEff)
	}
	if got := v["cwd"]; len(got) != 1 || got[0] != "/mnt/x" {
		t.Errorf("cwd %v", got)
	}
	env := strings.Join(v["env"], "\n")
	for _, want := range []string{"PLAIN=a b=c", `MULTI=line1\nline2`, "PROBE_IMAGE=overridden"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
	for _, k := range []string{"GALLEY_", "GOPATH=", "GOFLAGS"} {
		if strings.Contains(env, "\n"+k) || strings.HasPrefix(env, k) {
			t.Errorf("the host's %s reached the container:\n%s", k, env)
		}
	}
	if got := v["cgroup:/sys/fs/cgroup/memory/memory.limit_in_bytes"]; len(got) == 1 {
		if got[0] != strconv.Itoa(96<<20) {
			t.Errorf("memory limit %s, want %d", got[0], 96<<20)
		}
		q, p := v["cgroup:/sys/fs/cgroup/cpu/cpu.cfs_quota_us"], v["cgroup:/sys/fs/cgroup/cpu/cpu.cfs_period_us"]
		if len(q) != 1 || len(p) != 1 {
			t.Fatalf("no cpu quota files: %s", out)
		}
		qn, _ := strconv.Atoi(q[0])
		pn, _ := strconv.Atoi(p[0])
		if pn == 0 || qn*2 != pn {
			t.Errorf("cpu quota %s/%s, want half", q[0], p[0])
		}
	} else if got := v["cgroup:/sys/fs/cgroup/memory.max"]; len(got) != 1 || got[0] != strconv.Itoa(96<<20) {
		t.Errorf("no memory limit seen: %s", out)
	}
	if got := v["nofile"]; len(got) != 1 || got[0] != fmt.Sprintf("%d:%d", r.Nofile(), r.Nofile()) {
		t.Errorf("nofile %v, want %d", got, r.Nofile())
	}
	if got := v["rootfs"]; len(got) != 1 || got[0] != "writable" {
		t.Errorf("rootfs %v", got)
	}
	for _, e := range mustReadDir(t, r.dir) {
		if !strings.HasPrefix(e, "env-") {
			continue
		}
		t.Errorf("an environment file stayed behind: %s", e)
	}
}

func mustReadDir(t *testing.T, dir string) []string {
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestUserAndDefaults(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	code, out := run(t, r, Spec{Image: img, Command: []string{"status"}, User: "1234:2345", ReadOnlyRoot: true})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	v := values(out)
	if got := v["Uid"]; len(got) != 1 || got[0] != "1234" {
		t.Errorf("uid %v", got)
	}
	if got := v["Gid"]; len(got) != 1 || got[0] != "2345" {
		t.Errorf("gid %v", got)
	}
	// A non-root user keeps no effective capability, but the bounding set
	// is Docker's defaults.
	if got := v["CapBnd"]; len(got) != 1 || got[0] != fmt.Sprintf("%016x", Mask(DockerDefaults())) {
		t.Errorf("CapBnd %v, want Docker's defaults %016x", got, Mask(DockerDefaults()))
	}
	if got := v["CapEff"]; len(got) != 1 || got[0] != "0000000000000000" {
		t.Errorf("CapEff %v for uid 1234", got)
	}
	if got := v["cwd"]; len(got) != 1 || got[0] != "/" {
		t.Errorf("cwd %v", got)
	}
	if !strings.Contains(strings.Join(v["env"], "\n"), "PROBE_IMAGE=1") {
		t.Errorf("the image's environment is lost: %s", out)
	}
	if got := v["rootfs"]; len(got) != 1 || got[0] != "readonly" {
		t.Errorf("rootfs %v with ReadOnlyRoot", got)
	}
}

func TestExitCodeAndMountWrites(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	if code, out := run(t, r, Spec{Image: img, Command: []string{"exit", "7"}}); code != 7 {
		t.Errorf("exit %d, want 7: %s", code, out)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	code, out := run(t, r, Spec{Image: img, Command: []string{"write", "/data/f"}, User: "1500:1600",
		Mounts: []Mount{{Source: dir, Target: "/data"}}})
	if code != 0 || !strings.Contains(out, "write=ok uid=1500 gid=1600") {
		t.Errorf("write through the mount: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
		t.Errorf("the host does not see the file: %v", err)
	}
	code, out = run(t, r, Spec{Image: img, Command: []string{"write", "/data/g"},
		Mounts: []Mount{{Source: dir, Target: "/data", ReadOnly: true}}})
	if code == 0 || !strings.Contains(out, "write=error") {
		t.Errorf("a read-only mount was written: %d %s", code, out)
	}
}

// TestStopSignalsThenKills: Stop sends SIGTERM, and SIGKILL after the stop
// timeout to a process that ignores it.
func TestStopSignalsThenKills(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	for _, tc := range []struct {
		name string
		cmd  string
		init bool
		code int
	}{
		{"ignores SIGTERM", "term", false, 137},
		{"exits on SIGTERM", "term-exit", false, 3},
		{"ignores SIGTERM under init", "term", true, 137},
		{"exits on SIGTERM under init", "term-exit", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &syncBuffer{}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c, err := r.Start(ctx, Spec{Name: "galley-test-" + randHex(6), Image: img, Command: []string{tc.cmd},
				Init: tc.init, StopTimeout: time.Second, Stdout: out, Stderr: out})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Remove(context.Background())
			for !strings.Contains(out.String(), "ready") {
				select {
				case <-c.Done():
					t.Fatalf("exited before it was ready: %s", out)
				case <-ctx.Done():
					t.Fatalf("never ready: %s", out)
				case <-time.After(20 * time.Millisecond):
				}
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			code, err := c.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d: %s", code, tc.code, out)
			}
			if !strings.Contains(out.String(), "got terminated") {
				t.Errorf("SIGTERM did not reach the process first: %q", out)
			}
		})
	}
}

// TestInitReaps: with Init an orphan that exits is reaped; without it the
// command is PID 1 and the orphan stays a zombie.
func TestInitReaps(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	if code, out := run(t, r, Spec{Image: img, Command: []string{"orphan"}, Init: true}); code != 0 || !strings.Contains(out, "orphan=reaped") {
		t.Errorf("with init: %d %s", code, out)
	}
	if code, out := run(t, r, Spec{Image: img, Command: []string{"orphan"}}); code != 0 || !strings.Contains(out, "orphan=zombie") {
		t.Errorf("without init: %d %s", code, out)
	}
}

// TestEnvironmentNeverOnACommandLine: while the container runs, no process
// of the machine shows a value of its environment in its command line.
func TestEnvironmentNeverOnACommandLine(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	secret := "s3cr3t-" + randHex(8)
	out := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := r.Start(ctx, Spec{Name: "galley-test-" + randHex(6), Image: img, Command: []string{"term-exit"},
		Env: map[string]string{"SECRET": secret, "PEM": "a\n" + secret}, StopTimeout: time.Second, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove(context.Background())
	for !strings.Contains(out.String(), "ready") {
		select {
		case <-c.Done():
			t.Fatalf("exited: %s", out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s shows the secret: %q", p, b)
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCapabilitiesRule(t *testing.T) {
	for _, tc := range []struct {
		add, drop []string
		want      string
	}{
		{nil, nil, strings.Join(dockerDefaults, ",")},
		{[]string{"SYS_PTRACE"}, nil, strings.Join(append(DockerDefaults(), "SYS_PTRACE"), ",")},
		{[]string{"CHOWN", "kill"}, []string{"ALL"}, "CHOWN,KILL"},
		{[]string{"ALL"}, []string{"NET_RAW"}, "AUDIT_WRITE,CHOWN,DAC_OVERRIDE,FOWNER,FSETID,KILL,MKNOD,NET_BIND_SERVICE,SETFCAP,SETGID,SETPCAP,SETUID,SYS_CHROOT"},
		{nil, []string{"CAP_MKNOD", "NET_RAW", "AUDIT_WRITE", "FSETID", "NET_BIND_SERVICE", "SETFCAP", "SETPCAP", "SYS_CHROOT", "FOWNER"}, "CHOWN,DAC_OVERRIDE,KILL,SETGID,SETUID"},
	} {
		got, err := Capabilities(tc.add, tc.drop)
		if err != nil {
			t.Fatal(err)
		}
		if g := strings.Join(got, ","); g != strings.Join(sorted(tc.want), ",") {
			t.Errorf("add %v drop %v: %s, want %s", tc.add, tc.drop, g, tc.want)
		}
	}
	if _, err := Capabilities([]string{"SYS_WIZARD"}, nil); err == nil {
		t.Error("an unknown capability was accepted")
	}
	if m := Mask([]string{"CHOWN", "DAC_OVERRIDE", "KILL", "SETGID", "SETUID"}); m != 0xe3 {
		t.Errorf("mask %x, want e3", m)
	}
}

func sorted(csv string) []string {
	xs := strings.Split(csv, ",")
	slices.Sort(xs)
	return xs
}

// TestNetworkAdmitsOnlyAllowedPorts: from a container on a Network, a port
// listened on Gateway and allowed answers; one listened on Gateway but not
// allowed, and one on every interface, do not.
func TestNetworkAdmitsOnlyAllowedPorts(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	ctx := context.Background()
	n, err := r.NewNetwork(ctx, "galley-test-"+randHex(4))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	}()
	allowed, err := n.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer allowed.Close()
	closed, err := net.Listen("tcp", net.JoinHostPort(n.Gateway.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	anywhere, err := net.Listen("tcp", ":0") // as DynamoDB Local may
	if err != nil {
		t.Fatal(err)
	}
	defer anywhere.Close()
	for _, ln := range []net.Listener{allowed, closed, anywhere} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	port := func(ln net.Listener) string { return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) }
	gw := n.Gateway.String()
	want := map[string]string{
		"galley-host:" + port(allowed): "open",
		gw + ":" + port(closed):        "closed",
		gw + ":" + port(anywhere):      "closed",
	}
	args := []string{"dial"}
	for a := range want {
		args = append(args, a)
	}
	code, out := run(t, r, Spec{Image: img, Command: args, Network: n.Name, Hosts: map[string]string{"galley-host": gw}})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	v := values(out)
	for a, w := range want {
		if got := v["dial:"+a]; len(got) != 1 || got[0] != w {
			t.Errorf("%s: %v, want %s", a, got, w)
		}
	}
}

// TestUlimits: a Spec's limit replaces the runtime's of that name, and a
// hard limit above this process's own is refused naming it (runc would
// fail "error setting rlimit" at start, or a runtime with the capability
// would silently give more than the host does elsewhere).
func TestUlimits(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	// Soft equal to hard: the probe, a Go program, raises its soft limit
	// to the hard one at start.
	code, out := run(t, r, Spec{Image: img, Command: []string{"status"}, Ulimits: []Ulimit{{Name: "nofile", Soft: 2048, Hard: 2048}}})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if got := values(out)["nofile"]; len(got) != 1 || got[0] != "2048:2048" {
		t.Errorf("nofile %v, want 2048:2048", got)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Max == ^uint64(0) {
		t.Skipf("this process's nofile hard limit is unlimited (%v): nothing to exceed", err)
	}
	_, err := r.Start(context.Background(), Spec{Name: "galley-test-" + randHex(6), Image: img, Command: []string{"status"},
		Ulimits: []Ulimit{{Name: "nofile", Soft: rl.Max + 1, Hard: rl.Max + 1}}})
	if err == nil || !strings.Contains(err.Error(), "ulimit nofile hard limit") || !strings.Contains(err.Error(), fmt.Sprint(rl.Max)) {
		t.Errorf("a nofile limit above this process's hard limit: %v", err)
	}
}

// TestRootDirIsTheContainersOwn: RootDir is, on the host, the file system
// the container writes to outside its mounts (a file it wrote is there),
// one of its own (another container's has none of it), gone once the
// container is removed.
func TestRootDirIsTheContainersOwn(t *testing.T) {
	r := testRuntime(t)
	img := probeImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(cmd ...string) (*Container, *syncBuffer) {
		out := &syncBuffer{}
		c, err := r.Start(ctx, Spec{Name: "galley-test-" + randHex(6), Image: img, Command: cmd, StopTimeout: time.Second, Stdout: out, Stderr: out})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Remove(context.Background()) })
		for !strings.Contains(out.String(), "ready") {
			select {
			case <-c.Done():
				t.Fatalf("exited before it was ready: %s", out)
			case <-ctx.Done():
				t.Fatalf("never ready: %s", out)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return c, out
	}
	writer, out := start("write", "/own-file", "hold")
	if !strings.Contains(out.String(), "write=ok") {
		t.Fatalf("the container did not write: %s", out)
	}
	other, _ := start("term-exit")
	root, err := writer.RootDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "own-file")); err != nil || string(b) != "x" {
		t.Errorf("the host reads %q (%v) at %s, what the container wrote", b, err, filepath.Join(root, "own-file"))
	}
	otherRoot, err := other.RootDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if otherRoot == root {
		t.Fatalf("two containers have one root folder %s", root)
	}
	if _, err := os.Stat(filepath.Join(otherRoot, "probe")); err != nil {
		t.Errorf("the other container's root folder does not hold its image: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(otherRoot, "own-file")); err == nil {
		t.Error("another container's root folder holds what the first wrote")
	}
	if err := writer.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "own-file")); err == nil {
		t.Errorf("%s is still there once the container was removed", root)
	}
}
