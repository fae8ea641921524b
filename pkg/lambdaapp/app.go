package lambdaapp

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/remote"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// Deps are the parts an App is built from. FromEnv builds each from the
// function's environment and the AWS SDK's default configuration; a test
// or a stand-in stack may set any of them instead.
type Deps struct {
	AWS      *aws.Config // default: config.LoadDefaultConfig
	Secrets  SecretsAPI
	Store    store.Store
	Doorbell service.Doorbell
	// Wakes grants harnesses their own wait (the worker-API function
	// only); default: with GALLEY_WAKE_ROLE_ARN, the SQS doorbell's
	// Granter on that role; without it, none (harnesses wait through
	// galley, holding an invocation).
	Wakes   service.WakeGranter
	Runtime service.Runtime
	GitHost service.GitHost
	Auth    api.Authenticator
	Log     *slog.Logger
	Clock   service.Clock
	// Snapshots removes a released worktree's snapshot (the effects
	// function only); default: with GALLEY_SNAPSHOT_BUCKET, the S3 store
	// of that bucket; without it, none.
	Snapshots service.WorktreeSnapshots
	// ParkedFiles deletes a settled worker's session archive (the
	// functions that settle parked workers: Function.forgetsParked);
	// default: with GALLEY_SNAPSHOT_BUCKET, the archives in that bucket
	// (snapshot.Sessions); without it, none.
	ParkedFiles service.ParkedFiles
}

// App is one function's wiring: the service with exactly the dependencies
// its role may use, and the HTTP handler over its route group.
type App struct {
	Config  Config
	Service *service.Service
	Store   store.Store
	// Runtime is the worker runtime the service uses (an unwired stub in
	// functions that may not touch ECS).
	Runtime service.Runtime
	// Doorbell is the service's doorbell; the reconciler sweeps its idle
	// queues when it can (the SQS doorbell).
	Doorbell service.Doorbell
	Log      *slog.Logger
	// Events records the workers' events (nil in the functions that keep
	// no event log: Function.recordsEvents).
	Events *eventlog.Recorder

	auth  api.Authenticator
	clock service.Clock
	// secrets reads Secrets Manager (the operator token).
	secrets func() (SecretsAPI, error)
}

// MustFromEnv is FromEnv for a function's main: a configuration error is
// logged (naming what is missing) and ends the process, which Lambda
// reports as an init failure.
func MustFromEnv(fn Function) *App {
	a, err := FromEnv(context.Background(), fn)
	if err != nil {
		NewLogger(os.Stdout, fn, "").Error("function init failed", "err", err.Error())
		os.Exit(1)
	}
	return a
}

// FromEnv builds fn's App from its environment.
func FromEnv(ctx context.Context, fn Function) (*App, error) {
	cfg, err := ConfigFromEnv(fn, os.Getenv)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg, Deps{})
}

