// Package localserver runs galley on one machine: the service behind one
// net/http server on loopback, state in a data directory (an embedded store,
// the token, the worker secret, worktrees, worker logs), workers as local
// processes, branches in a local repository. It is what `galley serve`
// wires from its flags.
package localserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/galley-run/galley/pkg/agents"
	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/logbuf"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/runtime/localproc"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/store/boltstore"
)

// Server is a running local galley.
type Server struct {
	opts     Options
	Endpoint string // http://host:port
	http     *http.Server
	listener *connlimit.Listener
	closers  []io.Closer
	Service  *service.Service
	operator *operator.Handler
}

// inheritedPoll is how often the server looks at the harnesses an earlier
// (killed) server started, to notice one that ends.
const inheritedPoll = 2 * time.Second

// Start prepares the data directory and starts serving. It returns once the
// listener is bound.
func Start(ctx context.Context, o Options) (*Server, error) {
	for _, u := range baseURLs(o) {
		if err := harness.ValidateBaseURL(u.v); err != nil {
			return nil, fmt.Errorf("the %s %w", u.what, err)
		}
	}
	if _, err := egress.ParseAllowlist(o.EgressAllow); err != nil {
		return nil, fmt.Errorf("the egress allowlist (--egress-allow): %w", err)
	}
	if o.EgressResolver != "" {
		if _, _, err := net.SplitHostPort(o.EgressResolver); err != nil {
			return nil, fmt.Errorf("the egress resolver (--egress-resolver) must be host:port: %w", err)
		}
	}
	if _, err := harness.ModelBudgetFromEnv(o.modelCapEnv()); err != nil {
		return nil, fmt.Errorf("the model cap (--model-cap-tokens, --model-cap-usd): %w", err)
	}
	// The default request log is buffered: a JSON line per request written
	// one by one would cost a system call each (see pkg/logbuf). Closed
	// last, so every line reaches stderr.
	var logw *logbuf.Writer
	if o.Logger == nil {
		logw = logbuf.New(os.Stderr, 0)
		o.Logger = logbuf.NewJSONLogger(logw, nil)
	}
	o.Defaults()
	s := &Server{opts: o}
	if logw != nil {
		s.closers = append(s.closers, logw)
	}
	ok := false
	defer func() {
		if !ok {
			s.closeAll()
		}
	}()
	if err := os.MkdirAll(o.Data, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	data, err := filepath.Abs(o.Data)
	if err != nil {
		return nil, err
	}
	// Agents may resolve every path directly in the data folder (datadir.go).
	keep := map[string]bool{}
	for _, f := range []struct{ name, path, flag string }{{"token", o.TokenFile, "--token-file"}, {"operator-token", o.OperatorTokenFile, "--operator-token-file"}} {
		if inDataFolder(data, f.path) {
			return nil, fmt.Errorf("%s %s is directly in the data folder, whose paths agents can resolve: leave %s unset (default %s) or name a file elsewhere",
				f.flag, f.path, f.flag, filepath.Join(data, PrivateDir, f.name))
		}
		if abs, err := filepath.Abs(f.path); err != nil || abs != filepath.Join(data, PrivateDir, f.name) {
			keep[f.name] = true
		}
	}
	if err := prepareData(data, keep); err != nil {
		return nil, err
	}
	token, err := SecretFile(o.TokenFile, 32)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	operatorToken, err := SecretFile(o.OperatorTokenFile, 32)
	if err != nil {
		return nil, fmt.Errorf("operator token file: %w", err)
	}
	if string(operatorToken) == string(token) {
		return nil, errors.New("the operator token must differ from kitchn's token: one would open the other's routes")
	}
	workerSecret, err := SecretFile(filepath.Join(data, PrivateDir, "worker-secret"), 32)
	if err != nil {
		return nil, fmt.Errorf("worker secret: %w", err)
	}
	repo := o.Repository
	if repo == "" {
		if repo, err = githost.InitBare(ctx, filepath.Join(data, "repository.git")); err != nil {
			return nil, fmt.Errorf("repository: %w", err)
		}
	}
	git, err := githost.Open(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", repo, err)
	}
	st := o.Store
	if st == nil {
		bs, err := boltstore.Open(filepath.Join(data, PrivateDir, "galley.db"))
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		st = bs
	}
	s.closers = append(s.closers, st)
	bell := o.Doorbell
	if bell == nil {
		bell = localbell.New()
	}
	evlog, hasLog := st.(operator.Events)
	if !hasLog {
		return nil, errors.New("the store keeps no worker event log")
	}
	// Event followers are in this process: their bell is local whatever
	// wakes deliveries/await (an SQS doorbell would make a queue per
	// worker). The recorder is closed before the store (closers run in
	// reverse), so what is queued is appended first.
	evbell := localbell.New()
	rec := eventlog.New(evlog, evbell, o.Logger)
	s.closers = append(s.closers, closerFunc(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return rec.Close(ctx)
	}))
	workerBin, err := findWorkerBin(o.WorkerBin)
	if err != nil {
		return nil, err
	}

	// Every connection costs a descriptor: use all the process may have,
	// and bound the connections to half of it (connlimit.WithDefaults).
	if n, err := connlimit.RaiseNoFile(); err != nil {
		o.Logger.Warn("could not raise the open-file limit", "limit", n, "err", err)
	}
	inner, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln := connlimit.Wrap(inner, o.Conns, o.Logger)
	s.listener = ln
	s.Endpoint = "http://" + LoopbackAddr(ln.Addr().String())

	repoURL := repo
	if p, err := githost.LocalPath(repo); err == nil {
		repoURL = p
	}
	rtOpts := []localproc.Option{localproc.WithDir(data), localproc.WithHarness(workerBin),
		localproc.WithEndpoint(s.Endpoint), localproc.WithRepository(repoURL), localproc.WithLogger(o.Logger),
		localproc.WithPassEnv(agentEnv...),
		// A harness that ended without reporting (killed, crashed) settles
		// its worker failed; one that reported changes nothing.
		localproc.WithOnExit(func(handle string) {
			if svc := s.Service; svc != nil {
				if err := svc.WorkerExited(context.Background(), handle, -1, "the worker's harness process ended"); err != nil {
					o.Logger.Warn("settle a worker whose harness ended", "worker", handle, "err", err)
				}
			}
		})}
	for _, u := range baseURLs(o) {
		if u.v != "" {
			rtOpts = append(rtOpts, localproc.WithEnv(u.env, u.v))
		}
	}
	if o.EgressAllow != "" {
		rtOpts = append(rtOpts, localproc.WithEnv(contract.EnvEgressAllow, o.EgressAllow))
	}
	if o.EgressResolver != "" {
		rtOpts = append(rtOpts, localproc.WithEnv(contract.EnvEgressResolver, o.EgressResolver))
	}
	for _, name := range []string{contract.EnvModelCapTokens, contract.EnvModelCapUSD} {
		if v := o.modelCapEnv()(name); v != "" {
			rtOpts = append(rtOpts, localproc.WithEnv(name, v))
		}
	}
	if o.WorkerLogLimit > 0 {
		rtOpts = append(rtOpts, localproc.WithLogLimit(o.WorkerLogLimit))
	}
	if o.PushLimit > 0 {
		rtOpts = append(rtOpts, localproc.WithEnv(contract.EnvPushLimit, strconv.FormatInt(o.PushLimit, 10)))
	}
	if o.PushBudget > 0 {
		rtOpts = append(rtOpts, localproc.WithEnv(contract.EnvPushBudget, strconv.FormatInt(o.PushBudget, 10)))
	}
	var parked *snapshot.DirStore
	if o.ParkAfter > 0 {
		if parked, err = parkStore(data, o.ParkAfter); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, parked)
		rtOpts = append(rtOpts, localproc.WithEnv(contract.EnvParkAfter, o.ParkAfter.String()),
			localproc.WithEnv(contract.EnvParkDir, filepath.Join(data, parkDir)), localproc.WithEnv(contract.EnvHouse, o.House))
	}
	if o.AgentBinDir != "" {
		dir, err := filepath.Abs(o.AgentBinDir)
		if err != nil {
			return nil, err
		}
		rtOpts = append(rtOpts, localproc.WithEnv(contract.EnvAgentBinDir, dir))
	}
	rt, err := localproc.New(rtOpts...)
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	s.closers = append(s.closers, rt)
	// Declare only the families this machine can start: the ones named, or
	// the ones whose CLI is found.
	families, model, effort := o.Families, len(o.Families) > 0, agents.EffortSupport
	if len(families) == 0 {
		families, model, effort = agents.Discover(o.AgentBinDir)
	}
	svc, err := service.New(service.Config{
		House: o.House, Backend: o.Backend, Credential: o.Credential, DefaultAgent: o.DefaultAgent,
		Families: families, Model: model, Effort: effort, AwaitCap: o.AwaitCap,
		MaxWorkers: o.MaxWorkers, WorkerSecret: workerSecret, WorkspaceRoot: filepath.Join(data, "workspaces"),
		// The embedded store is locked to this process: a claim an earlier
		// process left in flight is dead. A DynamoDB table may be shared.
		ExclusiveStore: o.Store == nil,
	}, service.WithStore(st), service.WithRuntime(rt), service.WithGitHost(git), service.WithDoorbell(bell),
		service.WithLogger(o.Logger), withEvents(rec, o.NoEventLog), withParked(parked, o.House))
	if err != nil {
		return nil, err
	}
	s.Service = svc
	// Harnesses a killed server started still run; one that ends without
	// a report must settle its worker as if this server had started it.
	rt.WatchInherited(inheritedPoll)
	s.operator = operator.New(operatorToken, svc, evlog, st, evbell, o.Logger)
	h := withOperator(s.operator,
		confined(o.Logger, rt.Confinement(), rt.Network(), api.New(api.WithService(svc), api.WithAuthenticator(api.StaticToken(token)), api.WithLogger(o.Logger))))
	s.http = newHTTPServer(trustKitchn(h, token), o)
	ln.Install(s.http)
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Logger.Error("serve", "err", err)
		}
	}()
	ok = true
	return s, nil
}

