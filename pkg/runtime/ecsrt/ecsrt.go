package ecsrt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/service"
)

// ECSAPI is the part of the ECS API the runtime calls; *ecs.Client
// implements it, and a fault-injecting decorator can wrap it.
type ECSAPI interface {
	RunTask(ctx context.Context, in *ecs.RunTaskInput, optFns ...func(*ecs.Options)) (*ecs.RunTaskOutput, error)
	StopTask(ctx context.Context, in *ecs.StopTaskInput, optFns ...func(*ecs.Options)) (*ecs.StopTaskOutput, error)
	DescribeTasks(ctx context.Context, in *ecs.DescribeTasksInput, optFns ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error)
	ListTasks(ctx context.Context, in *ecs.ListTasksInput, optFns ...func(*ecs.Options)) (*ecs.ListTasksOutput, error)
}

// TaskIndex remembers which task runs a worker, across processes (the lead
// backs it with the worker's store record). It is optional: without it the
// runtime finds a task by its startedBy with ListTasks.
type TaskIndex interface {
	// TaskARN returns the task recorded for handle; ok is false if none.
	TaskARN(ctx context.Context, handle string) (arn string, ok bool, err error)
	// SetTaskARN records handle's task once RunTask has named it.
	SetTaskARN(ctx context.Context, handle, arn string) error
}

// OverrideEnv lists every variable the container overrides may hold: the
// worker's facts, on top of the task definition's environment. Nothing
// here is secret: the bootstrap code is good for one exchange, shortly
// after the launch (see package bootstrap).
var OverrideEnv = []string{contract.EnvAgent, contract.EnvBranch, contract.EnvRepository, contract.EnvWorkerBootstrap, contract.EnvWorkerEndpoint, contract.EnvWorkerHandle, contract.EnvWorkspace}

// Config says where and how worker tasks run.
type Config struct {
	Cluster        string   // cluster name or ARN (required)
	TaskDefinition string   // family, family:revision or ARN (required)
	Container      string   // the worker container's name in the task definition (required)
	Subnets        []string // awsvpc subnets (required: Fargate tasks use awsvpc)
	SecurityGroups []string
	AssignPublicIP bool
	// CapacityProvider, when set (FARGATE_SPOT, say), replaces launch type
	// FARGATE with a one-provider strategy.
	CapacityProvider string
	PlatformVersion  string // empty: LATEST

	Endpoint   string // the worker API's base URL, for the harness (required)
	Repository string // the house's repository URL (required); no credentials in it
	House      string // the galley:house tag

	// WorkspaceRoot, when set, is the mount point inside the container of
	// the file system (EFS) that workspaces live on: every worker's
	// workspace must lie under it, and RemoveWorkspace deletes one with a
	// cleanup task. Empty: workspaces live in each task's ephemeral storage
	// and go with it.
	WorkspaceRoot string
}

// Defaults of the options.
const (
	DefaultAttempts = 3
	DefaultBackoff  = 200 * time.Millisecond
	defaultMemo     = 4096
	maxBackoff      = 2 * time.Second
	// stopReason is the StopTask reason ECS shows as stoppedReason.
	stopReason = "galley: worker stopped"
)

// Runtime starts, stops and observes workers as ECS tasks. It is safe for
// concurrent use.
type Runtime struct {
	ecs      ECSAPI
	cfg      Config
	log      *slog.Logger
	index    TaskIndex
	attempts int
	backoff  time.Duration
	memoMax  int

	mu   sync.Mutex
	memo map[string]string // handle -> task ARN: never changes once known
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runtime) { r.log = l } }

// WithTaskIndex lets the runtime record and find tasks in idx.
func WithTaskIndex(idx TaskIndex) Option { return func(r *Runtime) { r.index = idx } }

// WithRetry sets how many RunTask attempts one Start makes (throttled or of
// unknown outcome; a capacity failure is answered at once) and the first
// pause between them, doubled each time.
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(r *Runtime) { r.attempts, r.backoff = attempts, backoff }
}

