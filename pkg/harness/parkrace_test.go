package harness_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// The races of parking (docs/parking.md, "Races"), each with the real
// harness, real agents (the scripted agent, or the test as the agent's MCP
// client) and the worker-API fake; where galley's answers must come at a
// chosen moment, a proxy on the wire in front of the fake holds or
// rewrites them.

// sessionScript is the scripted agent with a session folder to save at
// parking (as a CLI's).
type sessionScript struct {
	harness.ScriptDriver
	dir string
}

func (d sessionScript) SessionDir() string { return d.dir }

// heldStore is a park store whose first Put waits until released: a slow
// save.
type heldStore struct {
	*snapshot.DirStore
	once             sync.Once
	entered, release chan struct{}
}

func newHeldStore(t *testing.T) *heldStore {
	t.Helper()
	ds, err := snapshot.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	return &heldStore{DirStore: ds, entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *heldStore) Put(ctx context.Context, key string, r io.Reader) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.DirStore.Put(ctx, key, r)
}

// galleyProxy stands on the wire between the harness and the fake: park,
// when set, answers the parking reports; once void is set, the worker's
// credential is void (as galley's resume makes the parked harness's): every
// call reaches the fake with a wrong credential and is refused 401, but
// the inbox reads, which are held until the harness gives up on them.
type galleyProxy struct {
	URL  string
	void atomic.Bool
	park func(w http.ResponseWriter, r *http.Request, forward http.Handler)
	// done ends every request held, once the test ends.
	done chan struct{}
}

func newGalleyProxy(t *testing.T, f *fakeapi.Server) *galleyProxy {
	t.Helper()
	target, err := url.Parse(f.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := &galleyProxy{done: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(target)
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.void.Load() {
			switch r.URL.Path {
			case workerapi.PathInbox, workerapi.PathWait, workerapi.PathWake:
				select {
				case <-r.Context().Done():
				case <-p.done:
				}
				return
			}
			r.Header.Set("Authorization", "Bearer void")
		}
		rp.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == workerapi.PathPark && p.park != nil && !p.void.Load() {
			p.park(w, r, forward)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(p.done) }) // before Close, which waits for held requests
	p.URL = srv.URL
	return p
}

// parkCalls are the parking reports the fake took.
func parkCalls(s fakeapi.Snapshot) []workerapi.ParkRequest {
	var out []workerapi.ParkRequest
	for _, c := range s.Calls {
		if c.Park != nil {
			out = append(out, *c.Park)
		}
	}
	return out
}

// inboxItemLogged reports whether the harness logged taking inbox item
// seq into its inbox.
func inboxItemLogged(p *inproc, seq int64) bool {
	for _, line := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(line, `"msg":"inbox item"`) && strings.Contains(line, `"seq":`+strconv.FormatInt(seq, 10)+`,`) {
			return true
		}
	}
	return false
}

