package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// agentGroup is the cgroup an agent runs in, where the harness may make
// one (root, a cgroup v1 hierarchy for the pids and memory controllers,
// as on this project's machines): one folder per controller, each beneath
// the harness's own group, so the harness's own limits still hold. The
// folders and their files are root's: a process of the agent's uid cannot
// write another group's cgroup.procs, and an agent that runs as root
// (Landlock as root) has /sys read-only in its domain, so neither can
// leave. Its processes are ended from outside by the pids it lists.
type agentGroup struct {
	dirs []string // pids first, then memory
	rel  string   // the pids group's path, as /proc/<pid>/cgroup shows it
}

// cgroupControllers are the v1 controllers an agent's group is made in.
var cgroupControllers = []string{"pids", "memory"}

// newAgentGroup makes the agent's group named name with pids.max and
// memory.limit_in_bytes set, or answers why it cannot (the caller then
// relies on RLIMIT_NPROC alone). A group of that name left by an earlier
// harness that was killed (groupName) is ended and made afresh.
func newAgentGroup(name string, maxPids uint64, maxMemory int64) (*agentGroup, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("only root makes cgroups")
	}
	own, err := ownGroups()
	if err != nil {
		return nil, err
	}
	sweepDeadGroups(own)
	g := &agentGroup{}
	for _, c := range cgroupControllers {
		dir, ok := own[c]
		if !ok {
			return nil, fmt.Errorf("no cgroup v1 hierarchy with the %s controller (cgroup v2 groups are not made yet)", c)
		}
		sub := filepath.Join(dir, name)
		if c == "pids" {
			g.rel = own["pids:rel"] + "/" + name
			g.rel = strings.ReplaceAll(g.rel, "//", "/")
		}
		if err := os.Mkdir(sub, 0o755); errors.Is(err, os.ErrExist) {
			old := &agentGroup{dirs: []string{sub}, rel: g.rel}
			ctx, cancel := context.WithTimeout(context.Background(), endPatience)
			err = old.end(ctx)
			cancel()
			if err == nil {
				err = os.Mkdir(sub, 0o755)
			}
		}
		if err != nil {
			g.remove()
			return nil, fmt.Errorf("making the agent's %s cgroup: %w", c, err)
		}
		g.dirs = append(g.dirs, sub)
	}
	for file, v := range map[string]string{
		filepath.Join(g.dirs[0], "pids.max"):              strconv.FormatUint(maxPids, 10),
		filepath.Join(g.dirs[1], "memory.limit_in_bytes"): strconv.FormatInt(maxMemory, 10),
	} {
		if err := os.WriteFile(file, []byte(v), 0); err != nil {
			g.remove()
			return nil, fmt.Errorf("setting %s: %w", filepath.Base(file), err)
		}
	}
	return g, nil
}

// sweepDeadGroups ends and removes the agents' groups, beside the ones
// this harness makes, whose harness is gone (its pid, in the name, runs
// no more: groupName): a harness killed before it could end its agent
// leaves its group, and whatever still runs in it has outlived its
// worker. A pid reused since is taken as alive, and its group left.
func sweepDeadGroups(own map[string]string) {
	ents, err := os.ReadDir(own["pids"])
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "galley-agent-") {
			continue
		}
		f := strings.Split(name, "-")
		if len(f) < 4 {
			continue
		}
		pid, err := strconv.Atoi(f[len(f)-2])
		if err != nil || pid <= 0 || !errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			continue
		}
		old := &agentGroup{rel: strings.ReplaceAll(own["pids:rel"]+"/"+name, "//", "/")}
		for _, c := range cgroupControllers {
			old.dirs = append(old.dirs, filepath.Join(own[c], name))
		}
		ctx, cancel := context.WithTimeout(context.Background(), endPatience)
		_ = old.end(ctx)
		cancel()
	}
}

// ownGroups finds this process's group folder in each v1 hierarchy of
// cgroupControllers (from /proc/self/cgroup and /proc/self/mountinfo);
// "pids:rel" is the pids group's path as /proc shows it.
func ownGroups() (map[string]string, error) {
	paths := map[string]string{}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			paths[c] = f[2]
		}
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer mi.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if !ok || len(pf) < 5 || len(qf) < 3 || qf[0] != "cgroup" {
			continue
		}
		root, mnt := pf[3], pf[4]
		for _, opt := range strings.Split(qf[2], ",") {
			p, mine := paths[opt]
			if !mine || out[opt] != "" {
				continue
			}
			rel, err := filepath.Rel(root, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue // this mount does not show our group
			}
			out[opt] = filepath.Join(mnt, rel)
			if opt == "pids" {
				out["pids:rel"] = p
			}
		}
	}
	return out, sc.Err()
}

// add puts pid in every folder of g.
func (g *agentGroup) add(pid int) error {
	for _, d := range g.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("putting the agent in its cgroup %s: %w", d, err)
		}
	}
	return nil
}

// procs lists the processes in g's pids group.
func (g *agentGroup) procs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(g.dirs[0], "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// inGroup reports whether pid is in g's pids group.
func (g *agentGroup) inGroup(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && f[2] == g.rel && strings.Contains(","+f[1]+",", ",pids,") {
			return true
		}
	}
	return false
}

// signal sends sig to pid through a pidfd if it is still in g (a pid
// reused between the listing and the signal is never signalled).
func (g *agentGroup) signal(pid int, sig unix.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if g.inGroup(pid) {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// end ends every process in g from outside it, as endUID does (all
// halted first, so that none forks while others are killed, then all
// killed), waits until the group is empty, its zombies reaped, and
// removes its folders. It answers an error when some process remains
// when ctx ends.
func (g *agentGroup) end(ctx context.Context) error {
	for _, sig := range []unix.Signal{unix.SIGSTOP, unix.SIGKILL} {
		for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
			pids, err := g.procs()
			if err != nil {
				return fmt.Errorf("listing the agent's cgroup: %w", err)
			}
			pids = live(pids, sig == unix.SIGSTOP)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				g.signal(pid, sig)
			}
			if sleepCtx(ctx, delay) != nil {
				return fmt.Errorf("the agent's processes in its cgroup %s could not all be ended: %d remain", g.dirs[0], len(pids))
			}
		}
	}
	// A killed process stays in the group, a zombie, until its parent (or
	// init, for an orphan) reaps it; until then removing the group is
	// refused as busy.
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := g.remove()
		if !errors.Is(err, unix.EBUSY) || sleepCtx(ctx, delay) != nil {
			return err
		}
	}
}

// live keeps the pids that are not zombies (which run nothing), and not
// halted either (procStatus.halted) when unhalted.
func live(pids []int, unhalted bool) []int {
	var out []int
	for _, pid := range pids {
		st, ok := readStatus(pid)
		if !ok || st.dead() || unhalted && st.halted() {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// remove removes g's folders (a group with processes stays, and says so).
func (g *agentGroup) remove() error {
	var errs []error
	for _, d := range g.dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing the agent's cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