// New returns a Runtime over client.
func New(client ECSAPI, cfg Config, opts ...Option) (*Runtime, error) {
	const op = galleyerr.Op("ecsrt.new")
	r := &Runtime{
		ecs: client, cfg: cfg, log: slog.New(slog.DiscardHandler),
		attempts: DefaultAttempts, backoff: DefaultBackoff, memoMax: defaultMemo,
		memo: map[string]string{},
	}
	for _, o := range opts {
		o(r)
	}
	switch {
	case client == nil:
		return nil, galleyerr.E(op, galleyerr.Invalid, "no ECS client")
	case cfg.Cluster == "" || cfg.TaskDefinition == "" || cfg.Container == "":
		return nil, galleyerr.E(op, galleyerr.Invalid, "cluster, task definition and container are required")
	case len(cfg.Subnets) == 0:
		return nil, galleyerr.E(op, galleyerr.Invalid, "Fargate tasks need at least one subnet")
	case cfg.Endpoint == "" || cfg.Repository == "":
		return nil, galleyerr.E(op, galleyerr.Invalid, "the worker endpoint and the repository are required")
	case hasPassword(cfg.Endpoint) || hasPassword(cfg.Repository):
		// Both reach the task overrides, which are not secret.
		return nil, galleyerr.E(op, galleyerr.Invalid, "the worker endpoint and the repository URL must not hold credentials")
	case r.attempts < 1 || r.backoff < 0:
		return nil, galleyerr.E(op, galleyerr.Invalid, "RunTask needs at least one attempt and a non-negative backoff")
	case r.log == nil:
		return nil, galleyerr.E(op, galleyerr.Invalid, "nil logger")
	case cfg.WorkspaceRoot != "" && (!path.IsAbs(cfg.WorkspaceRoot) || path.Clean(cfg.WorkspaceRoot) == "/"):
		return nil, galleyerr.E(op, galleyerr.Invalid, "the workspace root must be an absolute path below /")
	}
	r.cfg.WorkspaceRoot = cleanRoot(cfg.WorkspaceRoot)
	return r, nil
}

// hasPassword reports whether a URL carries user information.
func hasPassword(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.User != nil
}

// noRetry turns the SDK's own retries off for one call: Start retries
// RunTask itself, so that it knows whether any attempt may have launched a
// task before it answers rate-limited.
func noRetry(o *ecs.Options) { o.Retryer = aws.NopRetryer{} }

// Start launches the worker's task with RunTask, once per handle: the
// clientToken comes from spec.IdempotencyToken, so a retried Start (here, in
// another process, after a lost answer) returns the task the first one
// made. It returns once ECS accepted the task, never waiting for it to run.
//
// A RunTask refused for capacity or throttling answers RateLimited (with
// RetryAfterSeconds when ECS said) only if no attempt of this call can have
// launched a task; otherwise the outcome is uncertain (Unavailable).
// RateLimited speaks for this call alone: whether an earlier Start of the
// same launch made a task is the caller's to know.
func (r *Runtime) Start(ctx context.Context, spec service.WorkerSpec) error {
	const op = galleyerr.Op("ecsrt.start")
	switch {
	case spec.Handle == "":
		return galleyerr.E(op, galleyerr.Invalid, "no worker handle")
	case spec.Token == "":
		return galleyerr.E(op, galleyerr.Invalid, "no worker token")
	}
	if r.cfg.WorkspaceRoot != "" {
		// A workspace elsewhere would be in the task's ephemeral storage,
		// lost with the task while its worktree record says it exists.
		if err := r.checkWorkspace(spec.WorkspacePath); err != nil {
			return galleyerr.E(op, err)
		}
	}
	if _, ok := r.memoGet(spec.Handle); ok {
		return nil
	}
	in := r.runTaskInput(spec)
	arn, err := r.runTask(ctx, in, bootstrap.Code(spec.Token, spec.Handle))
	if err != nil {
		return wrap(op, err)
	}
	r.remember(ctx, spec.Handle, arn)
	r.log.Info("worker task started", "handle", spec.Handle, "task", arn, "run", spec.Run, "task_name", spec.Task)
	return nil
}