// waitForItem waits until the harness took inbox item seq.
func waitForItem(t *testing.T, ctx context.Context, p *inproc, seq int64) {
	t.Helper()
	for !inboxItemLogged(p, seq) {
		select {
		case <-ctx.Done():
			t.Fatalf("the harness never took inbox item %d", seq)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// agentSessions makes a session folder owned by a new agent uid, holding
// files (each "{}"), as the agent's CLI would have left it.
func agentSessions(t *testing.T, files ...string) (uint32, string) {
	t.Helper()
	uid := workerapi.AgentUIDBase + rand.Uint32N(workerapi.AgentUIDEnd-workerapi.AgentUIDBase)
	sessions := filepath.Join(t.TempDir(), "sessions")
	if err := os.Mkdir(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	owned := []string{sessions}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(sessions, f), []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		owned = append(owned, filepath.Join(sessions, f))
	}
	for _, p := range owned {
		if err := os.Lchown(p, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
	}
	return uid, sessions
}

// confinedWorkspace is a workspace in a folder open to other users, apart
// from exe's (a folder that holds workspaces is not shown to the agent).
func confinedWorkspace(t *testing.T) string {
	t.Helper()
	open := openExe(t)
	if err := os.Remove(open); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(open), "ws")
}

// A reply that comes while the session files are being saved (a slow
// save) is held, not given to the agent: the freeze comes before the
// save, so the parking's Read is before the reply, and galley, finding it
// after Read, resumes the worker with it. (Frozen after the save, the
// agent would have taken it and then been stopped, and the resumed agent
// would wait for it forever.)
func TestParkReplyDuringSlowSave(t *testing.T) {
	t.Parallel()
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Skip("the uid confinement needs root here: " + why)
	}
	ctx := testCtx(t)
	exe := openExe(t)
	uid, sessions := agentSessions(t, "turns.jsonl")
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Branch: testBranch, AgentUID: uid,
		Brief: "#!galley-script\nask Which API? :: v1 or v2?\ndone succeeded after", Agent: protocol.AgentSelection{Agent: "script"}})
	store := newHeldStore(t)
	p := runInProcess(t, ctx, f, "script", sessionScript{harness.ScriptDriver{Executable: exe}, sessions}, func(c *harness.Config) {
		c.Confine, c.ConfineExe, c.Workspace = harness.ConfineUser, exe, confinedWorkspace(t)
		c.ParkAfter, c.Parks, c.House = time.Second, store, "test-house"
	})
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the session files were never saved")
	}
	q := lastQuestion(f.Snapshot())
	waits := f.Snapshot().Attempts[workerapi.PathWait]
	seq := f.Reply(q, "v2")
	// The harness has the reply once it logged it and waits on galley
	// again.
	waitForItem(t, ctx, p, seq)
	waitFor(t, ctx, f, "the next inbox wait", func(s fakeapi.Snapshot) bool { return s.Attempts[workerapi.PathWait] > waits })
	close(store.release)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	parks := parkCalls(s)
	if len(parks) != 1 || parks[0].Read >= seq {
		t.Fatalf("parking reports %+v; want one, read before the reply's %d", parks, seq)
	}
	if s.Count(workerapi.PathExited) != 0 {
		t.Errorf("the parked harness reported an exit")
	}
	rc, err := store.Get(ctx, harness.ParkKey("test-house", "w-1"))
	if err != nil {
		t.Fatalf("no session archive: %v", err)
	}
	rc.Close()
}

// The agent owns its session folder and what leads to it, so it can make
// it a link to a folder it cannot read; the harness archives only a folder
// it reached without following a link and that the agent's uid owns, so a
// restore never hands the agent what it could not read.
func TestParkRefusesSessionFolderItDoesNotOwn(t *testing.T) {
	t.Parallel()
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Skip("the uid confinement needs root here: " + why)
	}
	for _, tc := range []struct {
		name string
		// plant makes the session folder at path for the agent's uid.
		plant func(t *testing.T, path, secret string, uid int)
	}{
		{"a link the agent made", func(t *testing.T, path, secret string, uid int) {
			if err := os.Symlink(secret, path); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(path, uid, uid); err != nil {
				t.Fatal(err)
			}
		}},
		{"a link in its path", func(t *testing.T, path, secret string, uid int) {
			parent := filepath.Dir(path)
			if err := os.Rename(parent, parent+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Dir(secret), parent); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(parent, uid, uid); err != nil {
				t.Fatal(err)
			}
		}},
		{"a folder of another uid", func(t *testing.T, path, secret string, uid int) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(path, "secret.txt"), []byte("operator's"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			exe := openExe(t)
			uid := workerapi.AgentUIDBase + rand.Uint32N(workerapi.AgentUIDEnd-workerapi.AgentUIDBase)
			// The operator's secrets, which the agent's uid cannot read.
			private := t.TempDir()
			secret := filepath.Join(private, "sessions")
			if err := os.Mkdir(secret, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(secret, "secret.txt"), []byte("operator's"), 0o600); err != nil {
				t.Fatal(err)
			}
			agentDir := filepath.Join(t.TempDir(), "agent")
			if err := os.Mkdir(agentDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(agentDir, int(uid), int(uid)); err != nil {
				t.Fatal(err)
			}
			sessions := filepath.Join(agentDir, "sessions")
			tc.plant(t, sessions, secret, int(uid))
			f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Branch: testBranch, AgentUID: uid, ReportEvents: true,
				Brief: "#!galley-script\nask Which API? :: v1 or v2?\ndone succeeded after", Agent: protocol.AgentSelection{Agent: "script"}})
			store := newHeldStore(t)
			close(store.release)
			p := runInProcess(t, ctx, f, "script", sessionScript{harness.ScriptDriver{Executable: exe}, sessions}, func(c *harness.Config) {
				c.Confine, c.ConfineExe, c.Workspace = harness.ConfineUser, exe, confinedWorkspace(t)
				c.ParkAfter, c.Parks, c.House = time.Second, store, "test-house"
			})
			waitFor(t, ctx, f, "the refused parking's event", func(s fakeapi.Snapshot) bool {
				for _, e := range s.Events {
					if e.Event == workerapi.EventError && strings.Contains(e.Text, "not parked") {
						return true
					}
				}
				return false
			})
			f.Reply(lastQuestion(f.Snapshot()), "v2")
			if err := p.wait(t, ctx); err != nil {
				t.Fatal(err)
			}
			s := f.Snapshot()
			if parks := parkCalls(s); len(parks) != 0 {
				t.Errorf("the worker parked: %+v", parks)
			}
			if rc, err := store.Get(ctx, harness.ParkKey("test-house", "w-1")); err == nil {
				rc.Close()
				t.Errorf("a session archive was stored")
			}
			if got := s.Posts(); len(got) < 2 || got[len(got)-2].Body != "reply: v2" {
				t.Errorf("the agent did not go on after the refused parking: %+v", got)
			}
		})
	}
}

