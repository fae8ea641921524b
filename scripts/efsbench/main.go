// Command efsbench times an agent's file-heavy work (a clone of a
// repository, npm ci, git status, an edit of many files, git add -A && git
// commit, and a Go build with its cache in the worktree) in one run on
// four arms:
//
//   - local: the worktree on local disk, cloned with git clone;
//   - before: the worktree on a file system that delays each operation as
//     EFS does (issue 30's "before": worktrees on EFS), cloned the same way;
//   - after: the worktree on local disk, cloned as the harness clones it
//     today, through the shared git object cache (workspace.Prepare with
//     workspace.WithCache, harness.prepareWith's call) with the cache on
//     the delaying file system (on AWS the cache is on EFS, the worktree
//     on the task's own storage);
//   - local-cache: the same clone with the cache on local disk, which
//     tells the cost of the harness's way of cloning from that of EFS.
//
// On the after arm it also times what a worker's end and the next launch
// of its worktree as `existing` add (pkg/snapshot through a folder store,
// as the harness does with S3): the save, the new clone, the restore and
// the first git status after it.
//
// The delays come from a FUSE passthrough (package delayfs), because
// these machines' kernel has neither an NFS client nor netem. It must run
// as root (or with fusermount), on a machine with /dev/fuse. Results go to
// docs/BENCHMARKS.md ("The worktree's file system").
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workspace"
	"github.com/galley-run/galley/scripts/efsbench/delayfs"
)

type config struct {
	repo         string
	branch       string
	repeats      int
	delays       delayfs.Delays
	cacheTimeout time.Duration
	edits        int
	buildPkg     string
	npm          bool
	dir          string
	arms         []string
	snapshot     bool
}

// The arms, in the order their columns are shown.
const (
	armLocal      = "local"
	armBefore     = "before"
	armAfter      = "after"
	armLocalCache = "local-cache"
)

var allArms = []string{armLocal, armBefore, armAfter, armLocalCache}

func main() {
	var c config
	arms := strings.Join(allArms, ",")
	flag.StringVar(&c.repo, "repo", "", "repository to clone (default: the one holding the current directory)")
	flag.StringVar(&c.branch, "branch", "", "branch the harness's clone checks out (default: the repository's current branch)")
	flag.IntVar(&c.repeats, "repeats", 3, "runs of the workload on each arm; the median is reported")
	flag.DurationVar(&c.delays.Read, "read-delay", time.Millisecond, "delay of each lookup, attribute read, open, data or directory read")
	flag.DurationVar(&c.delays.Write, "write-delay", 3*time.Millisecond, "delay of each operation that changes the file system")
	flag.DurationVar(&c.cacheTimeout, "cache-timeout", time.Second, "how long the kernel keeps names and attributes of the delayed mount")
	flag.IntVar(&c.edits, "edits", 200, "files changed before the commit")
	flag.StringVar(&c.buildPkg, "build", "./scripts/bigrepo", "package of the repository built with a cold cache in the worktree")
	flag.BoolVar(&c.npm, "npm", true, "run npm ci on the repository's package-lock.json (npm's own registry configuration)")
	flag.StringVar(&c.dir, "dir", "", "scratch directory on local disk (default: a new temporary one, removed after)")
	flag.StringVar(&arms, "arms", arms, "arms to run, comma-separated: local (worktree on local disk), before (worktree on the delayed mount), "+
		"after (worktree on local disk, the harness's clone through a git object cache on the delayed mount), local-cache (the same, the cache on local disk)")
	flag.BoolVar(&c.snapshot, "snapshot", true, "on the after arm, also time a snapshot's save and an existing launch's clone, restore and first git status")
	flag.Parse()
	for _, a := range strings.Split(arms, ",") {
		if !slices.Contains(allArms, a) {
			fmt.Fprintf(os.Stderr, "efsbench: unknown arm %q (the arms: %s)\n", a, strings.Join(allArms, ", "))
			os.Exit(2)
		}
		if !slices.Contains(c.arms, a) {
			c.arms = append(c.arms, a)
		}
	}
	// Shown in allArms' order, local first: the others' ratios are to it.
	slices.SortFunc(c.arms, func(a, b string) int { return slices.Index(allArms, a) - slices.Index(allArms, b) })
	if len(c.arms) < 2 || c.arms[0] != armLocal {
		fmt.Fprintln(os.Stderr, "efsbench: -arms must name local and at least one other arm")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "efsbench:", err)
		os.Exit(1)
	}
}

