// Package servicetest builds a real service for tests of the packages
// around it: the memory store, the in-process doorbell, a real git
// repository (its reads counted), and a runtime fake that records what it
// was asked (the real runtimes are tested by runtimetest).
package servicetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// Runtime runs nothing; it records starts, stops and removals, and counts
// the liveness reads it answers.
type Runtime struct {
	mu      sync.Mutex
	Starts  map[string]int
	Stopped map[string]bool
	Removed []string
	Specs   map[string]service.WorkerSpec
	calls   map[string]int
	failing error
	// Resumes counts the resumes started per handle, ResumeSpecs keeps
	// the last one's spec; refuseResume makes Resume answer Unavailable,
	// as a runtime whose parked compute has not ended.
	Resumes      map[string]int
	ResumeSpecs  map[string]service.WorkerSpec
	resumed      map[string]map[int]bool
	refuseResume bool
	ended        map[string]bool
	unlisted     map[string]bool
}

// NewRuntime returns an empty fake runtime.
func NewRuntime() *Runtime {
	return &Runtime{Starts: map[string]int{}, Stopped: map[string]bool{}, Specs: map[string]service.WorkerSpec{},
		calls: map[string]int{}, Resumes: map[string]int{}, ResumeSpecs: map[string]service.WorkerSpec{},
		resumed: map[string]map[int]bool{}, ended: map[string]bool{}, unlisted: map[string]bool{}}
}

// Calls reports how many times method ("Liveness", "Livenesses") was called.
func (f *Runtime) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// FailLiveness makes every liveness read fail with err (nil: succeed
// again), as a runtime whose platform cannot be reached.
func (f *Runtime) FailLiveness(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = err
}

func (f *Runtime) Start(_ context.Context, spec service.WorkerSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Starts[spec.Handle]++
	f.Specs[spec.Handle] = spec
	return nil
}

func (f *Runtime) Stop(_ context.Context, handle string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Stopped[handle] = true
	return nil
}

func (f *Runtime) Liveness(_ context.Context, handle string) (service.Liveness, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Liveness"]++
	if f.failing != nil {
		return service.LivenessUnknown, f.failing
	}
	return f.livenessLocked(handle), nil
}

func (f *Runtime) Livenesses(_ context.Context, handles []string) (map[string]service.Liveness, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Livenesses"]++
	if f.failing != nil {
		return nil, f.failing
	}
	out := make(map[string]service.Liveness, len(handles))
	for _, h := range handles {
		out[h] = f.livenessLocked(h)
	}
	return out, nil
}

// Resume implements service.Resumer: once per handle and parking, it
// starts the worker's compute again (its liveness live); again, it says
// it had.
func (f *Runtime) Resume(_ context.Context, spec service.WorkerSpec, n int) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuseResume {
		return false, galleyerr.Errorf(galleyerr.Unavailable, "the parked compute has not ended yet")
	}
	if f.resumed[spec.Handle] == nil {
		f.resumed[spec.Handle] = map[int]bool{}
	}
	if f.resumed[spec.Handle][n] {
		return false, nil
	}
	f.resumed[spec.Handle][n] = true
	f.Resumes[spec.Handle]++
	f.ResumeSpecs[spec.Handle] = spec
	delete(f.ended, spec.Handle)
	return true, nil
}

// RefuseResume makes Resume answer Unavailable (true) or start (false).
func (f *Runtime) RefuseResume(refuse bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseResume = refuse
}

// End makes the worker's compute read exited, as a harness that ended
// (a parked one's).
func (f *Runtime) End(handle string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended[handle] = true
}

// Unlist makes the worker's compute read unknown, as a platform whose
// listing does not show a task (yet, or any more).
func (f *Runtime) Unlist(handle string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unlisted[handle] = true
}

// ResumeCount is how many resumes of handle were started.
func (f *Runtime) ResumeCount(handle string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Resumes[handle]
}

// ResumeSpec is the spec of handle's last resume.
func (f *Runtime) ResumeSpec(handle string) service.WorkerSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ResumeSpecs[handle]
}

