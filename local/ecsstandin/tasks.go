package ecsstandin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/service"
)

// Task statuses.
const (
	statusProvisioning   = "PROVISIONING"
	statusPending        = "PENDING"
	statusRunning        = "RUNNING"
	statusStopping       = "STOPPING"
	statusDeprovisioning = "DEPROVISIONING"
	statusStopped        = "STOPPED"
)

// task is one task. Every field is guarded by Server.mu.
type task struct {
	id, arn, clusterArn, taskDefArn, family string
	startedBy, group, clientToken           string
	launchType, capacityProvider            string
	platformVersion                         string
	overrides                               taskOverride
	tags                                    []tag
	env                                     map[string]string // the container's whole environment
	command                                 []string          // the override's command: the entrypoint's arguments

	lastStatus, desiredStatus string
	stopCode, stoppedReason   string
	version                   int64
	createdAt, pullStartedAt  time.Time
	pullStoppedAt, startedAt  time.Time
	stoppingAt, stoppedAt     time.Time
	updatedAt, visibleAt      time.Time

	containerArn, containerStatus, containerReason, runtimeID string
	exitCode                                                  *int

	root      string // the task's storage on the host
	workspace string // GALLEY_WORKSPACE rooted in root, if set
	exitFile  string
	readyFile string
	launched  bool // its init was started
	stopAsked bool // localproc was asked to stop it
}

// TaskInfo is a snapshot of one task, for tests and operators.
type TaskInfo struct {
	ARN, ID, StartedBy, ClientToken string
	LastStatus, DesiredStatus       string
	StopCode, StoppedReason         string
	Version                         int64
	Env                             map[string]string // the container's environment, as given to the command
	Command                         []string          // the override's command (the entrypoint's arguments), if any
	Tags                            map[string]string
	Root                            string // the task's storage on the host
	Workspace                       string // the host folder GALLEY_WORKSPACE names, if set
	ExitCode                        *int
	Launched                        bool
}

// Tasks returns every task, in creation order, invisible ones included.
func (s *Server) Tasks() []TaskInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TaskInfo, 0, len(s.order))
	for _, t := range s.order {
		ti := TaskInfo{
			ARN: t.arn, ID: t.id, StartedBy: t.startedBy, ClientToken: t.clientToken,
			LastStatus: t.lastStatus, DesiredStatus: t.desiredStatus, StopCode: t.stopCode,
			StoppedReason: t.stoppedReason, Version: t.version, Env: maps.Clone(t.env), Command: slices.Clone(t.command),
			Tags: map[string]string{}, Root: t.root, Workspace: t.workspace, Launched: t.launched,
		}
		for _, tg := range t.tags {
			ti.Tags[tg.Key] = tg.Value
		}
		if t.exitCode != nil {
			c := *t.exitCode
			ti.ExitCode = &c
		}
		out = append(out, ti)
	}
	return out
}