// runTaskInput builds the RunTask request of spec. It is a pure function of
// spec and the config: a retry with another request under the same
// clientToken would be refused as a conflict.
func (r *Runtime) runTaskInput(spec service.WorkerSpec) *ecs.RunTaskInput {
	idem := spec.IdempotencyToken
	if idem == "" {
		// Still one task per handle.
		idem = "handle:" + spec.Handle
	}
	vars := map[string]string{
		contract.EnvWorkerHandle:    spec.Handle,
		contract.EnvWorkerEndpoint:  r.cfg.Endpoint,
		contract.EnvRepository:      r.cfg.Repository,
		contract.EnvBranch:          spec.Branch,
		contract.EnvWorkspace:       spec.WorkspacePath,
		contract.EnvAgent:           spec.Agent,
		contract.EnvWorkerBootstrap: bootstrap.Code(spec.Token, spec.Handle),
	}
	var env []types.KeyValuePair
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if vars[k] != "" {
			env = append(env, types.KeyValuePair{Name: aws.String(k), Value: aws.String(vars[k])})
		}
	}
	in := r.baseInput()
	in.ClientToken = aws.String(ClientToken(idem))
	in.StartedBy = aws.String(StartedBy(spec.Handle))
	in.Overrides = &types.TaskOverride{ContainerOverrides: []types.ContainerOverride{{
		Name:        aws.String(r.cfg.Container),
		Environment: env,
	}}}
	in.Tags = r.tags(spec)
	return in
}

// baseInput is what every RunTask of this runtime shares: cluster, task
// definition, network and capacity.
func (r *Runtime) baseInput() *ecs.RunTaskInput {
	assign := types.AssignPublicIpDisabled
	if r.cfg.AssignPublicIP {
		assign = types.AssignPublicIpEnabled
	}
	in := &ecs.RunTaskInput{
		Cluster:              aws.String(r.cfg.Cluster),
		TaskDefinition:       aws.String(r.cfg.TaskDefinition),
		Count:                aws.Int32(1),
		EnableECSManagedTags: true,
		NetworkConfiguration: &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
			Subnets:        slices.Clone(r.cfg.Subnets),
			SecurityGroups: slices.Clone(r.cfg.SecurityGroups),
			AssignPublicIp: assign,
		}},
	}
	if r.cfg.CapacityProvider != "" {
		in.CapacityProviderStrategy = []types.CapacityProviderStrategyItem{{
			CapacityProvider: aws.String(r.cfg.CapacityProvider), Weight: 1,
		}}
	} else {
		in.LaunchType = types.LaunchTypeFargate
	}
	if r.cfg.PlatformVersion != "" {
		in.PlatformVersion = aws.String(r.cfg.PlatformVersion)
	}
	return in
}

// tags labels the task for operators; empty values are left out.
func (r *Runtime) tags(spec service.WorkerSpec) []types.Tag {
	var tags []types.Tag
	for _, kv := range [][2]string{
		{contract.TagHouse, r.cfg.House}, {TagRun, spec.Run}, {TagWorker, spec.Handle}, {TagKey, spec.Key},
	} {
		if v := TagValue(kv[1]); v != "" {
			tags = append(tags, types.Tag{Key: aws.String(kv[0]), Value: aws.String(v)})
		}
	}
	return tags
}

// runTask calls RunTask up to r.attempts times and returns the task's ARN.
// secret is scrubbed from any message ECS sends back.
func (r *Runtime) runTask(ctx context.Context, in *ecs.RunTaskInput, secret string) (string, error) {
	uncertain := false // an attempt may have launched a task
	var last error
	for attempt := 1; ; attempt++ {
		out, err := r.ecs.RunTask(ctx, in, noRetry)
		if err == nil {
			if len(out.Tasks) > 0 && out.Tasks[0].TaskArn != nil {
				return *out.Tasks[0].TaskArn, nil
			}
			if len(out.Failures) == 0 {
				return "", galleyerr.Errorf(galleyerr.Other, "RunTask answered neither a task nor a failure")
			}
			f := out.Failures[0]
			reason, detail := aws.ToString(f.Reason), aws.ToString(f.Detail)
			msg := scrub("RunTask failed: "+reason+" "+detail, secret)
			switch {
			case uncertain:
				return "", galleyerr.E(galleyerr.Unavailable, msg+" (after an attempt of unknown outcome)")
			case quotaMessage(reason) || quotaMessage(detail):
				return "", rateLimited(msg, quotaRetryAfter)
			case capacityFailure(reason) || capacityMessage(detail):
				return "", galleyerr.E(galleyerr.RateLimited, msg)
			}
			// ECS placed nothing and says why: a definite refusal.
			return "", galleyerr.E(galleyerr.Other, msg, service.ErrStartRefused)
		}
		c := classify(err)
		msg := scrub(c.msg, secret)
		switch c.class {
		case classConverged:
			// The clientToken already made a task, from a request that
			// differed (a deployment changed the config meanwhile).
			r.log.Warn("RunTask converged on an existing task", "task", c.arn)
			return c.arn, nil
		case classCapacity:
			if uncertain {
				return "", galleyerr.E(galleyerr.Unavailable, msg+" (after an attempt of unknown outcome)")
			}
			if ra := c.retryAfter; quotaMessage(msg) && ra == 0 {
				return "", rateLimited(msg, quotaRetryAfter)
			}
			return "", rateLimited(msg, c.retryAfter)
		case classThrottled:
			last = rateLimited(msg, c.retryAfter)
		case classUncertain:
			uncertain = true
			last = galleyerr.E(galleyerr.Unavailable, "RunTask: "+msg)
		default:
			if uncertain {
				return "", galleyerr.E(galleyerr.Unavailable, "RunTask: "+msg+" (after an attempt of unknown outcome)")
			}
			return "", galleyerr.E(galleyerr.Other, "RunTask: "+msg, service.ErrStartRefused)
		}
		if attempt >= r.attempts || !r.pause(ctx, attempt, c.retryAfter) {
			break
		}
	}
	if uncertain {
		return "", galleyerr.E(galleyerr.Unavailable, "RunTask: no attempt succeeded and one may have launched the task", last)
	}
	return "", last
}

