// Command launchbench measures launch → workspace ready → agent started on
// a large repository (scripts/bigrepo), on the local server and in
// aws-local, beside plain `git clone`s of the same repository in the same
// run. docs/BENCHMARKS.md ("Launch on a large repository") records what it
// measured.
//
//	go run ./scripts/bigrepo
//	scripts/standins.sh run -- go run ./scripts/launchbench --launches 6 --label after
//
// For each shape it seeds a fresh data directory's house repository with a
// copy of the large repository, starts `galley serve` (`galley-dev serve
// --stack aws-local` with the template for aws-local; stand-ins from the environment, as
// scripts/standins.sh sets them), and launches scripted workers one at a
// time, committing one small change to the house's main before each (so
// every worker has something new to fetch, as in a house at work). For each
// launch it takes three times: the launch effect sent (this process's
// clock), and the harness's log lines "workspace ready" and "agent
// started" (same machine, same clock). The first launch on a fresh data
// directory is reported apart: it makes the git object cache's mirror.
//
// --bin names the directory holding galley, galley-dev and galley-worker: measuring
// "before" means a galley-worker built from an earlier commit there.
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
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

type config struct {
	repo, bin, template, label, work, listen string
	shapes                                   []string
	launches, clones                         int
	timeout                                  time.Duration
}

func run(args []string) int {
	fs := flag.NewFlagSet("launchbench", flag.ContinueOnError)
	var c config
	var shapes string
	fs.StringVar(&c.repo, "repo", ".bigrepo/repo-100000.git", "the large repository (go run ./scripts/bigrepo makes it)")
	fs.StringVar(&c.bin, "bin", "bin", "directory holding galley, galley-dev and galley-worker (make build-aws-local)")
	fs.StringVar(&c.template, "template", "cdk.out/galley-local.template.json", "aws-local's template (make synth-local)")
	fs.StringVar(&shapes, "shapes", "local,aws-local", "shapes to measure, comma-separated: local, aws-local")
	fs.IntVar(&c.launches, "launches", 6, "launches per shape (the first, which makes the cache, reported apart)")
	fs.IntVar(&c.clones, "clones", 3, "plain git clones of each kind")
	fs.StringVar(&c.label, "label", "", "what this run measures (e.g. before, after), printed with the figures")
	fs.StringVar(&c.work, "work", "", "scratch directory (default a new one under the system's temporary folder, removed at the end)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:48080", "loopback address galley serves on")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "longest wait for one launch's agent to start")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.shapes = strings.Split(shapes, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "launchbench:", err)
		return 1
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "launchbench:", err)
			return 1
		}
	}
	return 0
}

// result is one run's figures, in seconds.
type result struct {
	Label   string               `json:"label"`
	Machine string               `json:"machine"`
	Repo    string               `json:"repo"`
	Clones  map[string][]float64 `json:"clones"`
	Shapes  map[string]*shapeRes `json:"shapes"`
}

type shapeRes struct {
	Launches []launch `json:"launches"`
}

// launch is one worker's times, in seconds after its launch was sent.
type launch struct {
	Handle         string  `json:"handle"`
	Harness        float64 `json:"harnessStarted"` // "preparing the workspace"
	WorkspaceReady float64 `json:"workspaceReady"`
	AgentStarted   float64 `json:"agentStarted"`
}

func bench(ctx context.Context, c config) (*result, error) {
	repo, err := filepath.Abs(c.repo)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(repo, "objects")); err != nil {
		return nil, fmt.Errorf("%s is not a repository: make it with go run ./scripts/bigrepo", c.repo)
	}
	if c.work == "" {
		if c.work, err = os.MkdirTemp("", "launchbench-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(c.work)
	}
	res := &result{Label: c.label, Machine: machine(), Repo: describeRepo(repo),
		Clones: map[string][]float64{}, Shapes: map[string]*shapeRes{}}
	fmt.Printf("launchbench %s\nmachine: %s\nrepository: %s\n", c.label, res.Machine, res.Repo)

	if err := plainClones(ctx, c, repo, res); err != nil {
		return nil, err
	}
	for _, shape := range c.shapes {
		sr, err := measureShape(ctx, c, shape, repo)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", shape, err)
		}
		res.Shapes[shape] = sr
		report(shape, sr)
	}
	return res, nil
}