// New builds an App from cfg, making every dependency d leaves unset.
func New(ctx context.Context, cfg Config, d Deps) (*App, error) {
	const op = galleyerr.Op("lambdaapp.new")
	if d.Log == nil {
		d.Log = NewLogger(os.Stdout, cfg.Function, cfg.LogLevel)
	}
	if d.Clock == nil {
		d.Clock = service.SystemClock
	}
	awsCfg := func() (aws.Config, error) {
		if d.AWS == nil {
			c, err := config.LoadDefaultConfig(ctx)
			if err != nil {
				return aws.Config{}, galleyerr.E(op, galleyerr.Other, "AWS configuration", err)
			}
			d.AWS = &c
		}
		return *d.AWS, nil
	}
	secrets := func() (SecretsAPI, error) {
		if d.Secrets == nil {
			c, err := awsCfg()
			if err != nil {
				return nil, err
			}
			d.Secrets = secretsmanager.NewFromConfig(c)
		}
		return d.Secrets, nil
	}
	fn := cfg.Function

	if d.Store == nil {
		c, err := dynamostore.NewClientFromEnv(ctx)
		if err != nil {
			return nil, err
		}
		d.Store = dynamostore.New(c, cfg.Table)
	}
	if d.Doorbell == nil {
		c, err := awsCfg()
		if err != nil {
			return nil, err
		}
		if d.Doorbell, err = newDoorbell(ctx, c, cfg.QueuePrefix, d.Log); err != nil {
			return nil, galleyerr.E(op, err)
		}
	}
	if d.Wakes == nil && fn == WorkerAPI && cfg.WakeRoleArn != "" {
		bell, ok := d.Doorbell.(*sqsbell.Bell)
		if !ok {
			return nil, galleyerr.Errorf(galleyerr.Invalid, "%s needs the SQS doorbell", contract.EnvWakeRoleArn)
		}
		c, err := awsCfg()
		if err != nil {
			return nil, err
		}
		if d.Wakes, err = sqsbell.NewGranter(bell, sts.NewFromConfig(c), cfg.WakeRoleArn, c.Region); err != nil {
			return nil, galleyerr.E(op, err)
		}
	}
	if d.Runtime == nil {
		// The reconciler stops a settled worker's stray task, and the
		// operator function a cancelled worker's, when it may (its role
		// allows ecs:StopTask and the cluster is configured). The
		// reconciler and the worker API also resume parked workers (a
		// new task: docs/parking.md).
		stops := (fn == Reconciler || fn == Operator || fn == WorkerAPI) && cfg.Cluster != "" && cfg.TaskDefinition != "" &&
			len(cfg.Subnets) > 0 && cfg.WorkerEndpoint != "" && cfg.Repository != ""
		if fn.startsTasks() || stops {
			c, err := awsCfg()
			if err != nil {
				return nil, err
			}
			rt, err := ecsrt.New(ecs.NewFromConfig(c), ecsrt.Config{
				Cluster: cfg.Cluster, TaskDefinition: cfg.TaskDefinition, TaskDefinitions: cfg.TaskDefinitions, Container: cfg.WorkerContainer,
				Subnets: cfg.Subnets, SecurityGroups: cfg.SecurityGroups, AssignPublicIP: cfg.AssignPublicIP,
				Endpoint: cfg.WorkerEndpoint, Repository: cfg.Repository, House: cfg.House,
			}, ecsrt.WithLogger(d.Log),
				// Every function finds a worker's task by its record, where
				// ListTasks lags behind the launch (docs/runtime-ecs.md).
				ecsrt.WithTaskIndex(service.NewTaskIndex(d.Store)))
			if err != nil {
				return nil, err
			}
			d.Runtime = rt
		} else {
			d.Runtime = unwired{fn}
		}
	}
	if d.GitHost == nil {
		g, err := gitHost(ctx, cfg, secrets, d.Clock)
		if err != nil {
			return nil, err
		}
		d.GitHost = g
	}

	// The worker secret: read by the functions that sign or check worker
	// credentials; the others never use it, and get a random one so that
	// their roles need no access to it.
	var workerSecret []byte
	switch {
	case fn.signsWorkers() && cfg.WorkerSecretArn != "":
		sm, err := secrets()
		if err != nil {
			return nil, err
		}
		if workerSecret, err = ReadSecret(ctx, sm, cfg.WorkerSecretArn); err != nil {
			return nil, galleyerr.E(op, "worker secret ("+contract.EnvWorkerSecretArn+")", err)
		}
	case fn.signsWorkers():
		b, err := readSecretFile(cfg.WorkerSecretFile)
		if err != nil {
			return nil, galleyerr.E(op, "worker secret ("+contract.EnvWorkerSecretFile+")", err)
		}
		workerSecret = b
	default:
		workerSecret = make([]byte, 32)
		_, _ = rand.Read(workerSecret)
	}

	if d.Auth == nil && fn.servesKitchn() {
		var src TokenSource
		if cfg.TokenSecretArn != "" {
			sm, err := secrets()
			if err != nil {
				return nil, err
			}
			src = SecretTokens(sm, cfg.TokenSecretArn)
		} else {
			src = FileTokens(cfg.TokenFile)
		}
		ca := NewCachedAuthenticator(src, WithMaxAge(cfg.TokenCache), WithAuthLogger(d.Log),
			WithAuthClock(d.Clock.Now))
		ca.Prefetch(ctx)
		d.Auth = ca
	}

	// The event log: appended off the call's path (package eventlog),
	// each append ringing the worker's event topic for the operator's long
	// polls. What is still queued when a call ends is flushed within
	// EventFlush (FlushEvents).
	var rec *eventlog.Recorder
	svcOpts := []service.Option{service.WithStore(d.Store), service.WithRuntime(d.Runtime), service.WithGitHost(d.GitHost),
		service.WithDoorbell(d.Doorbell), service.WithClock(d.Clock), service.WithLogger(d.Log),
		service.WithWakeGranter(d.Wakes)}
	if d.Snapshots == nil && fn == Effects && cfg.SnapshotBucket != "" {
		c, err := awsCfg()
		if err != nil {
			return nil, err
		}
		client := s3.NewFromConfig(c, func(o *s3.Options) { o.UsePathStyle = cfg.S3PathStyle })
		d.Snapshots = snapshot.Worktrees{Store: snapshot.NewS3Store(client, cfg.SnapshotBucket), House: cfg.House}
	}
	if d.Snapshots != nil {
		svcOpts = append(svcOpts, service.WithSnapshots(d.Snapshots))
	}
	if d.ParkedFiles == nil && fn.forgetsParked() && cfg.SnapshotBucket != "" {
		c, err := awsCfg()
		if err != nil {
			return nil, err
		}
		client := s3.NewFromConfig(c, func(o *s3.Options) { o.UsePathStyle = cfg.S3PathStyle })
		d.ParkedFiles = snapshot.Sessions{Store: snapshot.NewS3Store(client, cfg.SnapshotBucket), House: cfg.House}
	}
	if d.ParkedFiles != nil {
		svcOpts = append(svcOpts, service.WithParkedFiles(d.ParkedFiles))
	}
	if evlog, ok := d.Store.(eventlog.Log); ok && fn.recordsEvents() {
		rec = eventlog.New(evlog, d.Doorbell, d.Log)
		svcOpts = append(svcOpts, service.WithEvents(rec))
	}
	svc, err := service.New(service.Config{
		House: cfg.House, Backend: cfg.Backend, Credential: cfg.Credential,
		DefaultAgent: cfg.DefaultAgent, Families: cfg.Families, Model: len(cfg.Families) > 0,
		Effort: "unsupported", AwaitCap: cfg.AwaitCap, ClockSkew: DefaultClockSkew,
		MaxWorkers: cfg.MaxWorkers, WorkerSecret: workerSecret, WorkspaceRoot: cfg.WorkspaceRoot,
	}, svcOpts...)
	if err != nil {
		return nil, err
	}
	return &App{Config: cfg, Service: svc, Store: d.Store, Runtime: d.Runtime, Doorbell: d.Doorbell, Log: d.Log,
		Events: rec, auth: d.Auth, clock: d.Clock, secrets: secrets}, nil
}