// pause waits before attempt+1; false if ctx ends first.
func (r *Runtime) pause(ctx context.Context, attempt, retryAfter int) bool {
	d := r.backoff << (attempt - 1)
	if d > maxBackoff || d < 0 {
		d = maxBackoff
	}
	if ra := time.Duration(retryAfter) * time.Second; ra > d {
		if ra > maxBackoff {
			return false // ECS asked for longer than a request should hold
		}
		d = ra
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func rateLimited(msg string, retryAfter int) error {
	return &galleyerr.Error{Kind: galleyerr.RateLimited, Msg: msg, RetryAfterSeconds: retryAfter}
}

func scrub(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "[redacted]")
}

// wrap names op on err, keeping its kind and retry hint where galleyerr
// looks for them.
func wrap(op galleyerr.Op, err error) error {
	var e *galleyerr.Error
	if errors.As(err, &e) && e.Op == "" {
		e.Op = string(op)
		return e
	}
	return galleyerr.E(op, err)
}

// Stop stops the worker's task with StopTask. A worker with no task
// (never started, or not yet listed) and a stopped task succeed: ECS
// answers StopTask of a stopped task with the task.
func (r *Runtime) Stop(ctx context.Context, handle string) error {
	const op = galleyerr.Op("ecsrt.stop")
	if handle == "" {
		return galleyerr.E(op, galleyerr.Invalid, "no worker handle")
	}
	arns, err := r.tasksOf(ctx, handle)
	if err != nil {
		return wrap(op, err)
	}
	for _, arn := range arns {
		if err := r.StopTask(ctx, arn); err != nil {
			return wrap(op, err)
		}
	}
	if len(arns) > 0 {
		r.log.Info("worker task stopping", "handle", handle, "tasks", arns)
	}
	return nil
}

// StopTask stops one task by its ARN, as the reconciler does for a task that
// appears after its worker settled. An unknown or stopped task succeeds.
func (r *Runtime) StopTask(ctx context.Context, taskARN string) error {
	_, err := r.ecs.StopTask(ctx, &ecs.StopTaskInput{
		Cluster: aws.String(r.cfg.Cluster), Task: aws.String(taskARN), Reason: aws.String(stopReason),
	})
	if err == nil || taskNotFound(err) {
		return nil
	}
	return apiError("StopTask", err)
}

// Liveness reads the task's lastStatus: provisioning to running is live,
// deactivating to stopped has exited. A task ECS does not show (just
// launched and not yet visible, or stopped long ago and forgotten) is
// unknown, never exited.
func (r *Runtime) Liveness(ctx context.Context, handle string) (service.Liveness, error) {
	const op = galleyerr.Op("ecsrt.liveness")
	if handle == "" {
		return service.LivenessUnknown, galleyerr.E(op, galleyerr.Invalid, "no worker handle")
	}
	arns, err := r.tasksOf(ctx, handle)
	if err != nil || len(arns) == 0 {
		return service.LivenessUnknown, wrapNil(op, err)
	}
	tasks, err := r.describe(ctx, arns)
	if err != nil {
		return service.LivenessUnknown, wrap(op, err)
	}
	return fold(tasks), nil
}

func wrapNil(op galleyerr.Op, err error) error {
	if err == nil {
		return nil
	}
	return wrap(op, err)
}

// cleanupStartedBy prefixes a cleanup task's startedBy. It is neither
// "galley-" nor "galleyh-", so no worker handle maps to it and the
// reconciler ignores the task.
const cleanupStartedBy = "galleyrm-"

// TagWorktree labels a cleanup task with the worktree it removes.
const TagWorktree = "galley:worktree"

// RemoveWorkspace deletes a workspace on the shared file system. Without a
// workspace root it does nothing: each workspace lives in its task's
// ephemeral storage and goes with the task. With one, it refuses (Invalid)
// a path that is not strictly below the root, then starts a short cleanup
// task of the worker task definition whose command is
// "remove-workspace <path>" and returns once ECS accepted it: the release
// that calls it answers at once, and the removal happens behind. The
// clientToken derives from the handle, so a retried removal makes one
// task; the overrides carry no bootstrap code and no secret.
func (r *Runtime) RemoveWorkspace(ctx context.Context, handle, dir string) error {
	_, err := r.StartWorkspaceRemoval(ctx, handle, dir, 0)
	return err
}

// StartWorkspaceRemoval is RemoveWorkspace's attempt try, answering the
// cleanup task's ARN ("" without a workspace root): each attempt has a
// clientToken of its own (the first the one RemoveWorkspace uses), so an
// attempt after one whose task failed to start (an EFS mount error) is a
// new task, and a retried attempt is the same one.
func (r *Runtime) StartWorkspaceRemoval(ctx context.Context, handle, dir string, try int) (string, error) {
	const op = galleyerr.Op("ecsrt.remove_workspace")
	if r.cfg.WorkspaceRoot == "" {
		return "", nil
	}
	if handle == "" {
		return "", galleyerr.E(op, galleyerr.Invalid, "no worktree handle")
	}
	if err := r.checkWorkspace(dir); err != nil {
		return "", galleyerr.E(op, err)
	}
	in := r.cleanupInput(handle, dir, try)
	arn, err := r.runTask(ctx, in, "")
	if err != nil {
		return "", wrap(op, err)
	}
	r.log.Info("workspace cleanup task started", "worktree", handle, "path", dir, "task", arn, "try", try)
	return arn, nil
}

// WorkspaceRemoval reads how the cleanup task taskARN stands: done once it
// stopped with its container's exit code 0, failed when it stopped
// otherwise (it failed to start, or the command failed) or ECS no longer
// shows it (it keeps a stopped task for an hour at least, and housekeeping
// reads every five minutes), pending while it runs.
func (r *Runtime) WorkspaceRemoval(ctx context.Context, taskARN string) (service.Removal, error) {
	const op = galleyerr.Op("ecsrt.workspace_removal")
	tasks, err := r.describe(ctx, []string{taskARN})
	if err != nil {
		return service.RemovalPending, wrap(op, err)
	}
	if len(tasks) == 0 {
		return service.RemovalFailed, nil
	}
	t := tasks[0]
	if aws.ToString(t.LastStatus) != StatusStopped {
		return service.RemovalPending, nil
	}
	for _, c := range t.Containers {
		if aws.ToString(c.Name) == r.cfg.Container && c.ExitCode != nil && *c.ExitCode == 0 {
			return service.RemovalDone, nil
		}
	}
	r.log.Warn("workspace cleanup task ended without removing the workspace", "task", taskARN,
		"stopCode", string(t.StopCode), "reason", aws.ToString(t.StoppedReason))
	return service.RemovalFailed, nil
}

// cleanupInput builds the cleanup task's RunTask request: a pure function
// of handle, dir, try and the config, as a retry under the same
// clientToken must send the same request.
func (r *Runtime) cleanupInput(handle, dir string, try int) *ecs.RunTaskInput {
	in := r.baseInput()
	h := sha256.Sum256([]byte(handle))
	token := "rm:" + handle
	if try > 0 {
		token += ":" + strconv.Itoa(try)
	}
	in.ClientToken = aws.String(ClientToken(token))
	in.StartedBy = aws.String(cleanupStartedBy + hex.EncodeToString(h[:])[:MaxStartedBy-len(cleanupStartedBy)])
	in.Overrides = &types.TaskOverride{ContainerOverrides: []types.ContainerOverride{{
		Name: aws.String(r.cfg.Container),
		// The image's entrypoint is galley-worker: the override's command
		// holds only its arguments.
		Command: []string{contract.CleanupCommand, dir},
	}}}
	for _, kv := range [][2]string{{contract.TagHouse, r.cfg.House}, {TagWorktree, handle}} {
		if v := TagValue(kv[1]); v != "" {
			in.Tags = append(in.Tags, types.Tag{Key: aws.String(kv[0]), Value: aws.String(v)})
		}
	}
	return in
}

// maxWorkspacePath keeps a path well inside ECS's 8 KiB of overrides.
const maxWorkspacePath = 4096

// cleanRoot returns root cleaned, or "" for none.
func cleanRoot(root string) string {
	if root == "" {
		return ""
	}
	return path.Clean(root)
}

// checkWorkspace refuses (Invalid) a workspace path that is not strictly
// below the workspace root: relative, with a ".." element, the root itself,
// or elsewhere. The check is lexical (this process does not mount the file
// system); the cleanup command checks again, following links, where it does.
func (r *Runtime) checkWorkspace(dir string) error {
	root := r.cfg.WorkspaceRoot
	switch {
	case dir == "" || !path.IsAbs(dir):
		return galleyerr.Errorf(galleyerr.Invalid, "workspace path %s is not absolute", quote(dir))
	case len(dir) > maxWorkspacePath || strings.ContainsRune(dir, 0):
		return galleyerr.Errorf(galleyerr.Invalid, "workspace path %s is not acceptable", quote(dir))
	case slices.Contains(strings.Split(dir, "/"), ".."):
		return galleyerr.Errorf(galleyerr.Invalid, "workspace path %s holds \"..\"", quote(dir))
	}
	if c := path.Clean(dir); !strings.HasPrefix(c, root+"/") {
		return galleyerr.Errorf(galleyerr.Invalid, "workspace path %s is not below the workspace root %s", quote(dir), root)
	}
	return nil
}

// tasksOf returns handle's task: the one this runtime or the index
// remembers, else those ListTasks finds by startedBy. ECS takes startedBy
// only as the one filter of a ListTasks (the API reference: "it must be the
// only filter that you use"), so the listing is of the tasks whose desired
// status is RUNNING, ECS's default: a stopped task is found only through
// the memo or the index, and callers read what DescribeTasks says of the
// tasks listed.
func (r *Runtime) tasksOf(ctx context.Context, handle string) ([]string, error) {
	if arn, ok := r.remembered(ctx, handle); ok {
		return []string{arn}, nil
	}
	out, err := r.ecs.ListTasks(ctx, &ecs.ListTasksInput{
		Cluster: aws.String(r.cfg.Cluster), StartedBy: aws.String(StartedBy(handle)),
	})
	if err != nil {
		return nil, apiError("ListTasks", err)
	}
	if len(out.TaskArns) == 1 {
		r.memoPut(handle, out.TaskArns[0])
	}
	return out.TaskArns, nil
}

// describe returns the tasks ECS shows among arns; a task it reports
// MISSING is left out.
func (r *Runtime) describe(ctx context.Context, arns []string) ([]types.Task, error) {
	if len(arns) > 100 {
		arns = arns[:100]
	}
	out, err := r.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(r.cfg.Cluster), Tasks: arns})
	if err != nil {
		return nil, apiError("DescribeTasks", err)
	}
	return out.Tasks, nil
}

// remember records handle's task here and in the index. A failed index
// write costs a ListTasks later, nothing more.
func (r *Runtime) remember(ctx context.Context, handle, arn string) {
	r.memoPut(handle, arn)
	if r.index != nil {
		if err := r.index.SetTaskARN(ctx, handle, arn); err != nil {
			r.log.Warn("cannot record the worker's task", "handle", handle, "task", arn, "err", err)
		}
	}
}

func (r *Runtime) memoGet(handle string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	arn, ok := r.memo[handle]
	return arn, ok
}

func (r *Runtime) memoPut(handle, arn string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.memo[handle]; !ok && len(r.memo) >= r.memoMax {
		// Forget any one: a forgotten task is found again with ListTasks.
		for k := range r.memo {
			delete(r.memo, k)
			break
		}
	}
	r.memo[handle] = arn
}
