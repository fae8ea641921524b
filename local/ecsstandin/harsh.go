package ecsstandin

import (
	"encoding/json"
	"time"
)

// How ECS and Fargate refuse or fail tasks, modelled with AWS's own words
// (docs/aws-local.md lists each with its source).
const (
	// TokenWindow is how long ECS remembers a RunTask clientToken (the API
	// reference: "the token ... for up to 24 hours").
	TokenWindow = 24 * time.Hour
	// DefaultListLag is how long ListTasks lags behind a RunTask or a
	// StopTask by default: ECS's API is eventually consistent, and a task
	// just started, or just stopped, is listed as it was for a moment.
	DefaultListLag = 2 * time.Second

	// ReasonVCPUQuota is the failures[] reason of a RunTask beyond the
	// account's Fargate vCPU quota (a fresh account's is low, or zero until
	// Fargate is activated in the Region).
	ReasonVCPUQuota = "You've reached the limit on the number of vCPUs you can run concurrently"
	// ReasonCPUAboveLimit is the failures[] reason of a task size above the
	// account's limit.
	ReasonCPUAboveLimit = "The requested CPU configuration is above your limit"
	// ReasonCapacity is Fargate's failures[] reason when it has no capacity
	// in the Availability Zones of the subnets.
	ReasonCapacity = "Capacity is unavailable at this time. Please try again later or in a different availability zone"

	// ReasonImagePull, ReasonSecrets and ReasonEFSMount are stoppedReasons
	// of tasks that stop with stop code TaskFailedToStart.
	ReasonImagePull = "CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref: not found"
	ReasonSecrets   = "ResourceInitializationError: unable to pull secrets or registry auth: execution resource retrieval failed: unable to retrieve secret from asm: service call has been retried 1 time(s): AccessDeniedException"
	ReasonEFSMount  = "ResourceInitializationError: failed to invoke EFS utils commands to set up EFS volumes: stderr: Failed to resolve \"fs-0123456789abcdef0.efs.us-east-1.amazonaws.com\" - check that your file system ID is correct"
)

// Faults with AWS's codes and messages, for Inject.
var (
	// FaultThrottled is ECS's own throttling of RunTask.
	FaultThrottled = Fault{Op: OpRunTask, Code: "ThrottlingException", Message: "Rate exceeded"}
	// FaultEC2Throttled is EC2's throttling of the network set-up, which
	// ECS passes on wrapped in an InvalidParameterException.
	FaultEC2Throttled = Fault{Op: OpRunTask, Code: "InvalidParameterException",
		Message: "Error retrieving security group information for [sg-0a1b2c]: Request limit exceeded. (ErrorCode: RequestLimitExceeded)"}
	// FaultNoCPU is a placement failure for want of CPU.
	FaultNoCPU = Fault{Op: OpRunTask, Failure: "RESOURCE:CPU"}
	// FaultNoCapacity is Fargate out of capacity.
	FaultNoCapacity = Fault{Op: OpRunTask, Failure: ReasonCapacity}
	// FaultVCPUQuota is the vCPU quota answered whatever the tasks running.
	FaultVCPUQuota = Fault{Op: OpRunTask, Failure: ReasonVCPUQuota}
)

// StartFailure makes accepted tasks fail before their command starts: they
// stop with stop code TaskFailedToStart and Reason as stoppedReason (an
// image-pull, secrets or EFS-mount failure), or, with Stuck set, stay in
// PROVISIONING until stopped or for Stuck.
type StartFailure struct {
	Reason string
	Stuck  time.Duration
	// Times is how many tasks it fails; 0 means every task until
	// ClearStartFailures.
	Times int
}

// WithClock sets the clock that ages client tokens (default time.Now), so
// that a test can pass ECS's 24-hour token window without waiting it out.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.clock = now } }

// WithVCPUQuota sets the account's Fargate vCPU quota: a RunTask whose task
// would take the vCPUs of the tasks not yet stopped above it fails with
// ReasonVCPUQuota. Negative (the default) is no quota; 0 is a fresh account
// where no task may run.
func WithVCPUQuota(vcpus float64) Option { return func(s *Server) { s.vcpuQuota = vcpus } }

