package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// uidProc is a process of the agent's uid, as /proc shows it.
type uidProc struct {
	pid    int
	halted bool // it runs nothing of its own until killed (procStatus.halted)
}

// procStatus is what /proc/<pid>/status says of a process.
type procStatus struct {
	state       byte      // the State letter: R, S, D, T, t, Z, X…
	uids        [3]string // real, effective, saved
	stopPending bool      // a SIGSTOP is queued and not yet taken
}

// sigstopBit is SIGSTOP's bit in the SigPnd and ShdPnd masks (signal n is
// bit n-1).
const sigstopBit = 1 << (unix.SIGSTOP - 1)

// readStatus reads pid's /proc status; false when pid is gone.
func readStatus(pid int) (procStatus, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procStatus{}, false
	}
	var st procStatus
	for _, line := range strings.Split(string(b), "\n") {
		key, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch key {
		case "State":
			if v != "" {
				st.state = v[0]
			}
		case "Uid":
			copy(st.uids[:], strings.Fields(v))
		case "SigPnd", "ShdPnd":
			if m, err := strconv.ParseUint(v, 16, 64); err == nil && m&sigstopBit != 0 {
				st.stopPending = true
			}
		}
	}
	return st, st.state != 0
}

// dead reports a zombie or a process being reaped: it runs nothing.
func (st procStatus) dead() bool { return st.state == 'Z' || st.state == 'X' }

// halted reports a process that runs nothing of its own until it is
// killed: stopped (T, t), or with a SIGSTOP queued, which it takes before
// it runs another instruction of its own. The second is not a nicety: a
// process in an uninterruptible wait (D) does not take a SIGSTOP until the
// wait ends, and a parent waiting in vfork (as dash runs every command)
// whose child was stopped before its exec waits in D until that child
// runs again, which is never once the child is stopped too. Waiting for it
// to show T would wait for ever; SIGKILL ends that wait.
func (st procStatus) halted() bool {
	return st.state == 'T' || st.state == 't' || st.stopPending
}

// procsOf lists the processes (not threads, not zombies) whose real,
// effective or saved uid is uid.
func procsOf(uid int) []uidProc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []uidProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procOfUID(pid, uid); ok {
			out = append(out, uidProc{pid: pid, halted: st.halted()})
		}
	}
	return out
}

// procOfUID reports whether pid is a live (not zombie) process of uid, and
// its status.
func procOfUID(pid, uid int) (procStatus, bool) {
	st, ok := readStatus(pid)
	if !ok || st.dead() {
		return procStatus{}, false
	}
	for _, u := range st.uids {
		if u == strconv.Itoa(uid) {
			return st, true
		}
	}
	return procStatus{}, false
}

// signalUID sends sig to pid if it still is a process of uid: through a
// pidfd, so that a pid reused between the scan and the signal is never
// signalled.
func signalUID(pid, uid int, sig unix.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			if _, ok := procOfUID(pid, uid); ok {
				_ = unix.Kill(pid, sig)
			}
		}
		return
	}
	defer unix.Close(fd)
	// The pidfd holds the process: while it lives its pid is not reused,
	// so this reads the process just opened.
	if _, ok := procOfUID(pid, uid); ok {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// endUID ends every process of uid from outside it (the harness, another
// uid, with CAP_KILL): it stops them all with SIGSTOP, scanning again until
// every one it sees is halted (a halted process forks nothing, so a
// process racing to fork new pids cannot outrun it), then kills them with
// SIGKILL and waits until /proc shows none (zombies, which run nothing, are
// their parents' to reap). It answers an error when some remain when ctx
// ends.
func endUID(ctx context.Context, uid int) error {
	if uid <= 0 {
		return errors.New("refusing to end the processes of uid " + strconv.Itoa(uid))
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		procs := procsOf(uid)
		running := 0
		for _, p := range procs {
			if !p.halted {
				running++
				signalUID(p.pid, uid, unix.SIGSTOP)
			}
		}
		if running == 0 {
			break
		}
		if sleepCtx(ctx, delay) != nil {
			return fmt.Errorf("the agent's processes (uid %d) could not all be stopped: %d still ran", uid, running)
		}
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		procs := procsOf(uid)
		if len(procs) == 0 {
			return nil
		}
		for _, p := range procs {
			signalUID(p.pid, uid, unix.SIGKILL)
		}
		if sleepCtx(ctx, delay) != nil {
			return fmt.Errorf("the agent's processes (uid %d) could not all be killed: %d remain", uid, len(procsOf(uid)))
		}
	}
}

// threadsOf counts the threads whose real uid is uid: what RLIMIT_NPROC
// counts.
func threadsOf(uid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real string
		threads := 0
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real = f[0]
				}
			}
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if real == strconv.Itoa(uid) {
			n += threads
		}
	}
	return n
}

// setNproc sets this process's RLIMIT_NPROC, soft and hard: lowering it
// needs no privilege, and the agent cannot raise it again.
func setNproc(n uint64) error {
	return unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n})
}