// gitHost returns the house repository's host for the functions that use
// it: effects creates and deletes branches, reads tells their liveness. A
// local repository (a path or file:// URL: the aws-local stack) is served
// by package githost, a remote one (https) by package githost/remote with
// the git credential from Secrets Manager (GALLEY_SECRET_GIT; without it,
// as in the reads function, only a public repository can be read, and a
// branch's liveness is otherwise unverifiable).
func gitHost(ctx context.Context, cfg Config, secrets func() (SecretsAPI, error), clock service.Clock) (service.GitHost, error) {
	if cfg.Function != Effects && cfg.Function != Reads {
		return unwired{cfg.Function}, nil
	}
	if _, err := githost.LocalPath(cfg.Repository); err == nil {
		r, err := githost.Open(ctx, cfg.Repository)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	var token remote.TokenFunc
	if cfg.GitSecretArn != "" {
		sm, err := secrets()
		if err != nil {
			return nil, err
		}
		token = cachedSecret(sm, cfg.GitSecretArn, DefaultTokenCache, clock.Now)
	}
	var opts []remote.Option
	if cfg.GitUsername != "" {
		opts = append(opts, remote.WithUser(cfg.GitUsername))
	}
	return remote.New(cfg.Repository, token, opts...)
}

// cachedSecret reads a secret's current value at most once per maxAge,
// so that a rotation is picked up within it.
func cachedSecret(sm SecretsAPI, arn string, maxAge time.Duration, now func() time.Time) remote.TokenFunc {
	var (
		mu      sync.Mutex
		value   string
		fetched time.Time
	)
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if !fetched.IsZero() && now().Sub(fetched) < maxAge {
			return value, nil
		}
		v, err := ReadSecret(ctx, sm, arn)
		if err != nil {
			if !fetched.IsZero() {
				return value, nil // the last value, until the secret can be read again
			}
			return "", err
		}
		value, fetched = string(v), now()
		return value, nil
	}
}

// Handler serves routes (api.WithEffects(a.Service), say) the way API
// Gateway invokes a function: arrivals stamped by the gateway's clock,
// requests logged with the Lambda request id, every call bounded by the
// invocation's deadline less a margin so the function answers before
// Lambda ends it.
func (a *App) Handler(routes ...api.Option) http.Handler {
	opts := []api.Option{
		api.WithLogger(a.Log),
		api.WithArrival(Arrival(a.clock.Now)),
		api.WithRequestID(func(r *http.Request) string {
			if id := RequestID(r.Context()); id != "" {
				return id
			}
			if rc, ok := core.GetAPIGatewayV2ContextFromContext(r.Context()); ok {
				return rc.RequestID
			}
			return ""
		}),
	}
	if a.auth != nil {
		opts = append(opts, api.WithAuthenticator(a.auth))
	}
	return a.flushing(Bounded(rejoinKey(api.New(append(opts, routes...)...))))
}

