// Package ecsstandin is a stand-in for Amazon ECS on one machine: an HTTP
// server speaking ECS's awsJson1_1 protocol (RegisterTaskDefinition,
// DescribeTaskDefinition, CreateCluster, DescribeClusters, RunTask with
// clientToken idempotency, StopTask, DescribeTasks, ListTasks) whose tasks
// run as local processes through package localproc, started from their
// task definition as Fargate starts them. It emits every task state change
// in EventBridge's "ECS Task State Change" format to a sink, records every
// request it receives so that tests can assert on the exact wire request,
// and injects faults (capacity failures, throttling, any error, tasks that
// stay invisible for a while).
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
// lies in a shared volume or a mounted file system: WithVolume,
// WithFileSystem), and records the exit code. Tasks live in memory: a
// stand-in that restarts stops the tasks of the one before.
package ecsstandin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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
	volumes      []string          // host folders every task sees at the same path
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
	requests   []Request
	faults     []*Fault
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

// WithVolume shares the host folder dir with every task at the same path,
// as an EFS file system mounted in every container: a GALLEY_WORKSPACE
// inside it is used as is (it outlives the task), not rooted in the task's
// own storage.
func WithVolume(dir string) Option { return func(s *Server) { s.volumes = append(s.volumes, dir) } }

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
	for i, v := range s.volumes {
		if !filepath.IsAbs(v) {
			return nil, fmt.Errorf("ecsstandin: volume %q is not an absolute path", v)
		}
		s.volumes[i] = filepath.Clean(v)
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
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := newUUID()
	w.Header().Set("X-Amzn-Requestid", reqID)
	target := r.Header.Get("X-Amz-Target")
	op, _ := strings.CutPrefix(target, TargetPrefix)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	rec := Request{Op: op, Target: target, Body: body, Time: time.Now()}
	answer := func(status int, v any) {
		rec.Status = status
		s.mu.Lock()
		s.requests = append(s.requests, rec)
		s.mu.Unlock()
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", ContentType)
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}
	fail := func(e *apiError) {
		if e.retryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(e.retryAfter))
		}
		w.Header().Set("X-Amzn-Errortype", e.code)
		answer(e.status, e.body())
	}
	switch {
	case err != nil:
		fail(errf(400, "SerializationException", "cannot read the body"))
		return
	case len(body) > maxBody:
		fail(errf(413, "SerializationException", "the body is larger than 1 MiB"))
		return
	case r.Method != http.MethodPost:
		fail(errf(405, "UnknownOperationException", "ECS takes POST only"))
		return
	case !strings.HasPrefix(r.Header.Get("Content-Type"), ContentType):
		fail(errf(400, "SerializationException", "Content-Type must be %s", ContentType))
		return
	case !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "):
		fail(errf(403, "MissingAuthenticationTokenException", "Missing Authentication Token"))
		return
	case !strings.HasPrefix(target, TargetPrefix):
		fail(errf(400, "UnknownOperationException", "no operation named in X-Amz-Target"))
		return
	}
	if f := s.fault(op); f != nil {
		if f.Failure != "" && op == OpRunTask {
			answer(200, map[string]any{"tasks": []any{}, "failures": []failure{{Reason: f.Failure, Detail: f.Detail}}})
			return
		}
		status := f.Status
		if status == 0 {
			status = 400
		}
		fail(&apiError{status: status, code: f.Code, message: f.Message, retryAfter: f.RetryAfter})
		return
	}
	if op == OpRunTask {
		if fails := s.quotaFailure(body); fails != nil {
			answer(200, map[string]any{"tasks": []any{}, "failures": fails})
			return
		}
	}
	var (
		out  any
		aerr *apiError
	)
	switch op {
	case OpRegisterTaskDefinition:
		var in registerInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.registerTaskDefinition(in)
		}
	case OpDescribeTaskDefinition:
		var in describeTaskDefinitionInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.describeTaskDefinition(in)
		}
	case OpCreateCluster:
		var in createClusterInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.createClusterOp(in)
		}
	case OpDescribeClusters:
		var in describeClustersInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.describeClusters(in)
		}
	case OpRunTask:
		var in runTaskInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.runTask(in, body)
		}
	case OpStopTask:
		var in stopTaskInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.stopTask(in)
		}
	case OpDescribeTasks:
		var in describeTasksInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.describeTasks(in)
		}
	case OpListTasks:
		var in listTasksInput
		if aerr = decode(body, &in); aerr == nil {
			out, aerr = s.listTasks(in)
		}
	default:
		aerr = errf(400, "UnknownOperationException", "the stand-in does not serve %s", op)
	}
	if aerr != nil {
		fail(aerr)
		return
	}
	answer(200, out)
}

func decode(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errf(400, "SerializationException", "the body is not the operation's JSON: %v", err)
	}
	return nil
}

// apiError is an error answer: HTTP status and {"__type", "message"}.
type apiError struct {
	status      int
	code        string
	message     string
	retryAfter  int
	resourceIDs []string // ConflictException
}

func errf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func (e *apiError) body() map[string]any {
	b := map[string]any{"__type": e.code, "message": e.message}
	if len(e.resourceIDs) > 0 {
		b["resourceIds"] = e.resourceIDs
	}
	return b
}

// Requests returns every request received so far, in order; with ops,
// only those of these operations.
func (s *Server) Requests(ops ...string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if len(ops) == 0 || contains(ops, r.Op) {
			r.Body = bytes.Clone(r.Body)
			out = append(out, r)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// fault returns the fault that answers a call of op, if any, counting it.
func (s *Server) fault(op string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Op != "" && f.Op != op {
			continue
		}
		if f.Failure != "" && op != OpRunTask {
			continue
		}
		answer := *f
		if f.Times > 0 {
			if f.Times--; f.Times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return &answer
	}
	return nil
}

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

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