func (f *Runtime) livenessLocked(handle string) service.Liveness {
	switch {
	case f.unlisted[handle]:
		return service.LivenessUnknown
	case f.Stopped[handle] || f.ended[handle]:
		return service.LivenessExited
	case f.Starts[handle] > 0:
		return service.LivenessLive
	}
	return service.LivenessUnknown
}

func (f *Runtime) RemoveWorkspace(_ context.Context, handle, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Removed = append(f.Removed, handle)
	return nil
}

// StartCount is the number of distinct workers started.
func (f *Runtime) StartCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.Starts)
}

// Git is a git host that counts the branch reads it passes on to the real
// one, and can fail them.
type Git struct {
	service.GitHost
	mu      sync.Mutex
	calls   map[string]int
	failing error
}

// NewGit wraps host.
func NewGit(host service.GitHost) *Git { return &Git{GitHost: host, calls: map[string]int{}} }

// Calls reports how many times method ("BranchHead", "ExistingBranches")
// was called.
func (g *Git) Calls(method string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[method]
}

// FailReads makes every branch read fail with err (nil: succeed again).
func (g *Git) FailReads(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = err
}

func (g *Git) count(method string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[method]++
	return g.failing
}

func (g *Git) BranchHead(ctx context.Context, branch string) (string, bool, error) {
	if err := g.count("BranchHead"); err != nil {
		return "", false, err
	}
	return g.GitHost.BranchHead(ctx, branch)
}

func (g *Git) ExistingBranches(ctx context.Context, branches []string) (map[string]bool, error) {
	if err := g.count("ExistingBranches"); err != nil {
		return nil, err
	}
	return g.GitHost.ExistingBranches(ctx, branches)
}

// ManualClock is a clock tests move by hand.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock starts at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Env is a service with its parts exposed.
type Env struct {
	Service *service.Service
	Store   store.Store
	Runtime *Runtime
	Git     *githost.Repo
	// GitHost is what the service reads and writes branches through: Git,
	// counted.
	GitHost *Git
	Config  service.Config
}

// Config is the configuration tests use: house origin89, backend galley.
func Config(t testing.TB) service.Config {
	return service.Config{House: "origin89", Backend: contract.DefaultBackend, Credential: contract.DefaultCredential,
		Families: []string{"claude", "codex"}, Model: true, Effort: "with-model",
		WorkerSecret: []byte("0123456789abcdef0123456789abcdef"), WorkspaceRoot: t.TempDir(),
		AwaitCap: 5 * time.Second,
		// Shorter than the default second, so that a test's retry after a
		// lookup waits briefly (RetryAfterSkew); long enough for the
		// slewing wall clocks of test machines.
		ClockSkew: TestClockSkew,
		// Tests of other things post freely; the budget's own tests set it.
		PostBudget: service.PostBudget{Rows: 1e6, RowBurst: 1e6, Bytes: 1e12, ByteBurst: 1e12}}
}

// TestClockSkew is Config's ClockSkew.
const TestClockSkew = 100 * time.Millisecond

// RetryAfterSkew waits until a request sent now arrives after the absence
// a lookup promised before the call, as kitchn's retry after reading
// "absent" (or a rate-limited refusal) does when it honours Retry-After.
func RetryAfterSkew() { time.Sleep(TestClockSkew + 10*time.Millisecond) }

// New builds a service on the memory store (or st, when given through
// opts), with mod applied to the configuration.
func New(t testing.TB, mod func(*service.Config), opts ...service.Option) *Env {
	t.Helper()
	ctx := context.Background()
	repoPath, err := githost.InitBare(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, err := githost.Open(ctx, repoPath)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Store: memstore.New(), Runtime: NewRuntime(), Git: repo, GitHost: NewGit(repo), Config: Config(t)}
	if mod != nil {
		mod(&e.Config)
	}
	all := append([]service.Option{service.WithStore(e.Store), service.WithRuntime(e.Runtime),
		service.WithGitHost(e.GitHost), service.WithDoorbell(localbell.New())}, opts...)
	e.Service, err = service.New(e.Config, all...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