// plainClones times git clone of the repository: from its path (git's
// local shortcut, hard links), with --no-local (the pack protocol, as a
// remote clone runs it, without a network), and over smart HTTP (git
// http-backend, as the aws-local forge serves it).
func plainClones(ctx context.Context, c config, repo string, res *result) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gitserve.Backend(repo), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	kinds := []struct {
		name string
		args []string
	}{
		{"git clone (local path, hard links)", []string{"clone", "--quiet", repo}},
		{"git clone --no-local", []string{"clone", "--quiet", "--no-local", repo}},
		{"git clone over HTTP", []string{"clone", "--quiet", "http://" + ln.Addr().String() + "/house.git"}},
	}
	for _, k := range kinds {
		for i := 0; i < c.clones; i++ {
			dst := filepath.Join(c.work, "clone")
			progress("%s, %d of %d", k.name, i+1, c.clones)
			start := time.Now()
			cmd := exec.CommandContext(ctx, "git", append(k.args, dst)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %v: %s", k.name, err, out)
			}
			res.Clones[k.name] = append(res.Clones[k.name], time.Since(start).Seconds())
			if err := os.RemoveAll(dst); err != nil {
				return err
			}
		}
		progressDone()
		p50, p95 := quantiles(res.Clones[k.name])
		fmt.Printf("%-40s p50 %6.1fs  p95 %6.1fs  (n=%d)\n", k.name, p50, p95, len(res.Clones[k.name]))
	}
	return nil
}

// measureShape starts galley serve in shape on a fresh data directory
// whose house is a copy of repo and launches c.launches workers in turn.
func measureShape(ctx context.Context, c config, shape, repo string) (*shapeRes, error) {
	data := filepath.Join(c.work, shape)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	house := filepath.Join(data, "repository.git") // aws-local's forge serves this one
	progress("%s: copying the repository into the house", shape)
	if out, err := exec.CommandContext(ctx, "git", "clone", "--quiet", "--bare", "--no-hardlinks", repo, house).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("seed the house: %v: %s", err, out)
	}
	program := "galley"
	args := []string{"serve", "--data", data, "--listen", c.listen}
	switch shape {
	case "local":
		args = append(args, "--repository", house, "--default-agent", "script")
	case "aws-local":
		tpl, err := filepath.Abs(c.template)
		if err != nil {
			return nil, err
		}
		program = "galley-dev" // aws-local is the development binary's
		args = append(args, "--stack", "aws-local", "--template", tpl)
	default:
		return nil, fmt.Errorf("unknown shape %q (local or aws-local)", shape)
	}
	galley, err := filepath.Abs(filepath.Join(c.bin, program))
	if err != nil {
		return nil, err
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	cmd := exec.CommandContext(srvCtx, galley, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), "GALLEY_AWSLOCAL_BIN="+bin) // aws-local's galley-worker from --bin too
	logf, err := os.Create(filepath.Join(data, "serve.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	progress("%s: starting galley serve", shape)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		stopSrv()
		_ = cmd.Wait()
	}()
	tgt, err := readReady(stdout, logf)
	if err != nil {
		return nil, fmt.Errorf("galley serve did not start (see %s): %w", logf.Name(), err)
	}
	sr := &shapeRes{}
	for i := 0; i < c.launches; i++ {
		if err := commitToMain(ctx, house, i); err != nil {
			return nil, err
		}
		progress("%s: launch %d of %d", shape, i+1, c.launches)
		l, err := launchOne(ctx, tgt, data, i, c.timeout, func(s string) { progress("%s: launch %d of %d: %s", shape, i+1, c.launches, s) })
		if err != nil {
			return nil, fmt.Errorf("launch %d: %w", i+1, err)
		}
		sr.Launches = append(sr.Launches, l)
	}
	progressDone()
	return sr, nil
}

// target is a started galley serve.
type target struct {
	endpoint, token, house, backend string
}

