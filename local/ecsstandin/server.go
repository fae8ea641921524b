// Package ecsstandin is a stand-in for Amazon ECS on one machine: an HTTP
// server speaking ECS's awsJson1_1 protocol (RegisterTaskDefinition,
// DescribeTaskDefinition, CreateCluster, DescribeClusters, RunTask with
// clientToken idempotency, StopTask, DescribeTasks, ListTasks) whose tasks
// run as local processes through package localproc, started from their
// task definition as Fargate starts them. It emits every task state change
// in EventBridge's "ECS Task State Change" format to a sink, records every
// request it receives so that tests can assert on the exact wire request,
// and injects faults (capacity failures, throttling, any error, tasks that
// stay invisible for a while). The protocol's kernel (routing, errors,
// request record, fault queue) is local/awswire, which the Secrets Manager
// stand-in shares.
//
// What it fakes and how is in docs/runtime-ecs.md. In short: a task runs
// its definition's one container. In container mode (WithContainers,
// containers.go) an image reference that maps to a local container image
// runs as a container of it through package container, its definition's
// user, linuxParameters, stopTimeout, size, EFS access points and
// readonlyRootFilesystem applied as Fargate applies them. Otherwise an
// image reference maps to a local Image (WithImage): entrypoint, command,
// environment and working folder, host paths for its programs; an image it
// cannot map fails the task as a failed pull does. The container's process
// is Docker's merge of the definition (and the override) with the image;
// its environment is exactly the image's, the definition's, the secrets
// the execution role reads from Secrets Manager (WithSecrets), the
// override's, and the variables the ECS agent adds (region, metadata and,
// with a task role, the credentials endpoint: WithTaskCredentials), and
// nothing of the host's. One task is one process tree started by the
// stand-in's entrypoint (Entrypoint), which plays the container's init:
// it roots GALLEY_WORKSPACE in the task's own storage folder (unless it
// lies in a mounted file system: WithFileSystem), and records the exit
// code. Tasks live in memory: a
// stand-in that restarts stops the tasks of the one before.
package ecsstandin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/local/container"
	"github.com/galley-run/galley/pkg/runtime/localproc"
)

// Defaults of the options.
const (
	DefaultRegion  = "us-east-1"
	DefaultAccount = "000000000000"
	// DefaultContainer is the worker task definition's container name.
	DefaultContainer = "worker"
	// DefaultGrace is ECS's default stopTimeout: SIGTERM, then SIGKILL.
	DefaultGrace = 30 * time.Second
	// maxBody bounds a request body.
	maxBody = 1 << 20
	// maxOverrides is ECS's limit on the size of a task's overrides.
	maxOverrides = 8192
	// watchEvery is how often the stand-in looks for ended tasks.
	watchEvery = 25 * time.Millisecond
)

// Server is the stand-in; it is an http.Handler. Create it with New and
// end it with Close.
type Server struct {
	dir          string
	entrypoint   string // a binary that calls Entrypoint first thing
	region       string
	account      string
	fileSystems  map[string]string // EFS file system ID: the host folder a mount shows
	images       []imageRule
	secrets      SecretsSource
	taskCreds    TaskCredentials
	endpointAddr string
	grace        time.Duration
	log          *slog.Logger
	sink         Sink

	endpoint    *http.Server // the task endpoint: credentials and metadata
	endpointURL string

	procs *taskProcs

	containers   *container.Runtime // container mode (containers.go)
	ctrNet       ContainerNetwork
	ctrImages    []containerImage
	accessPoints map[string]AccessPoint
	endpointLn   net.Listener // the task endpoint's, if given

	mu         sync.Mutex
	closed     bool
	taskDefs   map[string][]*taskDef // by family, revision order
	clusters   map[string]*cluster   // by name
	tasks      map[string]*task      // by id
	order      []*task               // creation order
	tokens     map[string]tokenRecord
	visibility time.Duration
	events     [][]byte

	clock         func() time.Time // ages client tokens
	vcpuQuota     float64          // negative: none
	listLag       time.Duration
	startFailures []*StartFailure
	listFrom      map[string]time.Time // task id: when ListTasks first shows it
	runningUntil  map[string]time.Time // task id: until when ListTasks shows it desired RUNNING

	launches  sync.WaitGroup
	stopWatch chan struct{}
	watchDone chan struct{}

	q *queue

	api      *awswire.Service
	requests awswire.Recorder[Request]
	faults   awswire.Faults
}

// tokenRecord is what a clientToken made: the request's fingerprint and
// the task.
type tokenRecord struct {
	fingerprint string
	taskID      string
	at          time.Time // when RunTask made it, by the stand-in's clock
}

// Request is one request the stand-in received, as it arrived.
type Request struct {
	Op     string // from X-Amz-Target, without the prefix
	Target string
	Body   []byte
	Status int // the status it was answered with
	Time   time.Time
}

