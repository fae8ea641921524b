package ecsrt

import (
	"encoding/json"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// The EventBridge envelope's source and detail-type of a task state change.
const (
	EventSource     = "aws.ecs"
	EventDetailType = "ECS Task State Change"
)

// Task statuses (a task's lastStatus and desiredStatus), in lifecycle order.
const (
	StatusProvisioning   = "PROVISIONING"
	StatusPending        = "PENDING"
	StatusActivating     = "ACTIVATING"
	StatusRunning        = "RUNNING"
	StatusDeactivating   = "DEACTIVATING"
	StatusStopping       = "STOPPING"
	StatusDeprovisioning = "DEPROVISIONING"
	StatusStopped        = "STOPPED"
)

// Stop codes of a stopped task.
const (
	StopTaskFailedToStart        = "TaskFailedToStart"        // never ran: image, network, secrets, capacity
	StopEssentialContainerExited = "EssentialContainerExited" // the harness ended by itself
	StopUserInitiated            = "UserInitiated"            // StopTask: galley's cancel or release
	StopServiceSchedulerInit     = "ServiceSchedulerInitiated"
	StopSpotInterruption         = "SpotInterruption"
	StopTerminationNotice        = "TerminationNotice"
)

// LivenessOf maps a task's lastStatus to a worker's liveness: a task on its
// way up or running is live, one on its way down or stopped has exited, and
// anything else (an empty or unknown status) cannot be told.
func LivenessOf(lastStatus string) service.Liveness {
	switch lastStatus {
	case StatusProvisioning, StatusPending, StatusActivating, StatusRunning:
		return service.LivenessLive
	case StatusDeactivating, StatusStopping, StatusDeprovisioning, StatusStopped:
		return service.LivenessExited
	}
	return service.LivenessUnknown
}

// TaskChange is what galley reads from one "ECS Task State Change" event.
type TaskChange struct {
	EventID string    // the EventBridge event's id; a redelivery repeats it
	Time    time.Time // when EventBridge stamped the event
	Region  string

	TaskARN    string
	ClusterARN string
	// Handle is the galley worker the task runs, from startedBy or else the
	// galley:worker tag; empty for a task galley did not start (or a hashed
	// startedBy on an event without tags).
	Handle    string
	StartedBy string
	Group     string

	LastStatus    string
	DesiredStatus string
	StopCode      string
	StoppedReason string
	Containers    []ContainerState
	Tags          map[string]string // only when the event carries them

	// Version increases with every change of the task: a redelivered event
	// repeats it, and an event with a lower version than one already
	// applied is stale.
	Version int64

	CreatedAt, StartedAt, StoppingAt, StoppedAt, UpdatedAt time.Time
}

// ContainerState is one container of the task.
type ContainerState struct {
	Name       string
	LastStatus string
	ExitCode   *int   // nil until the container has exited, and when ECS cannot tell
	Reason     string // why the container stopped, when ECS knows
}

// Liveness is the worker's liveness at this change.
func (c TaskChange) Liveness() service.Liveness { return LivenessOf(c.LastStatus) }

// Stopped reports whether the task has stopped for good.
func (c TaskChange) Stopped() bool { return c.LastStatus == StatusStopped }

// Supersedes reports whether c is newer than the change of version
// applied: false for a duplicate (same version) or a late one (lower).
func (c TaskChange) Supersedes(applied int64) bool { return c.Version > applied }

// Container returns the state of the named container.
func (c TaskChange) Container(name string) (ContainerState, bool) {
	for _, ct := range c.Containers {
		if ct.Name == name {
			return ct, true
		}
	}
	return ContainerState{}, false
}

// event is the EventBridge envelope.
type event struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Time       string          `json:"time"`
	Region     string          `json:"region"`
	Detail     json.RawMessage `json:"detail"`
}