// arm is one placing of the worktree and one way of cloning it.
type arm struct {
	// parent is the folder the arm's worktrees are made in; removed is the
	// same folder reached without the mount (removing them is not timed).
	parent, removed string
	// mount is the delaying mount the arm's worktree or cache is on, whose
	// operations are counted; nil for none.
	mount *delayfs.Mount
	clone func(ctx context.Context, wt string) (cloneParts, error)
}

// cloneParts are the parts of a clone through the git object cache, as
// workspace.Prepare logs them: the mirror's update (a git fetch into it),
// the clone with the mirror as reference, and the copy of the mirror's
// object files into the clone (which then no longer borrows from it).
type cloneParts struct {
	update, clone, copy time.Duration
}

// gitClone is the clone of the local and before arms, as the "before"
// measurement made it: git's own, from the repository.
func gitClone(repo string) func(context.Context, string) (cloneParts, error) {
	return func(ctx context.Context, wt string) (cloneParts, error) {
		return cloneParts{}, command(ctx, nil, "git", "clone", "-q", "--no-local", repo, wt)
	}
}

// harnessClone is the clone of the after and local-cache arms: the
// harness's own (harness.prepareWith calls workspace.Prepare with
// workspace.WithCache(GALLEY_GIT_CACHE) and no other option here, the
// repository being local and needing no credential or proxy), through the
// git object cache in the folder cache.
func harnessClone(repo, branch, cache string) func(context.Context, string) (cloneParts, error) {
	return func(ctx context.Context, wt string) (cloneParts, error) {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, nil))
		if err := workspace.Prepare(ctx, repo, branch, wt, workspace.WithCache(cache, log)); err != nil {
			return cloneParts{}, fmt.Errorf("workspace.Prepare: %w\n%s", err, tail(logs.String(), 2000))
		}
		// Prepare falls back to a plain clone when the cache fails, saying
		// so only in its log: such a clone would measure something else.
		parts, ok := cachedClone(logs.Bytes())
		if !ok {
			return cloneParts{}, fmt.Errorf("workspace.Prepare did not clone through the git object cache in %s:\n%s", cache, tail(logs.String(), 2000))
		}
		return parts, nil
	}
}

// cachedClone finds in Prepare's JSON log its report of a clone through
// the cache, and no error.
func cachedClone(log []byte) (cloneParts, bool) {
	var parts cloneParts
	found := false
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		var rec struct {
			Level               string
			Msg                 string
			Update, Clone, Copy time.Duration // slog writes a Duration as nanoseconds
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return parts, false
		}
		switch {
		case rec.Level == "ERROR":
			return parts, false
		case rec.Msg == "cloned through the git object cache":
			parts, found = cloneParts{update: rec.Update, clone: rec.Clone, copy: rec.Copy}, true
		}
	}
	return parts, found
}

// step is one timed part of the workload, run in the worktree wt (the
// clone's destination for the first step).
type step struct {
	name string
	run  func(ctx context.Context, a *arm, wt string) (cloneParts, error)
}

// noParts adapts a step that is not a clone.
func noParts(f func(ctx context.Context, wt string) error) func(context.Context, *arm, string) (cloneParts, error) {
	return func(ctx context.Context, _ *arm, wt string) (cloneParts, error) { return cloneParts{}, f(ctx, wt) }
}