// EventFlush bounds how long a call waits, before its answer is returned,
// for the events it recorded to be appended: Lambda may freeze the
// process once the handler returns. The appends run while the call does
// its own work, so this is usually the tail of one append and ring; what
// is left stays queued and is appended when the instance next runs (or is
// lost with it: the log is best-effort, and never fails a call).
const EventFlush = 200 * time.Millisecond

// FlushEvents waits up to EventFlush (and within ctx's deadline) for the
// recorded events to be appended.
func (a *App) FlushEvents(ctx context.Context) {
	if a.Events == nil {
		return
	}
	d := EventFlush
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	if err := a.Events.Flush(fctx); err != nil {
		a.Log.Debug("events still queued when the call ended", "err", err.Error())
	}
}

func (a *App) flushing(h http.Handler) http.Handler {
	if a.Events == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		a.FlushEvents(r.Context())
	})
}

// rejoinKey undoes a split the API Gateway adapter makes: it splits every
// header but a few on commas, so an Idempotency-Key with a comma (keys are
// printable ASCII without spaces, commas allowed) would reach the handler
// as several values and no longer equal request.key. Keys have no spaces,
// so joining the values with commas restores it exactly.
func rejoinKey(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if vs := r.Header.Values("Idempotency-Key"); len(vs) > 1 {
			r.Header.Set("Idempotency-Key", strings.Join(vs, ","))
		}
		h.ServeHTTP(w, r)
	})
}

// Arrival takes a request's arrival from API Gateway's requestContext.timeEpoch:
// one clock for every function instance, so that a lookup's promise of
// absence ("no copy that arrived before now will apply") compares
// arrivals stamped by one clock with promises stamped by the functions'
// clocks, which Config.ClockSkew covers. Without a gateway context (a
// direct invoke) it is now.
func Arrival(now func() time.Time) func(*http.Request) time.Time {
	return func(r *http.Request) time.Time {
		if rc, ok := core.GetAPIGatewayV2ContextFromContext(r.Context()); ok && rc.TimeEpoch > 0 {
			return time.UnixMilli(rc.TimeEpoch)
		}
		return now()
	}
}

// Bounded runs h within the invocation's deadline less a margin (a tenth of
// the time left, at most a second), so a slow dependency ends in an answer
// the client can read rather than in Lambda's "Task timed out".
func Bounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer setCurrent(r.Context())()
		ctx := r.Context()
		if dl, ok := ctx.Deadline(); ok {
			margin := min(time.Until(dl)/10, time.Second)
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl.Add(-margin))
			defer cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// Invocation wraps an event handler (the reconciler's) the same way:
// logs carry the request id, and the work ends before the deadline.
func Invocation[E any](h func(context.Context, E) error) func(context.Context, E) error {
	return func(ctx context.Context, ev E) error {
		defer setCurrent(ctx)()
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl.Add(-min(time.Until(dl)/10, time.Second)))
			defer cancel()
		}
		return h(ctx, ev)
	}
}

// unwired stands in for the runtime and the git host in functions whose
// role may not use them: reaching one is a wiring bug, answered as
// Unavailable (uncertain), never as a refusal.
type unwired struct{ fn Function }

func (u unwired) err(what string) error {
	return galleyerr.Errorf(galleyerr.Unavailable, "the %s function has no %s", u.fn, what)
}

func (u unwired) Start(context.Context, service.WorkerSpec) error { return u.err("worker runtime") }
func (u unwired) Stop(context.Context, string) error              { return u.err("worker runtime") }
func (u unwired) Liveness(context.Context, string) (service.Liveness, error) {
	return service.LivenessUnknown, u.err("worker runtime")
}
func (u unwired) Livenesses(context.Context, []string) (map[string]service.Liveness, error) {
	return nil, u.err("worker runtime")
}
func (u unwired) RemoveWorkspace(context.Context, string, string) error {
	return u.err("worker runtime")
}
func (u unwired) DefaultHead(context.Context) (string, error) { return "", u.err("git host") }
func (u unwired) BranchHead(context.Context, string) (string, bool, error) {
	return "", false, u.err("git host")
}
func (u unwired) ExistingBranches(context.Context, []string) (map[string]bool, error) {
	return nil, u.err("git host")
}
func (u unwired) CreateBranch(context.Context, string, string) error { return u.err("git host") }
func (u unwired) DeleteBranch(context.Context, string) error         { return u.err("git host") }