// eventTask is the part of an event's detail (a Task, with ISO-8601
// timestamps) that galley reads; ECS adds fields over time, and unknown ones
// are ignored.
type eventTask struct {
	TaskARN       string  `json:"taskArn"`
	ClusterARN    string  `json:"clusterArn"`
	StartedBy     string  `json:"startedBy"`
	Group         string  `json:"group"`
	LastStatus    string  `json:"lastStatus"`
	DesiredStatus string  `json:"desiredStatus"`
	StopCode      string  `json:"stopCode"`
	StoppedReason string  `json:"stoppedReason"`
	Version       *int64  `json:"version"`
	CreatedAt     isoTime `json:"createdAt"`
	StartedAt     isoTime `json:"startedAt"`
	StoppingAt    isoTime `json:"stoppingAt"`
	StoppedAt     isoTime `json:"stoppedAt"`
	UpdatedAt     isoTime `json:"updatedAt"`
	Containers    []struct {
		Name       string `json:"name"`
		LastStatus string `json:"lastStatus"`
		ExitCode   *int   `json:"exitCode"`
		Reason     string `json:"reason"`
	} `json:"containers"`
	Tags []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"tags"`
}

// isoTime reads an ISO-8601 timestamp, or leaves the zero time for null or
// an absent field.
type isoTime struct{ time.Time }

func (t *isoTime) UnmarshalJSON(b []byte) error {
	var s *string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == nil || *s == "" {
		return nil
	}
	v, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// ParseTaskStateChange reads an EventBridge "ECS Task State Change" event,
// as EventBridge delivers it to a Lambda function or an SQS queue. It is
// pure: the reconciler decides what the change means for its worker. An
// event of another kind is Invalid; one that is not JSON of the documented
// shape is Malformed.
func ParseTaskStateChange(b []byte) (TaskChange, error) {
	const op = galleyerr.Op("ecsrt.parse-event")
	var ev event
	if err := json.Unmarshal(b, &ev); err != nil {
		return TaskChange{}, galleyerr.E(op, galleyerr.Malformed, "not an EventBridge event", err)
	}
	if ev.Source != EventSource || ev.DetailType != EventDetailType {
		return TaskChange{}, galleyerr.E(op, galleyerr.Invalid, "not an ECS task state change: source "+
			quote(ev.Source)+", detail-type "+quote(ev.DetailType))
	}
	var d eventTask
	if err := json.Unmarshal(ev.Detail, &d); err != nil {
		return TaskChange{}, galleyerr.E(op, galleyerr.Malformed, "bad task state change detail", err)
	}
	if d.TaskARN == "" || d.LastStatus == "" || d.Version == nil {
		return TaskChange{}, galleyerr.E(op, galleyerr.Malformed, "a task state change without taskArn, lastStatus or version")
	}
	c := TaskChange{
		EventID: ev.ID, Region: ev.Region,
		TaskARN: d.TaskARN, ClusterARN: d.ClusterARN, StartedBy: d.StartedBy, Group: d.Group,
		LastStatus: d.LastStatus, DesiredStatus: d.DesiredStatus,
		StopCode: d.StopCode, StoppedReason: d.StoppedReason, Version: *d.Version,
		CreatedAt: d.CreatedAt.Time, StartedAt: d.StartedAt.Time, StoppingAt: d.StoppingAt.Time,
		StoppedAt: d.StoppedAt.Time, UpdatedAt: d.UpdatedAt.Time,
	}
	if ev.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, ev.Time)
		if err != nil {
			return TaskChange{}, galleyerr.E(op, galleyerr.Malformed, "bad event time", err)
		}
		c.Time = t
	}
	for _, ct := range d.Containers {
		c.Containers = append(c.Containers, ContainerState{Name: ct.Name, LastStatus: ct.LastStatus, ExitCode: ct.ExitCode, Reason: ct.Reason})
	}
	if len(d.Tags) > 0 {
		c.Tags = make(map[string]string, len(d.Tags))
		for _, t := range d.Tags {
			c.Tags[t.Key] = t.Value
		}
	}
	if h, ok := HandleFromStartedBy(d.StartedBy); ok {
		c.Handle = h
	} else if h := c.Tags[TagWorker]; h != "" && IsGalleyStartedBy(d.StartedBy) && StartedBy(h) == d.StartedBy {
		// A hashed startedBy: the tag names the handle, and the hash
		// confirms the tag (a sanitized tag value would not match).
		c.Handle = h
	}
	return c, nil
}

// quote quotes a value for a message, cut short.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}
