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
	pid     int
	stopped bool // state T or t: it runs nothing until killed
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
			out = append(out, uidProc{pid: pid, stopped: st == "T" || st == "t"})
		}
	}
	return out
}

// procOfUID reports whether pid is a live (not zombie) process of uid, and
// its state letter.
func procOfUID(pid, uid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", false
	}
	var state string
	mine := false
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			state = strings.TrimSpace(v)
			if state != "" {
				state = state[:1]
			}
		}
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(v)
			for _, u := range f[:min(3, len(f))] {
				if u == strconv.Itoa(uid) {
					mine = true
				}
			}
		}
	}
	if !mine || state == "Z" || state == "X" || state == "" {
		return "", false
	}
	return state, true
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
// every one it sees is stopped (a stopped process forks nothing, so a
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
			if !p.stopped {
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