// Once the parking report is sent, the parking may have landed and been
// resumed (input came; the parked harness's credential is void): a 401
// then means exactly that, and the harness ends without giving its agent
// what it froze (another harness has the worker) and without an exit
// report.
func TestParkLandedAndResumedIsNotThawed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Branch: testBranch,
		Brief: "#!galley-script\nask Which API? :: v1 or v2?\ndone succeeded after", Agent: protocol.AgentSelection{Agent: "script"}})
	px := newGalleyProxy(t, f)
	var run atomic.Pointer[inproc]
	var posts atomic.Int64
	px.park = func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		// The report lands; its answer is lost (a 503 after the write).
		rec := httptest.NewRecorder()
		forward.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Errorf("the fake refused the parking: %d %s", rec.Code, rec.Body)
		}
		// A reply comes, reaches the parked harness's inbox, and resumes
		// the worker: the parked harness's credential is void.
		seq := f.Reply(lastQuestion(f.Snapshot()), "v2")
		for !inboxItemLogged(run.Load(), seq) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		posts.Store(int64(f.Snapshot().Attempts[workerapi.PathPost]))
		px.void.Store(true)
		http.Error(w, `{"error":"lost"}`, http.StatusServiceUnavailable)
	}
	p := runInProcess(t, ctx, f, "script", harness.ScriptDriver{Executable: workerBin}, func(c *harness.Config) {
		c.Endpoint, c.ParkAfter = px.URL, time.Second
	})
	run.Store(p)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	if len(parkCalls(s)) != 1 || !px.void.Load() {
		t.Fatalf("the parking did not land as the test made it: %+v", s.Calls)
	}
	if got := int64(s.Attempts[workerapi.PathPost]); got != posts.Load() {
		t.Errorf("the parked agent posted %d times after the parking landed: it was given the reply", got-posts.Load())
	}
	if n := s.Attempts[workerapi.PathExited]; n != 0 {
		t.Errorf("the parked harness tried to report an exit %d times", n)
	}
}

// parkShell is a shell agent that can be parked: its driver tells fact as
// soon as it starts, and takes facts that begin with "ok-".
type parkShell struct {
	shellDriver
	fact string
}

func (d parkShell) Observe(stdout io.Reader, ev harness.Events) {
	harness.TellResumable(ev, d.fact)
	_, _ = io.Copy(io.Discard, stdout)
}

func (parkShell) SessionDir() string { return "" }