// readReady reads galley serve's ready lines: its endpoint and token file.
func readReady(stdout io.Reader, logf io.Writer) (target, error) {
	var t target
	var r localserver.Ready
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		r.ParseLine(line)
		if r.TokenFile != "" {
			t.house, t.backend, t.endpoint = r.House, r.Backend, r.Endpoint
			tok, err := os.ReadFile(r.TokenFile)
			if err != nil {
				return t, err
			}
			t.token = strings.TrimSpace(string(tok))
			go io.Copy(logf, stdout) // keep draining
			if t.endpoint == "" {
				return t, errors.New("no endpoint line")
			}
			return t, nil
		}
	}
	return t, errors.New("galley serve ended before it was ready")
}

// commitToMain adds one small commit to the house's main with plumbing
// (the house is bare): the new work a launched worker must fetch.
func commitToMain(ctx context.Context, house string, i int) error {
	index := filepath.Join(house, "launchbench.index")
	defer os.Remove(index)
	env := append(os.Environ(), "GIT_INDEX_FILE="+index, "GIT_AUTHOR_NAME=launchbench", "GIT_AUTHOR_EMAIL=bench@galley.invalid",
		"GIT_COMMITTER_NAME=launchbench", "GIT_COMMITTER_EMAIL=bench@galley.invalid")
	git := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir, cmd.Env, cmd.Stdin = house, env, strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	head, err := git("", "rev-parse", "refs/heads/main")
	if err != nil {
		return err
	}
	blob, err := git(fmt.Sprintf("launch %d at %s\n", i, time.Now().Format(time.RFC3339Nano)), "hash-object", "-w", "--stdin")
	if err != nil {
		return err
	}
	if _, err := git("", "read-tree", head); err != nil {
		return err
	}
	if _, err := git("", "update-index", "--add", "--cacheinfo", "100644,"+blob+",bench/launch.txt"); err != nil {
		return err
	}
	tree, err := git("", "write-tree")
	if err != nil {
		return err
	}
	commit, err := git("", "commit-tree", tree, "-p", head, "-m", fmt.Sprintf("launchbench %d", i))
	if err != nil {
		return err
	}
	_, err = git("", "update-ref", "refs/heads/main", commit, head)
	return err
}

// launchOne launches a scripted worker that reports and finishes, and
// waits for its harness to log that its agent started.
func launchOne(ctx context.Context, t target, data string, i int, timeout time.Duration, note func(string)) (launch, error) {
	key := fmt.Sprintf("launchbench-%d-%d", time.Now().UnixNano(), i)
	brief := "#!galley-script\nstatus launchbench started\ndone succeeded launchbench"
	eff := protocol.WorkerEffect{Type: protocol.OpLaunch, Role: "commis", Brief: &brief, Workspace: &protocol.Workspace{Type: "isolated"}}
	effJSON, _ := json.Marshal(eff)
	call := protocol.EffectCall{Run: "launchbench-" + key, Request: protocol.EffectRequest{
		House: t.house, Backend: t.backend, Credential: contract.DefaultCredential, Task: "launchbench", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: protocol.ExecutorWorker, Effect: effJSON}}}
	kc := client.New(t.endpoint, t.token, client.WithBackend(t.backend), client.WithTimeout(0))
	sent := time.Now()
	var handle string
	for attempt := 0; handle == ""; attempt++ {
		a, err := kc.Effect(ctx, call)
		if err != nil {
			return launch{}, err
		}
		var o protocol.EffectOutcome
		if a.Status == http.StatusOK {
			o, _ = protocol.ParseEffectOutcome(a.Body, t.backend)
		}
		switch {
		case a.Status == http.StatusOK && o.Status == protocol.StatusApplied:
			for _, r := range o.Receipt.Created {
				if r.Kind == protocol.KindWorker {
					handle = r.Handle
				}
			}
			if handle == "" {
				return launch{}, fmt.Errorf("the launch created no worker: %s", a.Body)
			}
		case attempt < 20 && (a.Status >= 500 || o.Reason == protocol.ReasonRateLimited):
			time.Sleep(time.Second) // the same key: an idempotent resend
		default:
			return launch{}, fmt.Errorf("launch answered %d: %s", a.Status, a.Body)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		l, done, err := harnessTimes(data, handle, sent)
		if err != nil {
			return l, err
		}
		if done {
			return l, nil
		}
		if time.Now().After(deadline) {
			return l, fmt.Errorf("worker %s: no agent start within %v", handle, timeout)
		}
		switch {
		case l.WorkspaceReady > 0:
			note("workspace ready after " + fmt.Sprintf("%.1fs", l.WorkspaceReady))
		case l.Harness > 0:
			note(fmt.Sprintf("cloning, %.0fs since launch", time.Since(sent).Seconds()))
		default:
			note(fmt.Sprintf("waiting for the harness, %.0fs since launch", time.Since(sent).Seconds()))
		}
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// harnessTimes finds the worker's lines in the harness logs under data
// (the local server's workers/<handle>/harness.log, the ECS stand-in's
// per-task logs) and returns their times after sent.
func harnessTimes(data, handle string, sent time.Time) (launch, bool, error) {
	l := launch{Handle: handle}
	var logs []string
	err := filepath.WalkDir(data, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil // folders come and go
		}
		if d.IsDir() && (d.Name() == "workspaces" || strings.HasSuffix(d.Name(), ".git")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "harness.log" {
			logs = append(logs, path)
		}
		return nil
	})
	if err != nil {
		return l, false, err
	}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(handle)) {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			var rec struct {
				Time   time.Time `json:"time"`
				Msg    string    `json:"msg"`
				Worker string    `json:"worker"`
			}
			if json.Unmarshal(line, &rec) != nil || rec.Worker != handle {
				continue
			}
			at := rec.Time.Sub(sent).Seconds()
			switch rec.Msg {
			case "preparing the workspace":
				l.Harness = at
			case "workspace ready":
				l.WorkspaceReady = at
			case "agent started":
				l.AgentStarted = at
			case "the agent cannot start":
				return l, false, fmt.Errorf("worker %s: the agent cannot start: %s", handle, line)
			}
		}
	}
	return l, l.AgentStarted > 0, nil
}