// SetListLag sets how long ListTasks lags behind RunTask and StopTask
// (DefaultListLag unless set): a task is listed only once that long old,
// and listed under its earlier desired status for that long after a stop.
func (s *Server) SetListLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listLag = d
}

// InjectStartFailure adds a start failure; they apply in the order injected.
func (s *Server) InjectStartFailure(f StartFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startFailures = append(s.startFailures, &f)
}

// ClearStartFailures removes every start failure.
func (s *Server) ClearStartFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startFailures = nil
}

// startFailureLocked takes the start failure the next task meets, if any.
func (s *Server) startFailureLocked() *StartFailure {
	if len(s.startFailures) == 0 {
		return nil
	}
	f := s.startFailures[0]
	out := *f
	if f.Times > 0 {
		if f.Times--; f.Times == 0 {
			s.startFailures = s.startFailures[1:]
		}
	}
	return &out
}

// holdProvisioning runs first in a task's launch: it decides whether the
// task meets a start failure, and keeps a stuck one in PROVISIONING until
// it is stopped or its time is up. It answers the stoppedReason the launch
// must fail with, if any.
func (s *Server) holdProvisioning(t *task) string {
	s.mu.Lock()
	f := s.startFailureLocked()
	s.mu.Unlock()
	if f == nil {
		return ""
	}
	if f.Stuck > 0 {
		until := time.Now().Add(f.Stuck)
		for time.Now().Before(until) {
			s.mu.Lock()
			stop := t.desiredStatus == statusStopped || s.closed
			s.mu.Unlock()
			if stop {
				break
			}
			time.Sleep(watchEvery)
		}
	}
	return f.Reason
}

// tokenLocked returns the live record of a clientToken: one younger than
// TokenWindow. An older one is forgotten, as ECS forgets it.
func (s *Server) tokenLocked(key string) (tokenRecord, bool) {
	rec, ok := s.tokens[key]
	if ok && s.clock().Sub(rec.at) >= TokenWindow {
		delete(s.tokens, key)
		return tokenRecord{}, false
	}
	return rec, ok
}

// quotaFailure answers the failures[] entry of a RunTask the vCPU quota
// refuses, or nil. A clientToken that names a task answers that task
// instead, as ECS checks the token first.
func (s *Server) quotaFailure(body []byte) []failure {
	var in struct {
		Cluster        string `json:"cluster"`
		ClientToken    string `json:"clientToken"`
		TaskDefinition string `json:"taskDefinition"`
	}
	if json.Unmarshal(body, &in) != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vcpuQuota < 0 {
		return nil
	}
	if in.ClientToken != "" {
		if _, ok := s.tokenLocked(clusterName(in.Cluster) + "\x00" + in.ClientToken); ok {
			return nil
		}
	}
	d := s.lookupTaskDefLocked(in.TaskDefinition)
	if d == nil {
		return nil // runTask refuses it
	}
	used := 0
	for _, t := range s.order {
		if t.lastStatus != statusStopped {
			used += t.def.cpu
		}
	}
	if float64(used+d.cpu)/1024 <= s.vcpuQuota {
		return nil
	}
	return []failure{{Arn: d.arn, Reason: ReasonVCPUQuota}}
}

// lagLocked notes, at a change of t, when ListTasks catches up with it:
// the list lag after its creation, and after its desired status became
// STOPPED.
func (s *Server) lagLocked(t *task, now time.Time) {
	if _, ok := s.listFrom[t.id]; !ok {
		s.listFrom[t.id] = now.Add(s.listLag)
	}
	if _, ok := s.runningUntil[t.id]; !ok && t.desiredStatus == statusStopped {
		s.runningUntil[t.id] = now.Add(s.listLag)
	}
}

// listedDesiredLocked is t's desired status as ListTasks shows it at now:
// RUNNING for the list lag after it became STOPPED.
func (s *Server) listedDesiredLocked(t *task, now time.Time) string {
	if until, ok := s.runningUntil[t.id]; ok && now.Before(until) {
		return statusRunning
	}
	return t.desiredStatus
}