func (d parkShell) ResumeCommand(self workerapi.Self, mcpURL, mcpSecret, workspace, fact string) (*exec.Cmd, error) {
	if err := d.CheckResumeFact(fact); err != nil {
		return nil, err
	}
	return d.Command(self, mcpURL, mcpSecret, workspace)
}

func (parkShell) CheckResumeFact(fact string) error {
	if !strings.HasPrefix(fact, "ok-") {
		return errors.New("not a fact of this agent")
	}
	return nil
}

// An ask whose call ends while the harness parks (the CLI gave up on it)
// is abandoned like any other: when the parking then fails (galley refuses
// it), the reply that came meanwhile reaches the agent as a message.
func TestParkFailedAfterAskEndedAbandonsIt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch, Agent: protocol.AgentSelection{Agent: "shell"}})
	px := newGalleyProxy(t, f)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	px.park = func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		once.Do(func() { close(arrived) })
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-px.done:
			return
		}
		http.Error(w, `{"error":"refused"}`, http.StatusBadRequest)
	}
	ep := make(chan [2]string, 1)
	p := runInProcess(t, ctx, f, "shell", parkShell{shellDriver{script: "exec sleep 600", mcp: ep}, "ok-1"}, func(c *harness.Config) {
		c.Endpoint, c.ParkAfter, c.StopGrace = px.URL, time.Second, 100*time.Millisecond
	})
	pc := connectProgress(t, ctx, ep)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := pc.cs.CallTool(callCtx, &mcp.CallToolParams{Name: harness.ToolAsk,
			Arguments: map[string]any{"subject": "which db", "body": "postgres?"}})
		done <- err
	}()
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the agent was never parked")
	}
	q := lastQuestion(f.Snapshot())
	cancel() // the CLI gives up on the call while its parking is reported
	<-done
	short, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	waitForLog(t, short, p, "the reply will come as a message", 1)
	seq := f.Reply(q, "yes, postgres")
	waitForItem(t, ctx, p, seq)
	close(release) // galley refuses the parking: the harness goes on
	want := "Reply to your question " + q + " (\"which db\"), which came after your ask_coordinator call had ended: yes, postgres"
	for {
		res, err := pc.cs.CallTool(short, &mcp.CallToolParams{Name: harness.ToolWaitMessage, Arguments: map[string]any{}})
		if err == nil && res.IsError && strings.Contains(text(res), "being parked") {
			time.Sleep(10 * time.Millisecond) // the refusal is being taken in
			continue
		}
		if err != nil || text(res) != want {
			t.Fatalf("wait_message after the failed parking = %+v, %v; want %q", res, err, want)
		}
		break
	}
	f.Settle(protocol.OutcomeCancelled)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
}

// A resume fact the driver's Parker refuses is refused when it is told:
// the agent is not parked (rather than parked and then not resumable).
func TestParkRefusesBadResumeFact(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch, Agent: protocol.AgentSelection{Agent: "shell"}})
	ep := make(chan [2]string, 1)
	p := runInProcess(t, ctx, f, "shell", parkShell{shellDriver{script: "exec sleep 600", mcp: ep}, "forged; rm -rf"}, func(c *harness.Config) {
		c.ParkAfter, c.StopGrace = time.Second, 100*time.Millisecond
	})
	pc := connectProgress(t, ctx, ep)
	waitForLog(t, ctx, p, "the agent's resume fact is refused", 1)
	asked := make(chan error, 1)
	go func() {
		_, err := pc.cs.CallTool(ctx, &mcp.CallToolParams{Name: harness.ToolAsk,
			Arguments: map[string]any{"subject": "which db", "body": "postgres?"}})
		asked <- err
	}()
	waitFor(t, ctx, f, "the question", func(s fakeapi.Snapshot) bool { return lastQuestion(s) != "" })
	// Three times the park after: a parking would have been reported.
	time.Sleep(3 * time.Second)
	f.Reply(lastQuestion(f.Snapshot()), "yes")
	if err := <-asked; err != nil {
		t.Fatalf("ask: %v", err)
	}
	if parks := parkCalls(f.Snapshot()); len(parks) != 0 {
		t.Errorf("parked with a refused fact: %+v", parks)
	}
	f.Settle(protocol.OutcomeCancelled)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
}
