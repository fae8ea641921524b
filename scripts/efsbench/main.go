// Command efsbench times an agent's file-heavy work on a worktree whose file
// system delays each operation as EFS does, beside the same work on local
// disk, in one run: a clone of a repository, npm ci, git status, an edit of
// many files, git add -A && git commit, and a Go build with its cache in the
// worktree. The delays come from a FUSE passthrough (package delayfs),
// because these machines' kernel has neither an NFS client nor netem.
//
// It must run as root (or with fusermount), on a machine with /dev/fuse.
// Results go to docs/BENCHMARKS.md ("The worktree's file system").
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/galley-run/galley/scripts/efsbench/delayfs"
)

type config struct {
	repo         string
	repeats      int
	delays       delayfs.Delays
	cacheTimeout time.Duration
	edits        int
	buildPkg     string
	npm          bool
	dir          string
}

func main() {
	var c config
	flag.StringVar(&c.repo, "repo", "", "repository to clone (default: the one holding the current directory)")
	flag.IntVar(&c.repeats, "repeats", 3, "runs of the workload on each side; the median is reported")
	flag.DurationVar(&c.delays.Read, "read-delay", time.Millisecond, "delay of each lookup, attribute read, open, data or directory read")
	flag.DurationVar(&c.delays.Write, "write-delay", 3*time.Millisecond, "delay of each operation that changes the file system")
	flag.DurationVar(&c.cacheTimeout, "cache-timeout", time.Second, "how long the kernel keeps names and attributes of the delayed mount")
	flag.IntVar(&c.edits, "edits", 200, "files changed before the commit")
	flag.StringVar(&c.buildPkg, "build", "./scripts/bigrepo", "package of the repository built with a cold cache in the worktree")
	flag.BoolVar(&c.npm, "npm", true, "run npm ci on the repository's package-lock.json (npm's own registry configuration)")
	flag.StringVar(&c.dir, "dir", "", "scratch directory on local disk (default: a new temporary one, removed after)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "efsbench:", err)
		os.Exit(1)
	}
}

// step is one timed part of the workload, run in the worktree wt (the
// clone's destination for the first step).
type step struct {
	name string
	run  func(ctx context.Context, wt string) error
}

func workload(c config) []step {
	steps := []step{
		{"git clone", func(ctx context.Context, wt string) error {
			return command(ctx, nil, "git", "clone", "-q", "--no-local", c.repo, wt)
		}},
	}
	if c.npm {
		steps = append(steps, step{"npm ci", func(ctx context.Context, wt string) error {
			return command(ctx, nil, "npm", "ci", "--prefix", wt, "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
		}})
	}
	return append(steps,
		step{"git status", func(ctx context.Context, wt string) error {
			return command(ctx, nil, "git", "-C", wt, "status")
		}},
		step{fmt.Sprintf("edit %d files", c.edits), func(ctx context.Context, wt string) error {
			return editFiles(ctx, wt, c.edits)
		}},
		step{"git add -A && git commit", func(ctx context.Context, wt string) error {
			if err := command(ctx, nil, "git", "-C", wt, "add", "-A"); err != nil {
				return err
			}
			return command(ctx, nil, "git", "-C", wt, "-c", "user.name=efsbench", "-c", "user.email=efsbench@example.invalid",
				"commit", "-q", "--no-verify", "-m", "efsbench: edit files")
		}},
		step{"go build (cache in worktree)", func(ctx context.Context, wt string) error {
			return command(ctx, []string{"GOCACHE=" + filepath.Join(wt, ".gocache"), "GOPROXY=off"},
				"go", "-C", wt, "build", "-o", os.DevNull, c.buildPkg)
		}},
	)
}

// command runs name, its output kept only to explain a failure. It runs in
// the driver's own directory and is pointed at the worktree by its flags
// (git -C, go -C, npm --prefix): a child that changed into the delayed mount
// between fork and exec could wait on this process's FUSE server while the
// Go runtime waited on the child, and the two hung (seen here).
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
	files := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(files) < n {
		return fmt.Errorf("the repository tracks %d files, fewer than the %d to edit", len(files), n)
	}
	for i := range n {
		name := files[i*len(files)/n]
		line := "\n# efsbench edit\n"
		if strings.HasSuffix(name, ".go") {
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

// sample is one side's run of one step.
type sample struct {
	took time.Duration
	ops  delayfs.Counts
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
	for _, d := range []string{local, backing, mountpoint} {
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

	fmt.Fprintf(stdout, "efsbench: %s\n", machine())
	fmt.Fprintf(stdout, "repository %s; delays: %v a lookup or read, %v a write; names and attributes cached %v; %d runs a side, median shown\n",
		c.repo, c.delays.Read, c.delays.Write, c.cacheTimeout, c.repeats)

	steps := workload(c)
	// One untimed clone and install on local disk fills npm's cache and the
	// page cache for both sides alike.
	fmt.Fprintln(log, "warm-up on local disk")
	if _, err := pass(ctx, steps[:min(2, len(steps))], filepath.Join(local, "warmup"), nil); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(local, "warmup")); err != nil {
		return err
	}

	results := map[string][][]sample{} // side → run → step
	for i := range c.repeats {
		sides := []string{"local", "delayed"}
		if i%2 == 1 {
			slices.Reverse(sides) // neither side always runs first
		}
		for _, side := range sides {
			name := fmt.Sprintf("run-%d", i)
			wt, cleanup := filepath.Join(local, name), filepath.Join(local, name)
			var mnt *delayfs.Mount
			if side == "delayed" {
				// Removed through the backing directory: cleaning up is not timed.
				wt, cleanup, mnt = filepath.Join(mountpoint, name), filepath.Join(backing, name), m
			}
			samples, err := pass(ctx, steps, wt, mnt)
			if err != nil {
				return err
			}
			if err := os.RemoveAll(cleanup); err != nil {
				return err
			}
			results[side] = append(results[side], samples)
			fmt.Fprintf(log, "run %d %-7s", i+1, side)
			for j, s := range samples {
				fmt.Fprintf(log, " %s %.2fs;", steps[j].name, s.took.Seconds())
			}
			fmt.Fprintln(log)
		}
	}
	report(stdout, steps, results)
	fmt.Fprintf(stdout, "load average at the end: %s\n", loadavg())
	return nil
}

// pass runs the workload once in wt, counting the mount's operations per
// step when m is not nil.
func pass(ctx context.Context, steps []step, wt string, m *delayfs.Mount) ([]sample, error) {
	samples := make([]sample, len(steps))
	for i, s := range steps {
		var before delayfs.Counts
		if m != nil {
			before = m.Counts()
		}
		start := time.Now()
		if err := s.run(ctx, wt); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		samples[i].took = time.Since(start)
		if m != nil {
			samples[i].ops = m.Counts().Sub(before)
		}
	}
	return samples, nil
}

func report(w io.Writer, steps []step, results map[string][][]sample) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tlocal s\tdelayed s\tratio\tdelayed ops: reads\twrites\t")
	median := func(side string, pick func([]sample) float64) float64 {
		var xs []float64
		for _, run := range results[side] {
			xs = append(xs, pick(run))
		}
		slices.Sort(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	row := func(name string, pick func([]sample) float64, reads, writes func([]sample) float64) {
		l, d := median("local", pick), median("delayed", pick)
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.1fx\t%.0f\t%.0f\t\n", name, l, d, d/l, median("delayed", reads), median("delayed", writes))
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