var (
	startedByRE = regexp.MustCompile(`^[A-Za-z0-9_/-]{1,128}$`)
	familyRE    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// clusterName reads a cluster name or ARN; empty is "default".
func clusterName(c string) string {
	if c == "" {
		return "default"
	}
	if i := strings.LastIndex(c, ":cluster/"); i >= 0 {
		return c[i+len(":cluster/"):]
	}
	return c
}

func (s *Server) clusterArn(name string) string {
	return fmt.Sprintf("arn:aws:ecs:%s:%s:cluster/%s", s.region, s.account, name)
}

// taskDefinition reads family[:revision] or an ARN.
func (s *Server) taskDefinition(td string) (family, arn string, e *apiError) {
	if i := strings.LastIndex(td, ":task-definition/"); i >= 0 {
		td = td[i+len(":task-definition/"):]
	}
	family, rev, hasRev := strings.Cut(td, ":")
	if !hasRev {
		rev = "1"
	}
	if n, err := strconv.Atoi(rev); err != nil || n < 1 || !familyRE.MatchString(family) {
		return "", "", errf(400, "InvalidParameterException", "Invalid revision number. Number: %s", rev)
	}
	return family, fmt.Sprintf("arn:aws:ecs:%s:%s:task-definition/%s:%s", s.region, s.account, family, rev), nil
}

// fingerprint hashes a RunTask request without its clientToken, in a
// canonical form, to tell a retry from a different request.
func fingerprint(body []byte) string {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	delete(m, "clientToken")
	b, _ := json.Marshal(m) // map keys sorted
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func invalid(format string, args ...any) *apiError {
	return errf(400, "InvalidParameterException", format, args...)
}

// validateRun checks what ECS checks of a Fargate RunTask.
func (s *Server) validateRun(in runTaskInput) *apiError {
	switch {
	case in.TaskDefinition == "":
		return invalid("TaskDefinition can not be blank.")
	case in.Count != nil && *in.Count != 1:
		return invalid("the stand-in runs one task per RunTask, not %d", *in.Count)
	case in.LaunchType != "" && len(in.CapacityProviderStrategy) > 0:
		return invalid("Specifying both a launch type and capacity provider strategy is not supported. Remove one and try again.")
	case in.LaunchType != "" && in.LaunchType != "FARGATE":
		return invalid("the stand-in runs Fargate tasks only, not launch type %s", in.LaunchType)
	case in.LaunchType == "" && len(in.CapacityProviderStrategy) == 0:
		return invalid("the stand-in runs Fargate tasks only: name launch type FARGATE or a capacity provider")
	case in.NetworkConfiguration == nil || in.NetworkConfiguration.AwsvpcConfiguration == nil ||
		len(in.NetworkConfiguration.AwsvpcConfiguration.Subnets) == 0:
		return invalid("Network Configuration must be provided when networkMode 'awsvpc' is specified.")
	case in.StartedBy != "" && !startedByRE.MatchString(in.StartedBy):
		return invalid("startedBy may hold up to 128 letters, digits, '-', '_' and '/'")
	case len(in.ClientToken) > 64 || !printable(in.ClientToken):
		return invalid("clientToken must be 1 to 64 ASCII characters from 33 to 126")
	case len(in.Tags) > 50:
		return invalid("a task takes at most 50 tags")
	}
	if a := in.NetworkConfiguration.AwsvpcConfiguration.AssignPublicIP; a != "" && a != "ENABLED" && a != "DISABLED" {
		return invalid("assignPublicIp must be ENABLED or DISABLED")
	}
	for _, cp := range in.CapacityProviderStrategy {
		if cp.CapacityProvider != "FARGATE" && cp.CapacityProvider != "FARGATE_SPOT" {
			return invalid("The specified capacity provider %s is not in an ACTIVE state.", cp.CapacityProvider)
		}
	}
	seen := map[string]bool{}
	for _, tg := range in.Tags {
		switch {
		case tg.Key == "" || len([]rune(tg.Key)) > 128:
			return invalid("a tag key must be 1 to 128 characters")
		case len([]rune(tg.Value)) > 256:
			return invalid("a tag value must be at most 256 characters")
		case strings.HasPrefix(strings.ToLower(tg.Key), "aws:") || strings.HasPrefix(strings.ToLower(tg.Value), "aws:"):
			return invalid("tags starting with aws: are reserved")
		case seen[tg.Key]:
			return invalid("duplicate tag key %s", tg.Key)
		}
		seen[tg.Key] = true
	}
	if in.Overrides != nil {
		if b, _ := json.Marshal(in.Overrides); len(b) > maxOverrides {
			return invalid("Container Overrides length must be at most %d", maxOverrides)
		}
		for _, co := range in.Overrides.ContainerOverrides {
			if co.Name != s.container {
				return invalid("Override for container named %s is not a container in the TaskDefinition.", co.Name)
			}
			for _, kv := range co.Environment {
				if !envNameRE.MatchString(kv.Name) {
					return invalid("environment variable name %q is not valid", kv.Name)
				}
			}
		}
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 {
			return false
		}
	}
	return true
}

// runTask serves RunTask: a clientToken seen before with the same request
// answers the task it made; with another request, ConflictException.
func (s *Server) runTask(in runTaskInput, body []byte) (any, *apiError) {
	if e := s.validateRun(in); e != nil {
		return nil, e
	}
	family, tdArn, e := s.taskDefinition(in.TaskDefinition)
	if e != nil {
		return nil, e
	}
	cluster := clusterName(in.Cluster)
	fp := fingerprint(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errf(500, "ServerException", "the stand-in is shutting down")
	}
	tokenKey := cluster + "\x00" + in.ClientToken
	if in.ClientToken != "" {
		if rec, ok := s.tokens[tokenKey]; ok {
			t := s.tasks[rec.taskID]
			if rec.fingerprint != fp {
				return nil, &apiError{status: 400, code: "ConflictException", resourceIDs: []string{t.arn},
					message: "The specified client token is already in use with a different RunTask request."}
			}
			return map[string]any{"tasks": []wireTask{s.render(t, false, false)}, "failures": []failure{}}, nil
		}
	}
	now := time.Now()
	id := newID()
	t := &task{
		id: id, clusterArn: s.clusterArn(cluster), taskDefArn: tdArn, family: family,
		arn:       fmt.Sprintf("arn:aws:ecs:%s:%s:task/%s/%s", s.region, s.account, cluster, id),
		startedBy: in.StartedBy, group: in.Group, clientToken: in.ClientToken,
		launchType: in.LaunchType, platformVersion: in.PlatformVersion,
		tags: slices.Clone(in.Tags), lastStatus: statusProvisioning, desiredStatus: statusRunning,
		createdAt: now, visibleAt: now.Add(s.visibility),
		containerArn:    fmt.Sprintf("arn:aws:ecs:%s:%s:container/%s/%s/%s", s.region, s.account, cluster, id, newUUID()),
		containerStatus: statusPending,
		// The task's storage is its localproc workspace; the exit code
		// lies outside it, where the command cannot write.
		root:      filepath.Join(s.procs.WorkspacesDir(), id),
		exitFile:  filepath.Join(s.dir, "tasks", id+".exit"),
		readyFile: filepath.Join(s.dir, "tasks", id+".ready"),
	}
	if t.group == "" {
		t.group = "family:" + family
	}
	if len(in.CapacityProviderStrategy) > 0 {
		t.capacityProvider = in.CapacityProviderStrategy[0].CapacityProvider
	}
	if t.platformVersion == "" || t.platformVersion == "LATEST" {
		t.platformVersion = "1.4.0"
	}
	t.env = maps.Clone(s.taskEnv)
	if t.env == nil {
		t.env = map[string]string{}
	}
	t.overrides = taskOverride{ContainerOverrides: []containerOverride{}}
	if in.Overrides != nil {
		t.overrides = *in.Overrides
		if t.overrides.ContainerOverrides == nil {
			t.overrides.ContainerOverrides = []containerOverride{}
		}
		for _, co := range in.Overrides.ContainerOverrides {
			for _, kv := range co.Environment {
				t.env[kv.Name] = kv.Value
			}
			if co.Command != nil {
				t.command = slices.Clone(co.Command)
			}
		}
	}
	if ws := t.env["GALLEY_WORKSPACE"]; ws != "" {
		if s.onVolume(ws) {
			// A shared volume is mounted at the same path in every task.
			t.workspace = filepath.Clean(ws)
		} else {
			// The container's paths live in the task's own storage.
			t.workspace = filepath.Join(t.root, filepath.Clean("/"+ws))
		}
	}
	s.tasks[id] = t
	s.order = append(s.order, t)
	if in.ClientToken != "" {
		s.tokens[tokenKey] = tokenRecord{fingerprint: fp, taskID: id}
	}
	s.changedLocked(t, now)
	s.launches.Add(1)
	go s.launch(t)
	return map[string]any{"tasks": []wireTask{s.render(t, false, false)}, "failures": []failure{}}, nil
}

// onVolume reports whether the container path p lies in a shared volume.
func (s *Server) onVolume(p string) bool {
	p = filepath.Clean(p)
	for _, v := range s.volumes {
		if p == v || strings.HasPrefix(p, v+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// launch starts t's process, unless t was stopped first.
func (s *Server) launch(t *task) {
	defer s.launches.Done()
	s.mu.Lock()
	if t.desiredStatus == statusStopped || s.closed {
		s.stoppedLocked(t, "TaskFailedToStart", nil)
		s.mu.Unlock()
		return
	}
	now := time.Now()
	t.lastStatus, t.pullStartedAt = statusPending, now
	s.changedLocked(t, now)
	env := maps.Clone(t.env)
	if t.workspace != "" {
		env["GALLEY_WORKSPACE"] = t.workspace
	}
	s.mu.Unlock()

	err := s.start(t, env)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.log.Error("task failed to start", "task", t.arn, "err", err)
		t.stopCode, t.stoppedReason = "TaskFailedToStart", "CannotStartContainerError: "+err.Error()
		s.stoppedLocked(t, "", nil)
		return
	}
	// PENDING until the init says its command started (sweep).
	t.launched, t.pullStoppedAt = true, time.Now()
}

// start writes t's storage and starts its init through localproc.
func (s *Server) start(t *task, env map[string]string) error {
	if err := os.MkdirAll(t.root, 0o700); err != nil {
		return err
	}
	if t.workspace != "" {
		if err := os.MkdirAll(filepath.Dir(t.workspace), 0o700); err != nil {
			return err
		}
	}
	// The harness is the image's entrypoint; an override's command is its
	// arguments, as Docker appends CMD to ENTRYPOINT.
	cmd := append([]string{s.harness}, t.command...)
	l := launch{Standin: launchVersion, Command: cmd, Dir: t.root, ExitFile: t.exitFile, ReadyFile: t.readyFile}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		l.Env = append(l.Env, k+"="+env[k])
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	// The launch travels in the worker's token file (mode 600): localproc
	// has no other per-worker channel, and the entrypoint reads it.
	return s.procs.Start(context.Background(), service.WorkerSpec{
		Handle: t.id, Token: string(b), IdempotencyToken: t.clientToken,
		WorkspacePath: t.root, Branch: env["GALLEY_BRANCH"],
	})
}

// requestStopLocked marks t to stop and, once its command runs (or at
// once if force), moves it to STOPPING and signals its processes; the
// watcher sees them end. Until the init has set itself up, a signal could
// kill it before it records anything, so a stop waits for RUNNING.
func (s *Server) requestStopLocked(t *task, reason string, force bool) {
	if t.desiredStatus != statusStopped {
		now := time.Now()
		t.desiredStatus, t.stopCode, t.stoppedReason, t.stoppingAt = statusStopped, "UserInitiated", reason, now
		s.changedLocked(t, now)
	}
	if !t.launched || t.stopAsked || t.lastStatus == statusStopped || (t.lastStatus != statusRunning && !force) {
		return
	}
	t.stopAsked = true
	now := time.Now()
	t.lastStatus = statusStopping
	s.changedLocked(t, now)
	if err := s.procs.Stop(context.Background(), t.id); err != nil {
		s.log.Error("cannot stop a task's process", "task", t.arn, "err", err)
	}
}

// stoppedLocked ends t: DEPROVISIONING, then STOPPED, each a change. A
// non-empty stopCode is set if none is.
func (s *Server) stoppedLocked(t *task, stopCode string, exitCode *int) {
	if t.lastStatus == statusStopped {
		return
	}
	now := time.Now()
	if t.stopCode == "" && stopCode != "" {
		t.stopCode = stopCode
		if stopCode == "TaskFailedToStart" && t.stoppedReason == "" {
			t.stoppedReason = "Task stopped before it started"
		}
	}
	if t.desiredStatus != statusStopped {
		t.desiredStatus = statusStopped
	}
	if t.stoppingAt.IsZero() {
		t.stoppingAt = now
	}
	t.exitCode = exitCode
	if t.launched {
		t.lastStatus = statusDeprovisioning
		t.containerStatus = statusStopped
		s.changedLocked(t, now)
	}
	t.lastStatus, t.containerStatus, t.stoppedAt = statusStopped, statusStopped, now
	s.changedLocked(t, now)
}

// watch notices tasks whose process ended.
func (s *Server) watch() {
	defer close(s.watchDone)
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stopWatch:
			return
		case <-tick.C:
			s.sweep()
		}
	}
}

// sweep moves launched tasks on: PENDING to RUNNING once their command
// started (and on to STOPPING if a stop waits), and to STOPPED once their
// init has exited.
func (s *Server) sweep() {
	s.mu.Lock()
	var ids []string
	for _, t := range s.order {
		if t.launched && t.lastStatus != statusStopped {
			ids = append(ids, t.id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		l, err := s.procs.Liveness(context.Background(), id)
		if err != nil {
			continue
		}
		s.mu.Lock()
		t := s.tasks[id]
		if t.lastStatus == statusPending {
			if _, err := os.Stat(t.readyFile); err == nil {
				now := time.Now()
				t.lastStatus, t.startedAt = statusRunning, now
				t.containerStatus, t.runtimeID = statusRunning, newID()+newID()
				s.changedLocked(t, now)
				if t.desiredStatus == statusStopped {
					s.requestStopLocked(t, "", false)
				}
			}
		}
		if l == service.LivenessExited {
			code := readExit(t.exitFile)
			switch {
			case t.startedAt.IsZero() && t.stopCode == "":
				t.stoppedReason = "CannotStartContainerError: the container's command did not start"
				s.stoppedLocked(t, "TaskFailedToStart", code)
			default:
				if code == nil {
					t.containerReason = "the container's init ended without an exit code (killed)"
				}
				if t.stopCode == "" {
					t.stoppedReason = "Essential container in task exited"
				}
				s.stoppedLocked(t, "EssentialContainerExited", code)
			}
		}
		s.mu.Unlock()
	}
}

func readExit(name string) *int {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return &n
}

// changedLocked counts a change of t and emits its event.
func (s *Server) changedLocked(t *task, now time.Time) {
	t.version++
	t.updatedAt = now
	ev := eventEnvelope{
		Version: "0", ID: newUUID(), DetailType: "ECS Task State Change", Source: "aws.ecs",
		Account: s.account, Time: now.UTC().Format(time.RFC3339), Region: s.region,
		Resources: []string{t.arn}, Detail: s.render(t, true, false),
	}
	b, err := json.Marshal(ev)
	if err != nil {
		s.log.Error("cannot encode an event", "err", err)
		return
	}
	s.events = append(s.events, b)
	s.q.push(b)
}

// render writes t as ECS does: epoch timestamps for the API, ISO ones (and
// updatedAt) for events; tags only when asked.
func (s *Server) render(t *task, event, tags bool) wireTask {
	at := func(v time.Time) *stamp {
		if v.IsZero() {
			return nil
		}
		return &stamp{t: v, iso: event}
	}
	w := wireTask{
		TaskArn: t.arn, ClusterArn: t.clusterArn, TaskDefinitionArn: t.taskDefArn,
		AvailabilityZone: s.region + "a", LaunchType: t.launchType, CapacityProviderName: t.capacityProvider,
		PlatformVersion: t.platformVersion, PlatformFamily: "Linux", CPU: "1024", Memory: "2048",
		Group: t.group, StartedBy: t.startedBy, LastStatus: t.lastStatus, DesiredStatus: t.desiredStatus,
		StopCode: t.stopCode, StoppedReason: t.stoppedReason, Version: t.version,
		Overrides: t.overrides,
		Containers: []wireContainer{{
			ContainerArn: t.containerArn, TaskArn: t.arn, Name: s.container, Image: "galley-worker:local",
			LastStatus: t.containerStatus, ExitCode: t.exitCode, Reason: t.containerReason,
			RuntimeID: t.runtimeID, CPU: "0",
		}},
		CreatedAt: at(t.createdAt), PullStartedAt: at(t.pullStartedAt), PullStoppedAt: at(t.pullStoppedAt),
		StartedAt: at(t.startedAt), StoppingAt: at(t.stoppingAt), StoppedAt: at(t.stoppedAt),
	}
	if w.LaunchType == "" {
		w.LaunchType = "FARGATE"
	}
	if t.launched {
		w.Connectivity, w.ConnectivityAt = "CONNECTED", at(t.pullStartedAt)
	}
	if t.lastStatus == statusStopped && t.launched {
		w.ExecutionStoppedAt = at(t.stoppedAt)
	}
	if event {
		w.UpdatedAt = at(t.updatedAt)
	}
	if tags {
		w.Tags = slices.Clone(t.tags)
	}
	return w
}

// find returns the task named by an ARN or an ID in cluster.
func (s *Server) findLocked(cluster, ref string) *task {
	id := ref
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		id = ref[i+1:]
	}
	t := s.tasks[id]
	if t == nil || t.clusterArn != s.clusterArn(cluster) {
		return nil
	}
	if strings.HasPrefix(ref, "arn:") && ref != t.arn {
		return nil
	}
	return t
}

func (s *Server) stopTask(in stopTaskInput) (any, *apiError) {
	if in.Task == "" {
		return nil, invalid("Task can not be blank.")
	}
	if len(in.Reason) > 255 {
		return nil, invalid("reason must be at most 255 characters")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.findLocked(clusterName(in.Cluster), in.Task)
	if t == nil {
		return nil, invalid("The referenced task was not found.")
	}
	if t.desiredStatus != statusStopped {
		reason := in.Reason
		if reason == "" {
			reason = "Task stopped by user"
		}
		// The answer shows the task as StopTask left it: desired STOPPED,
		// still running.
		now := time.Now()
		t.desiredStatus, t.stopCode, t.stoppedReason, t.stoppingAt = statusStopped, "UserInitiated", reason, now
		s.changedLocked(t, now)
		out := map[string]any{"task": s.render(t, false, false)}
		s.requestStopLocked(t, reason, false)
		return out, nil
	}
	return map[string]any{"task": s.render(t, false, false)}, nil
}

func (s *Server) describeTasks(in describeTasksInput) (any, *apiError) {
	if len(in.Tasks) == 0 || len(in.Tasks) > 100 {
		return nil, invalid("Tasks must name 1 to 100 tasks")
	}
	tags := slices.Contains(in.Include, "TAGS")
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	tasks, fails := []wireTask{}, []failure{}
	for _, ref := range in.Tasks {
		t := s.findLocked(clusterName(in.Cluster), ref)
		if t == nil || now.Before(t.visibleAt) {
			fails = append(fails, failure{Arn: ref, Reason: "MISSING"})
			continue
		}
		tasks = append(tasks, s.render(t, false, tags))
	}
	return map[string]any{"tasks": tasks, "failures": fails}, nil
}

func (s *Server) listTasks(in listTasksInput) (any, *apiError) {
	desired := in.DesiredStatus
	switch desired {
	case "":
		desired = statusRunning
	case statusRunning, statusStopped, statusPending:
	default:
		return nil, invalid("desiredStatus must be RUNNING, PENDING or STOPPED")
	}
	limit := 100
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 100 {
			return nil, invalid("maxResults must be between 1 and 100")
		}
		limit = *in.MaxResults
	}
	start := 0
	if in.NextToken != "" {
		n, err := strconv.Atoi(in.NextToken)
		if err != nil || n < 0 {
			return nil, invalid("Invalid nextToken")
		}
		start = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	cluster := s.clusterArn(clusterName(in.Cluster))
	var arns []string
	for _, t := range s.order {
		switch {
		case t.clusterArn != cluster, now.Before(t.visibleAt):
		case in.StartedBy != "" && t.startedBy != in.StartedBy:
		case in.Family != "" && t.family != in.Family:
		case desired == statusPending && t.lastStatus != statusPending && t.lastStatus != statusProvisioning:
		case desired != statusPending && t.desiredStatus != desired:
		default:
			arns = append(arns, t.arn)
		}
	}
	out := map[string]any{"taskArns": []string{}}
	if start < len(arns) {
		end := min(start+limit, len(arns))
		out["taskArns"] = arns[start:end]
		if end < len(arns) {
			out["nextToken"] = strconv.Itoa(end)
		}
	}
	return out, nil
}