// Option configures a Server.
type Option func(*Server)

// WithDir sets the folder for task storage and process records (required).
func WithDir(dir string) Option { return func(s *Server) { s.dir = dir } }

// WithEntrypoint sets the binary that runs each task's init: one whose main
// (or TestMain) calls Entrypoint before anything else. The default is the
// running executable.
func WithEntrypoint(path string) Option { return func(s *Server) { s.entrypoint = path } }

// WithFileSystem makes the EFS file system id exist: a container that
// mounts it (a task definition volume's efsVolumeConfiguration, mounted by
// a mountPoint) sees the host folder dir there. Processes see host paths,
// so only GALLEY_WORKSPACE is translated: one below the mount's container
// path names the same place below dir. Access points and rootDirectory are
// not modelled: dir is what the mount shows. A task mounting a file system
// the stand-in does not know fails to start.
func WithFileSystem(id, dir string) Option {
	return func(s *Server) {
		if s.fileSystems == nil {
			s.fileSystems = map[string]string{}
		}
		s.fileSystems[id] = dir
	}
}

// WithRegion and WithAccount set what the ARNs name.
func WithRegion(region string) Option   { return func(s *Server) { s.region = region } }
func WithAccount(account string) Option { return func(s *Server) { s.account = account } }

// WithGrace sets the stop timeout: how long a stopped task's processes get
// after SIGTERM before SIGKILL.
func WithGrace(d time.Duration) Option { return func(s *Server) { s.grace = d } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithSink sends every task state change event to sink, in order.
func WithSink(sink Sink) Option { return func(s *Server) { s.sink = sink } }

// New returns a running stand-in. Processes an earlier stand-in left in dir
// are stopped: its tasks are gone with its memory.
func New(opts ...Option) (*Server, error) {
	s := &Server{
		region: DefaultRegion, account: DefaultAccount,
		grace: DefaultGrace, log: slog.New(slog.DiscardHandler),
		taskDefs: map[string][]*taskDef{}, clusters: map[string]*cluster{},
		tasks: map[string]*task{}, tokens: map[string]tokenRecord{},
		stopWatch: make(chan struct{}), watchDone: make(chan struct{}),
		clock: time.Now, vcpuQuota: -1, listLag: DefaultListLag,
		listFrom: map[string]time.Time{}, runningUntil: map[string]time.Time{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.dir == "" {
		return nil, fmt.Errorf("ecsstandin: a folder is required")
	}
	if s.grace <= 0 || s.log == nil || s.clock == nil {
		return nil, fmt.Errorf("ecsstandin: the grace must be positive and the logger set")
	}
	var err error
	if s.entrypoint == "" {
		if s.entrypoint, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("ecsstandin: cannot find the entrypoint: %w", err)
		}
	}
	if s.dir, err = filepath.Abs(s.dir); err != nil {
		return nil, err
	}
	for id, dir := range s.fileSystems {
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("ecsstandin: file system %s: %q is not an absolute path", id, dir)
		}
		s.fileSystems[id] = filepath.Clean(dir)
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "tasks"), 0o700); err != nil {
		return nil, err
	}
	lp, err := localproc.New(
		localproc.WithDir(filepath.Join(s.dir, "procs")),
		localproc.WithHarness(s.entrypoint),
		// The container's own GALLEY_WORKER_ENDPOINT replaces it.
		localproc.WithEndpoint("http://ecs-standin.invalid/"),
		localproc.WithGrace(s.grace),
		localproc.WithLogger(s.log),
	)
	if err != nil {
		return nil, err
	}
	s.procs = newTaskProcs(lp)
	if old, err := s.procs.Handles(); err == nil {
		for _, h := range old {
			_ = s.procs.Stop(context.Background(), h)
		}
	}
	if err := s.startTaskEndpoint(); err != nil {
		_ = s.procs.Close()
		return nil, fmt.Errorf("ecsstandin: cannot serve the task endpoint: %w", err)
	}
	s.q = newQueue(s.sink, s.log)
	s.api = s.newAPI()
	go s.watch()
	return s, nil
}

// Close stops every task (SIGTERM, SIGKILL after the grace), emits their
// last state changes, and delivers the events still queued.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.launches.Wait()
	s.mu.Lock()
	for _, t := range s.order {
		if t.launched && t.lastStatus != statusStopped {
			s.requestStopLocked(t, "Stand-in shut down", true)
		}
	}
	s.mu.Unlock()
	err := s.procs.Close() // waits for the pending stops
	close(s.stopWatch)
	<-s.watchDone
	s.sweep() // the exits the watcher had not seen yet
	s.q.close()
	_ = s.endpoint.Close()
	return err
}

// ServeHTTP serves the ECS API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.api.ServeHTTP(w, r) }

