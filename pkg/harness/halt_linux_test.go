package harness

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/workerapi"
)

// envVforkHolder makes this test binary, started again, a vfork holder
// (holdInVfork) under the uid it names (0: root's).
const envVforkHolder = "GALLEY_TEST_VFORK_HOLDER"

func init() {
	uid, err := strconv.Atoi(os.Getenv(envVforkHolder))
	if err != nil {
		return
	}
	if uid > 0 {
		if syscall.Setgroups(nil) != nil || syscall.Setgid(uid) != nil || syscall.Setuid(uid) != nil {
			os.Exit(3)
		}
	}
	var go1 [1]byte
	if _, err := os.Stdin.Read(go1[:]); err != nil {
		os.Exit(4)
	}
	holdInVfork()
}

// holdInVfork makes a child with clone(CLONE_VFORK) and waits for it: the
// wait dash makes for every command it runs, uninterruptible (state D)
// but killable, until the child execs or exits. The child stops itself
// first, as a SIGSTOP landing between a vfork and its exec stops it, and
// so the wait lasts until someone kills them. Without CLONE_VM the child
// is a copy with one thread and makes raw system calls only.
func holdInVfork() {
	r, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, syscall.CLONE_VFORK|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		os.Exit(5)
	}
	if r == 0 {
		pid, _, _ := syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
		syscall.RawSyscall(syscall.SYS_KILL, pid, uintptr(syscall.SIGSTOP), 0)
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	os.Exit(0) // the child ran on: the test sees the holder end early
}

// startVforkHolder starts a vfork holder under uid; before it forks,
// place (when not nil) is given its pid. It answers the holder and its
// child once the holder waits in D and the child is stopped.
func startVforkHolder(t *testing.T, uid int, place func(pid int) error) (holder *exec.Cmd, child int) {
	t.Helper()
	holder = exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), envVforkHolder+"="+strconv.Itoa(uid))
	in, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- holder.Wait() }()
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		<-exited
	})
	pid := holder.Process.Pid
	if place != nil {
		if err := place(pid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(in, "go"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("the vfork holder ended before it held (%v)", err)
		default:
		}
		child = childOf(pid)
		hs, _ := readStatus(pid)
		cs, _ := readStatus(child)
		if child > 0 && hs.state == 'D' && cs.state == 'T' {
			t.Logf("holder %d waits in vfork (D), its child %d is stopped (T)", pid, child)
			return holder, child
		}
		if time.Now().After(deadline) {
			t.Fatalf("the vfork holder %d (state %c) and its child %d (state %c) did not reach D and T", pid, hs.state, child, cs.state)
		}
	}
}

// childOf gives pid's first child (its only one here), or 0.
func childOf(pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	c, _ := strconv.Atoi(f[0])
	return c
}

// gone reports that pid runs no more (gone, or a zombie).
func gone(pid int) bool {
	st, ok := readStatus(pid)
	return !ok || st.dead()
}

// TestEndingAVforkWaiter: a process waiting in vfork for a child stopped
// before its exec (dash runs each command so, and on a busy machine the
// harness's SIGSTOP lands in that window) never shows T, since a D wait
// takes no SIGSTOP. The harness ends it and its child anyway, under uid
// (endUID) and in a cgroup (agentGroup.end), well before its patience
// runs out; before, both waited for the T that never came.
func TestEndingAVforkWaiter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to switch users and make cgroups")
	}
	t.Run("uid", func(t *testing.T) {
		uid := int(workerapi.AgentUIDBase + rand.N(uint32(1_000_000)))
		holder, child := startVforkHolder(t, uid, nil)
		ctx, cancel := context.WithTimeout(t.Context(), endPatience)
		defer cancel()
		if err := endUID(ctx, uid); err != nil {
			t.Fatalf("ending uid %d: %v", uid, err)
		}
		if left := procsOf(uid); len(left) > 0 || !gone(holder.Process.Pid) || !gone(child) {
			t.Fatalf("processes of uid %d outlived ending it: %v", uid, left)
		}
	})
	t.Run("cgroup", func(t *testing.T) {
		if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err != nil {
			t.Skip("no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
		}
		g, err := newAgentGroup("galley-agent-vfork-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(rand.N(1_000_000)), 64, 512<<20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.remove() })
		holder, child := startVforkHolder(t, 0, g.add)
		if !g.inGroup(child) {
			t.Fatalf("the holder's child %d is not in the group", child)
		}
		ctx, cancel := context.WithTimeout(t.Context(), endPatience)
		defer cancel()
		if err := g.end(ctx); err != nil {
			t.Fatalf("ending the group: %v", err)
		}
		if !gone(holder.Process.Pid) || !gone(child) {
			t.Fatalf("the holder %d or its child %d outlived ending the group", holder.Process.Pid, child)
		}
	})
}