func workload(c config) []step {
	steps := []step{
		{"clone", func(ctx context.Context, a *arm, wt string) (cloneParts, error) {
			return a.clone(ctx, wt)
		}},
	}
	if c.npm {
		steps = append(steps, step{"npm ci", noParts(func(ctx context.Context, wt string) error {
			return command(ctx, nil, "npm", "ci", "--prefix", wt, "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
		})})
	}
	return append(steps,
		step{"git status", noParts(gitStatus)},
		step{fmt.Sprintf("edit %d files", c.edits), noParts(func(ctx context.Context, wt string) error {
			return editFiles(ctx, wt, c.edits)
		})},
		step{"git add -A && git commit", noParts(func(ctx context.Context, wt string) error {
			if err := command(ctx, nil, "git", "-C", wt, "add", "-A"); err != nil {
				return err
			}
			return command(ctx, nil, "git", "-C", wt, "-c", "user.name=efsbench", "-c", "user.email=efsbench@example.invalid",
				"commit", "-q", "--no-verify", "-m", "efsbench: edit files")
		})},
		step{"go build (cache in worktree)", noParts(func(ctx context.Context, wt string) error {
			return command(ctx, []string{"GOCACHE=" + filepath.Join(wt, ".gocache"), "GOPROXY=off"},
				"go", "-C", wt, "build", "-o", os.DevNull, c.buildPkg)
		})},
	)
}

func gitStatus(ctx context.Context, wt string) error {
	return command(ctx, nil, "git", "-C", wt, "status")
}

// command runs name, its output kept only to explain a failure. It runs in
// the driver's own directory and is pointed at the worktree by its flags
// (git -C, go -C, npm --prefix): a child that changed into the delayed mount
// between fork and exec could wait on this process's FUSE server while the
// Go runtime waited on the child, and the two hung (seen here).
// (workspace.Prepare runs git in the cache's mirror, on the mount, one
// command at a time with nothing else using the mount: no hang seen.)
func command(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// editFiles appends a line to n tracked files spread over the tree, as an
// agent's edit across a repository would.
func editFiles(ctx context.Context, wt string, n int) error {
	out, err := exec.CommandContext(ctx, "git", "-C", wt, "ls-files", "-z").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, name := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		// A line appended to a go.sum breaks the build that follows; a go.mod
		// takes a // comment as Go does.
		if base := filepath.Base(name); base != "go.sum" && base != "go.work.sum" {
			files = append(files, name)
		}
	}
	if len(files) < n {
		return fmt.Errorf("the repository tracks %d files, fewer than the %d to edit", len(files), n)
	}
	for i := range n {
		name := files[i*len(files)/n]
		line := "\n# efsbench edit\n"
		if strings.HasSuffix(name, ".go") || filepath.Base(name) == "go.mod" {
			line = "\n// efsbench edit\n"
		}
		f, err := os.OpenFile(filepath.Join(wt, name), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, werr := f.WriteString(line)
		if err := errors.Join(werr, f.Close()); err != nil {
			return err
		}
	}
	return nil
}

// sample is one arm's run of one step.
type sample struct {
	took  time.Duration
	ops   delayfs.Counts
	parts cloneParts
}

func run(ctx context.Context, c config, stdout, log io.Writer) error {
	if c.repeats < 1 {
		return fmt.Errorf("-repeats must be at least 1, got %d", c.repeats)
	}
	if c.repo == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("no -repo given and the current directory is in no git repository: %w", err)
		}
		c.repo = strings.TrimSpace(string(out))
	}
	if c.branch == "" {
		// A worker's launch names its branch; a detached repository's clone
		// is left detached, as a launch with no branch is.
		out, _ := exec.Command("git", "-C", c.repo, "symbolic-ref", "--quiet", "--short", "HEAD").Output()
		c.branch = strings.TrimSpace(string(out))
	}
	scratch := c.dir
	if scratch == "" {
		d, err := os.MkdirTemp("", "efsbench-")
		if err != nil {
			return err
		}
		scratch = d
		defer os.RemoveAll(d)
	}
	local, backing, mountpoint := filepath.Join(scratch, "local"), filepath.Join(scratch, "backing"), filepath.Join(scratch, "delayed")
	for _, d := range []string{local, filepath.Join(backing, "worktrees"), mountpoint} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	m, err := delayfs.New(mountpoint, backing, c.delays, delayfs.WithCacheTimeout(c.cacheTimeout))
	if err != nil {
		return err
	}
	defer func() {
		if err := m.Unmount(); err != nil {
			fmt.Fprintln(log, "efsbench:", err)
		}
	}()

	arms := map[string]*arm{
		armLocal:  {parent: local, removed: local, clone: gitClone(c.repo)},
		armBefore: {parent: filepath.Join(mountpoint, "worktrees"), removed: filepath.Join(backing, "worktrees"), mount: m, clone: gitClone(c.repo)},
		// The cache folders are made by Prepare (mode 0700, as the harness's).
		armAfter:      {parent: local, removed: local, mount: m, clone: harnessClone(c.repo, c.branch, filepath.Join(mountpoint, "git-cache"))},
		armLocalCache: {parent: local, removed: local, clone: harnessClone(c.repo, c.branch, filepath.Join(scratch, "local-git-cache"))},
	}

	fmt.Fprintf(stdout, "efsbench: %s\n", machine())
	fmt.Fprintf(stdout, "repository %s, branch %q; delays: %v a lookup or read, %v a write; names and attributes cached %v; %d runs an arm, median shown\n",
		c.repo, c.branch, c.delays.Read, c.delays.Write, c.cacheTimeout, c.repeats)

	steps := workload(c)
	// One untimed clone and install on local disk fills npm's cache and the
	// page cache for every arm alike; one untimed clone through each cache
	// makes its mirror, as the first worker of a repository does.
	fmt.Fprintln(log, "warm-up on local disk")
	if _, err := pass(ctx, steps[:min(2, len(steps))], arms[armLocal], filepath.Join(local, "warmup")); err != nil {
		return err
	}
	for _, name := range []string{armAfter, armLocalCache} {
		if slices.Contains(c.arms, name) {
			if _, err := arms[name].clone(ctx, filepath.Join(local, "warmup-"+name)); err != nil {
				return fmt.Errorf("warm-up of the %s arm's cache: %w", name, err)
			}
		}
	}
	if err := removeAll(local, "warmup"); err != nil {
		return err
	}

	var store *countingStore
	if c.snapshot && slices.Contains(c.arms, armAfter) {
		ds, err := snapshot.NewDirStore(filepath.Join(scratch, "snapshots"))
		if err != nil {
			return err
		}
		defer ds.Close()
		store = &countingStore{Store: ds}
	}
	results := map[string][][]sample{} // arm → run → step
	var restarts []restart
	for i := range c.repeats {
		order := slices.Clone(c.arms)
		// Rotated each run: no arm always runs first, or after the same one.
		order = append(order[i%len(order):], order[:i%len(order)]...)
		for _, name := range order {
			a := arms[name]
			wt := filepath.Join(a.parent, fmt.Sprintf("run-%d-%s", i, name))
			samples, err := pass(ctx, steps, a, wt)
			if err != nil {
				return fmt.Errorf("%s arm: %w", name, err)
			}
			results[name] = append(results[name], samples)
			fmt.Fprintf(log, "run %d %-11s", i+1, name)
			for j, s := range samples {
				fmt.Fprintf(log, " %s %.2fs;", steps[j].name, s.took.Seconds())
			}
			fmt.Fprintln(log)
			if name == armAfter && store != nil {
				r, err := restartFromSnapshot(ctx, a, store, wt)
				if err != nil {
					return fmt.Errorf("after arm's snapshot: %w", err)
				}
				restarts = append(restarts, r)
				fmt.Fprintf(log, "run %d %-11s save %.2fs; clone %.2fs; restore %.2fs; git status %.2fs\n",
					i+1, "restart", r.save.Seconds(), r.clone.Seconds(), r.restore.Seconds(), r.status.Seconds())
			}
			if err := removeAll(a.removed, filepath.Base(wt)); err != nil {
				return err
			}
		}
	}
	report(stdout, c.arms, arms, steps, results)
	if len(restarts) > 0 {
		reportRestarts(stdout, restarts)
	}
	fmt.Fprintf(stdout, "load average at the end: %s\n", loadavg())
	return nil
}