// newAPI is the stand-in's awsJson service: its checks, in ECS's order,
// its operations, its faults and its request record.
func (s *Server) newAPI() *awswire.Service {
	return &awswire.Service{
		Name: "ECS", TargetPrefix: TargetPrefix, ContentType: ContentType, MaxBody: maxBody,
		Admit: func(r *http.Request) (string, *awswire.Error) {
			switch {
			case r.Method != http.MethodPost:
				return "", awswire.Errorf(405, "UnknownOperationException", "ECS takes POST only")
			case !strings.HasPrefix(r.Header.Get("Content-Type"), ContentType):
				return "", awswire.Errorf(400, "SerializationException", "Content-Type must be %s", ContentType)
			case !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "):
				return "", awswire.Errorf(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
			}
			return "", nil
		},
		Ops: map[string]awswire.Handler{
			OpRegisterTaskDefinition: awswire.Op(func(in *registerInput) (any, *awswire.Error) { return s.registerTaskDefinition(*in) }),
			OpDescribeTaskDefinition: awswire.Op(func(in *describeTaskDefinitionInput) (any, *awswire.Error) { return s.describeTaskDefinition(*in) }),
			OpCreateCluster:          awswire.Op(func(in *createClusterInput) (any, *awswire.Error) { return s.createClusterOp(*in) }),
			OpDescribeClusters:       awswire.Op(func(in *describeClustersInput) (any, *awswire.Error) { return s.describeClusters(*in) }),
			OpRunTask: func(body []byte) (any, *awswire.Error) {
				// The account's vCPU quota refuses before the input is read.
				if fails := s.quotaFailure(body); fails != nil {
					return map[string]any{"tasks": []any{}, "failures": fails}, nil
				}
				var in runTaskInput
				if e := awswire.Decode(body, &in); e != nil {
					return nil, e
				}
				return s.runTask(in, body)
			},
			OpStopTask:      awswire.Op(func(in *stopTaskInput) (any, *awswire.Error) { return s.stopTask(*in) }),
			OpDescribeTasks: awswire.Op(func(in *describeTasksInput) (any, *awswire.Error) { return s.describeTasks(*in) }),
			OpListTasks:     awswire.Op(func(in *listTasksInput) (any, *awswire.Error) { return s.listTasks(*in) }),
		},
		Faults: &s.faults,
		Record: func(x awswire.Exchange) {
			s.requests.Add(Request{Op: x.Op, Target: x.Target, Body: x.Body, Status: x.Status, Time: x.Time})
		},
	}
}

// Requests returns every request received so far, in order; with ops,
// only those of these operations.
func (s *Server) Requests(ops ...string) []Request {
	out := s.requests.All(func(r Request) bool { return len(ops) == 0 || slices.Contains(ops, r.Op) })
	for i := range out {
		out[i].Body = bytes.Clone(out[i].Body)
	}
	return out
}

// Fault is an answer the stand-in gives instead of serving a call.
type Fault struct {
	// Op is the operation it answers, such as "RunTask"; empty: any.
	Op string
	// Failure, for RunTask, answers 200 with no task and one failures
	// entry of this reason (and Detail), as ECS reports a task it could
	// not place: "RESOURCE:MEMORY", "AGENT", or Fargate's "Capacity is
	// unavailable at this time. ...".
	Failure, Detail string
	// Otherwise the call fails with error Code (such as
	// "ThrottlingException") and Message, with HTTP Status (400 if 0)
	// and a Retry-After header of RetryAfter seconds if positive.
	Code, Message string
	Status        int
	RetryAfter    int
	// Times is how many calls it answers; 0 means every call until
	// ClearFaults.
	Times int
}

// Inject adds a fault; faults answer in the order injected.
func (s *Server) Inject(f Fault) {
	if f.Failure == "" {
		s.faults.Inject(awswire.Fault{Op: f.Op, Times: f.Times,
			Err: &awswire.Error{Status: f.Status, Code: f.Code, Message: f.Message, RetryAfter: f.RetryAfter}})
		return
	}
	// A placement failure answers RunTask alone: one of another
	// operation answers nothing.
	if f.Op != "" && f.Op != OpRunTask {
		return
	}
	s.faults.Inject(awswire.Fault{Op: OpRunTask, Times: f.Times,
		Out: map[string]any{"tasks": []any{}, "failures": []failure{{Reason: f.Failure, Detail: f.Detail}}}})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// SetVisibilityDelay makes tasks created from now on invisible to
// DescribeTasks and ListTasks for d, as ECS's eventual consistency may
// right after RunTask. StopTask still finds them by ARN.
func (s *Server) SetVisibilityDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.visibility = d
}

// Events returns every task state change event emitted so far, in order.
func (s *Server) Events() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.events))
	for i, e := range s.events {
		out[i] = bytes.Clone(e)
	}
	return out
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
