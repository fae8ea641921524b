package standin

import (
	"bytes"
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

// plantLinks replaces the worktree's .git/info and .git/objects/info
// (and, given modules, .git/modules) by symbolic links to info,
// objectsInfo and modules (folders elsewhere: a root-only one, another
// repository's, another worktree's), for root to follow when it next
// scrubs, reuses or releases the worktree. Planting is allowed; the test
// checks the targets.
func plantLinks(info, objectsInfo, modules string) (bool, string) {
	dir, _ := os.Getwd()
	var planted, failed []string
	for _, l := range []struct{ rel, target string }{{".git/info", info}, {".git/objects/info", objectsInfo}, {".git/modules", modules}} {
		if l.target == "" {
			continue
		}
		p := filepath.Join(dir, l.rel)
		err := os.RemoveAll(p)
		if err == nil {
			err = os.Symlink(l.target, p)
		}
		if err != nil {
			failed = append(failed, l.rel+": "+errText(err))
			continue
		}
		planted = append(planted, l.rel+" -> "+l.target)
	}
	if len(planted) == 0 {
		return false, "could not plant a link in its own worktree: " + strings.Join(failed, "; ")
	}
	detail := "planted " + strings.Join(planted, ", ") + " for root to follow"
	if len(failed) > 0 {
		detail += "; could not plant " + strings.Join(failed, "; ")
	}
	return false, detail
}

// writeCache tries to change the git object cache, of which mirror is a
// mirror (a bare repository) and its folder the cache: what a later
// harness (root) would take from it into another worker's clone, or run
// when it fetches there. It lists the cache, creates a file in it, appends
// a core.fsmonitor to the mirror's config, plants its reference-transaction
// hook, points its objects/info/alternates at the agent's own worktree and
// adds a branch. It succeeds if any of these worked.
func writeCache(mirror string) (bool, string) {
	if mirror == "" {
		return false, "no mirror of the cache to write into"
	}
	dir, _ := os.Getwd()
	cache := filepath.Dir(mirror)
	head, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	var done, refused []string
	try := func(what string, err error) {
		if err == nil {
			done = append(done, what)
		} else {
			refused = append(refused, what+": "+errText(err))
		}
	}
	_, err := os.ReadDir(cache)
	try("list the cache", err)
	try("create a file in the cache", os.WriteFile(filepath.Join(cache, "planted-by-attacker"), []byte("x"), 0o644))
	try("append to the mirror's config", appendTo(filepath.Join(mirror, "config"), "\n[core]\n\tfsmonitor = /bin/true\n"))
	try("plant the mirror's reference-transaction hook", os.WriteFile(filepath.Join(mirror, "hooks", "reference-transaction"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	try("point the mirror's alternates at its worktree", os.WriteFile(filepath.Join(mirror, "objects", "info", "alternates"), []byte(filepath.Join(dir, ".git", "objects")+"\n"), 0o644))
	try("add a branch to the mirror", os.WriteFile(filepath.Join(mirror, "refs", "heads", "planted-by-attacker"), append(bytes.TrimSpace(head), '\n'), 0o644))
	if len(done) > 0 {
		return true, "in the git object cache " + cache + ": " + strings.Join(done, ", ")
	}
	return false, "could not touch the git object cache " + cache + ": " + strings.Join(refused, "; ")
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