func report(shape string, sr *shapeRes) {
	if len(sr.Launches) == 0 {
		return
	}
	first := sr.Launches[0]
	fmt.Printf("%s, first launch (fresh data directory):  harness %.1fs, workspace ready %.1fs, agent started %.1fs\n",
		shape, first.Harness, first.WorkspaceReady, first.AgentStarted)
	rest := sr.Launches[1:]
	if len(rest) == 0 {
		return
	}
	var ready, started, clone []float64
	for _, l := range rest {
		// A harness built before "workspace ready" was logged has none.
		if l.WorkspaceReady > 0 {
			ready = append(ready, l.WorkspaceReady)
			clone = append(clone, l.WorkspaceReady-l.Harness)
		}
		started = append(started, l.AgentStarted)
	}
	for _, row := range []struct {
		name string
		v    []float64
	}{{"launch → workspace ready", ready}, {"launch → agent started", started}, {"harness's Prepare alone", clone}} {
		if len(row.v) == 0 {
			fmt.Printf("%s, later launches: %-26s not logged by this harness\n", shape, row.name)
			continue
		}
		p50, p95 := quantiles(row.v)
		fmt.Printf("%s, later launches: %-26s p50 %6.1fs  p95 %6.1fs  (n=%d)\n", shape, row.name, p50, p95, len(row.v))
	}
}

// quantiles returns the p50 and p95 of v (nearest rank).
func quantiles(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.95)
}

func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	out, _ := exec.Command("git", "--version").Output()
	return fmt.Sprintf("%d CPUs (%s), %s, load average %s, %s", runtime.NumCPU(), model, runtime.GOOS+"/"+runtime.GOARCH,
		strings.Join(strings.Fields(string(load))[:3], " "), strings.TrimSpace(string(out)))
}

func describeRepo(repo string) string {
	count, _ := exec.Command("git", "-C", repo, "rev-list", "--count", "main").Output()
	var size int64
	packs, _ := filepath.Glob(filepath.Join(repo, "objects", "pack", "*.pack"))
	for _, p := range packs {
		if fi, err := os.Stat(p); err == nil {
			size += fi.Size()
		}
	}
	return fmt.Sprintf("%s: %s commits, packed %.0f MB", repo, strings.TrimSpace(string(count)), float64(size)/1e6)
}

// progress rewrites one status line on stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "\r\033[K"+format, args...)
}

func progressDone() { fmt.Fprint(os.Stderr, "\r\033[K") }
