package ecsstandin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/local/awswire"
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

var (
	startedByRE = regexp.MustCompile(`^[A-Za-z0-9_/-]{1,128}$`)
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

func invalid(format string, args ...any) *awswire.Error {
	return awswire.Errorf(400, "InvalidParameterException", format, args...)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 {
			return false
		}
	}
	return true
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
	s.lagLocked(t, now)
	t.updatedAt = now
	ev := eventEnvelope{
		Version: "0", ID: awswire.UUID(), DetailType: "ECS Task State Change", Source: "aws.ecs",
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
		PlatformVersion: t.platformVersion, PlatformFamily: "Linux", CPU: strconv.Itoa(t.def.cpu), Memory: strconv.Itoa(t.def.memory),
		Group: t.group, StartedBy: t.startedBy, LastStatus: t.lastStatus, DesiredStatus: t.desiredStatus,
		StopCode: t.stopCode, StoppedReason: t.stoppedReason, Version: t.version,
		Overrides: t.overrides,
		Containers: []wireContainer{{
			ContainerArn: t.containerArn, TaskArn: t.arn, Name: t.container, Image: t.image,
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

func (s *Server) stopTask(in stopTaskInput) (any, *awswire.Error) {
	if in.Task == "" {
		return nil, invalid("Task can not be blank.")
	}
	if len(in.Reason) > 255 {
		return nil, invalid("reason must be at most 255 characters")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, e := s.clusterLocked(in.Cluster); e != nil {
		return nil, e
	}
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

func (s *Server) describeTasks(in describeTasksInput) (any, *awswire.Error) {
	if len(in.Tasks) == 0 || len(in.Tasks) > 100 {
		return nil, invalid("Tasks must name 1 to 100 tasks")
	}
	tags := slices.Contains(in.Include, "TAGS")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, e := s.clusterLocked(in.Cluster); e != nil {
		return nil, e
	}
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

// ErrStartedByAlone is the message of a ListTasks refused for naming
// startedBy with another filter. The ECS API reference (ListTasks,
// startedBy) says: "When you specify startedBy as the filter, it must be
// the only filter that you use." The stand-in reads it strictly: cluster
// and paging aside, desiredStatus counts as a filter too (the operation's
// description lists "the desired status of the task" among its filters).
const ErrStartedByAlone = "When you specify startedBy as the filter, it must be the only filter that you use."

func (s *Server) listTasks(in listTasksInput) (any, *awswire.Error) {
	if in.StartedBy != "" && (in.DesiredStatus != "" || in.Family != "" || in.LaunchType != "" ||
		in.ServiceName != "" || in.Container != "") {
		return nil, invalid("%s", ErrStartedByAlone)
	}
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
	cl, e := s.clusterLocked(in.Cluster)
	if e != nil {
		return nil, e
	}
	now := time.Now()
	cluster := cl.arn
	var arns []string
	for _, t := range s.order {
		switch {
		case t.clusterArn != cluster, now.Before(t.visibleAt), now.Before(s.listFrom[t.id]):
		case in.StartedBy != "" && t.startedBy != in.StartedBy:
		case in.Family != "" && t.family != in.Family:
		case desired == statusPending && t.lastStatus != statusPending && t.lastStatus != statusProvisioning:
		case desired != statusPending && s.listedDesiredLocked(t, now) != desired:
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