// removeAll removes the folders in parent whose names start with prefix
// (a worktree and the temporary siblings Prepare may leave).
func removeAll(parent, prefix string) error {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(strings.TrimPrefix(e.Name(), "."), prefix) {
			if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// pass runs the workload once in wt on arm a, counting the operations of
// a's mount per step when it has one.
func pass(ctx context.Context, steps []step, a *arm, wt string) ([]sample, error) {
	samples := make([]sample, len(steps))
	for i, s := range steps {
		var before delayfs.Counts
		if a.mount != nil {
			before = a.mount.Counts()
		}
		start := time.Now()
		parts, err := s.run(ctx, a, wt)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		samples[i].took = time.Since(start)
		samples[i].parts = parts
		if a.mount != nil {
			samples[i].ops = a.mount.Counts().Sub(before)
		}
	}
	return samples, nil
}

// restart is what a worker's end and the next launch of its worktree as
// existing cost on the after arm: the harness saves the worktree's
// snapshot when its worker ends (harness.saveWorktree: snapshot.SaveTo,
// to S3 on AWS), and a launch whose worktree is not on its task's disk
// clones it (Prepare) and restores the snapshot into it
// (harness.restoreWorktree: snapshot.RestoreFrom) before the agent starts.
// The agent's first git status then reads every restored file again.
type restart struct {
	save, clone, restore, status time.Duration
	files                        int
	bytes, archive               int64
	cloneOps                     delayfs.Counts
}

// restartFromSnapshot saves the worktree wt of arm a into store, removes
// it, and makes it again as an existing launch would.
func restartFromSnapshot(ctx context.Context, a *arm, store *countingStore, wt string) (restart, error) {
	var r restart
	key := snapshot.WorktreeKey("efsbench", filepath.Base(wt))
	store.written.Store(0)
	start := time.Now()
	st, err := snapshot.SaveTo(ctx, store, key, wt, snapshot.Limits{})
	if err != nil {
		return r, fmt.Errorf("save: %w", err)
	}
	r.save, r.files, r.bytes, r.archive = time.Since(start), st.Files, st.Bytes, store.written.Load()
	if err := os.RemoveAll(wt); err != nil {
		return r, err
	}
	before := a.mount.Counts()
	start = time.Now()
	if _, err := a.clone(ctx, wt); err != nil {
		return r, fmt.Errorf("clone: %w", err)
	}
	r.clone, r.cloneOps = time.Since(start), a.mount.Counts().Sub(before)
	start = time.Now()
	if _, err := snapshot.RestoreFrom(ctx, store, key, wt, snapshot.Limits{}); err != nil {
		return r, fmt.Errorf("restore: %w", err)
	}
	r.restore = time.Since(start)
	start = time.Now()
	if err := gitStatus(ctx, wt); err != nil {
		return r, err
	}
	r.status = time.Since(start)
	return r, store.Delete(ctx, key)
}

// countingStore is a snapshot store that counts the bytes put: the
// archive's size.
type countingStore struct {
	snapshot.Store
	written atomic.Int64
}

func (s *countingStore) Put(ctx context.Context, key string, r io.Reader) error {
	return s.Store.Put(ctx, key, countingReader{r, &s.written})
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func report(w io.Writer, names []string, arms map[string]*arm, steps []step, results map[string][][]sample) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"step"}
	for _, n := range names {
		header = append(header, n+" s")
		if n != armLocal {
			header = append(header, "×local")
		}
	}
	for _, n := range names {
		if arms[n].mount != nil {
			header = append(header, n+" ops: reads", "writes")
		}
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	med := func(arm string, pick func([]sample) float64) float64 {
		var xs []float64
		for _, run := range results[arm] {
			xs = append(xs, pick(run))
		}
		return median(xs)
	}
	row := func(name string, pick func([]sample) float64, reads, writes func([]sample) float64) {
		cells := []string{name}
		l := med(armLocal, pick)
		for _, n := range names {
			d := med(n, pick)
			cells = append(cells, fmt.Sprintf("%.2f", d))
			if n != armLocal {
				cells = append(cells, fmt.Sprintf("%.2fx", d/l))
			}
		}
		for _, n := range names {
			if arms[n].mount != nil {
				cells = append(cells, fmt.Sprintf("%.0f", med(n, reads)), fmt.Sprintf("%.0f", med(n, writes)))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	for i, s := range steps {
		row(s.name,
			func(r []sample) float64 { return r[i].took.Seconds() },
			func(r []sample) float64 { return float64(r[i].ops.Reads) },
			func(r []sample) float64 { return float64(r[i].ops.Writes) })
	}
	sum := func(f func(sample) float64) func([]sample) float64 {
		return func(r []sample) float64 {
			var t float64
			for _, s := range r {
				t += f(s)
			}
			return t
		}
	}
	row("whole workload",
		sum(func(s sample) float64 { return s.took.Seconds() }),
		sum(func(s sample) float64 { return float64(s.ops.Reads) }),
		sum(func(s sample) float64 { return float64(s.ops.Writes) }))
	tw.Flush()

	// The harness's clone, in its parts.
	for _, n := range names {
		if n != armAfter && n != armLocalCache {
			continue
		}
		part := func(f func(cloneParts) time.Duration) float64 {
			return med(n, func(r []sample) float64 { return f(r[0].parts).Seconds() })
		}
		fmt.Fprintf(w, "%s arm's clone (workspace.Prepare through the cache), medians: mirror update %.2f s, clone with the mirror as reference %.2f s, copy of its objects %.2f s\n",
			n, part(func(p cloneParts) time.Duration { return p.update }), part(func(p cloneParts) time.Duration { return p.clone }),
			part(func(p cloneParts) time.Duration { return p.copy }))
	}
}

func reportRestarts(w io.Writer, rs []restart) {
	pick := func(f func(restart) float64) float64 {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	fmt.Fprintf(w, "after arm, a worker's end and an existing launch (medians of %d): snapshot of %.0f files, %.1f MB, archive %.1f MB; "+
		"save %.2f s; clone %.2f s (%.0f reads, %.0f writes of the delayed mount); restore %.2f s; first git status %.2f s\n",
		len(rs), pick(func(r restart) float64 { return float64(r.files) }), pick(func(r restart) float64 { return float64(r.bytes) / 1e6 }),
		pick(func(r restart) float64 { return float64(r.archive) / 1e6 }), pick(func(r restart) float64 { return r.save.Seconds() }),
		pick(func(r restart) float64 { return r.clone.Seconds() }), pick(func(r restart) float64 { return float64(r.cloneOps.Reads) }),
		pick(func(r restart) float64 { return float64(r.cloneOps.Writes) }), pick(func(r restart) float64 { return r.restore.Seconds() }),
		pick(func(r restart) float64 { return r.status.Seconds() }))
}

// machine describes where the run happens: what the figures depend on.
func machine() string {
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	avail := "?"
	if mem, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(mem), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
				avail = f[1] + " kB"
			}
		}
	}
	return fmt.Sprintf("%d cores, kernel %s, memory available %s, load average %s; %s, %s, %s, npm %s",
		runtime.NumCPU(), strings.TrimSpace(string(release)), avail, loadavg(),
		version("git", "--version"), version("go", "version"), version("node", "--version"), version("npm", "--version"))
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func version(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return name + " ?"
	}
	return strings.TrimSpace(string(out))
}