func withEvents(rec *eventlog.Recorder, off bool) service.Option {
	if off {
		return func(*service.Service) {}
	}
	return service.WithEvents(rec)
}

// withOperator serves the operator's routes (package operator) from op and
// everything else from h.
func withOperator(op, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if operator.Owns(r.URL.Path) {
			op.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// agentEnv names the variables an operator sets for agents (provider keys),
// passed to workers by name; nothing else of the server's environment is.
var agentEnv = []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY"}

// OperatorTokenFile is where the operator token lives.
func (s *Server) OperatorTokenFile() string { return s.opts.OperatorTokenFile }

// ConnStats are the listener's connection counts (pkg/connlimit).
func (s *Server) ConnStats() connlimit.Stats { return s.listener.Stats() }

// TokenFile is where the bearer token lives.
func (s *Server) TokenFile() string { return s.opts.TokenFile }

// Shutdown answers the held long polls at once (deliveries/await and the
// workers' inbox polls as at their deadline, the operator's event polls
// empty, its event streams ended), stops accepting calls, lets calls in
// progress finish within ctx, and closes the store: what was written is
// whole. Workers keep running: a restarted server on the same data
// directory finds them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Service.Drain()
	s.operator.Drain()
	err := s.http.Shutdown(ctx)
	s.closeAll()
	return err
}

func (s *Server) closeAll() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i].Close()
	}
	s.closers = nil
}

func findWorkerBin(explicit string) (string, error) {
	if explicit != "" {
		return filepath.Abs(explicit)
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "galley-worker")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("galley-worker"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("cannot find the galley-worker binary: build it (make build) or pass --worker-bin")
}

// LoopbackAddr turns an unspecified listen address into one a worker on
// this machine can call.
func LoopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
