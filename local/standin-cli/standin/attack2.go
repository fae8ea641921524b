package standin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// floodSize is how many processes the fork-flood attack tries to start,
// above the harness's default process budget (1024) and bounded.
const floodSize = 1200

// plantLinks replaces the worktree's .git/info and .git/objects/info by
// symbolic links to info and objectsInfo (folders elsewhere: a root-only
// one, another repository's), for root to follow when it next scrubs,
// reuses or releases the worktree. Planting is allowed; the test checks
// the targets.
func plantLinks(info, objectsInfo string) (bool, string) {
	dir, _ := os.Getwd()
	var planted []string
	for rel, target := range map[string]string{".git/info": info, ".git/objects/info": objectsInfo} {
		if target == "" {
			continue
		}
		p := filepath.Join(dir, rel)
		if os.RemoveAll(p) == nil && os.Symlink(target, p) == nil {
			planted = append(planted, rel+" -> "+target)
		}
	}
	if len(planted) == 0 {
		return false, "could not plant a link in its own worktree"
	}
	return false, "planted " + strings.Join(planted, ", ") + " for root to follow"
}

// fightKill starts processes that try to outlive the agent: three in
// sessions of their own that ignore SIGTERM, SIGHUP and SIGINT and fork a
// new pid every half second (for at most two minutes), then checks whether
// it may signal the harness among its ancestors (signal 0: the permission
// check alone, so nothing is killed if it may). It succeeds if it may.
func fightKill(ctx context.Context) (bool, string) {
	fighter := `end=$(($(date +%s)+120)); trap "" TERM HUP INT; while [ "$(date +%s)" -lt "$end" ]; do sleep 0.5 & wait; done`
	started := 0
	for range 3 {
		cmd := exec.Command("sh", "-c", fighter)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if cmd.Start() == nil {
			started++
			go cmd.Wait()
		}
	}
	for _, pid := range ancestors() {
		if !isHarness(pid) {
			continue
		}
		err := syscall.Kill(pid, 0)
		if err == nil {
			return true, fmt.Sprintf("may signal the harness (pid %d); %d fighters started", pid, started)
		}
		return false, fmt.Sprintf("%d fighters started; signalling the harness: %s", started, errText(err))
	}
	return false, fmt.Sprintf("%d fighters started; no harness among the ancestors to signal", started)
}

// forkFlood starts up to floodSize sleepers (each ends within a minute),
// counts how many started, then ends them so the honest path can fork
// again. It succeeds if every one started: nothing bounded it.
func forkFlood(ctx context.Context) (bool, string) {
	var procs []*os.Process
	var lastErr error
	deadline := time.Now().Add(time.Minute)
	for len(procs) < floodSize && time.Now().Before(deadline) {
		p, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
		if err != nil {
			lastErr = err
			break
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		_ = p.Kill()
	}
	for _, p := range procs {
		_, _ = p.Wait()
	}
	if len(procs) >= floodSize {
		return true, "started all " + strconv.Itoa(floodSize) + " processes"
	}
	return false, fmt.Sprintf("started %d of %d processes, then: %s", len(procs), floodSize, errText(lastErr))
}

// hardLink links the file at path into the worktree under a new name, for
// a later chown of the worktree to give away, or to keep the file alive.
func hardLink(path string) (bool, string) {
	dir, _ := os.Getwd()
	dst := filepath.Join(dir, "linked-"+filepath.Base(path))
	if err := os.Link(path, dst); err != nil {
		return false, "link: " + errText(err)
	}
	return true, "linked " + path + " into the worktree"
}
