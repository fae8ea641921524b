package awslocal

import (
	"maps"
	"strings"
	"time"

	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// Usage is what the stack has done that AWS bills, counted as it happens:
// the AWS requests the IAM gates authorized, the DynamoDB capacity they
// consumed, the API Gateway requests, the Lambda invocations and their
// billed time, and the ECS tasks' time. Two readings' difference (Sub) is
// a window's; docs/cost.md prices one.
type Usage struct {
	At time.Time
	// Requests counts the AWS requests the gates authorized, by
	// "service:Operation" ("dynamodb:Query", "sqs:ReceiveMessage",
	// "secretsmanager:GetSecretValue", "ecs:RunTask"): what AWS bills as
	// requests, the failed ones included, the denied ones not.
	Requests map[string]int
	// EmptyReceives counts the SQS receives answered with no message
	// (counted in Requests too).
	EmptyReceives int
	// Capacity is the DynamoDB capacity consumed, by table.
	Capacity map[string]TableCapacity
	// ByRole splits Requests, EmptyReceives and Capacity by the caller's
	// role, by the role's logical id in the template ("WorkerApiRole83E31E18"):
	// which function, or the worker task, made them.
	ByRole map[string]RoleUsage
	// Routes counts API Gateway requests by route key.
	Routes map[string]int
	// Functions are the Lambda invocations by galley's function name.
	Functions map[lambdaapp.Function]FunctionUsage
	// Tasks are the ECS tasks (Fargate).
	Tasks TaskUsage
}

// TableCapacity is one table's consumed read and write request units.
// Estimated is the part of Write billed for failed conditions, which
// DynamoDB does not report (docs/aws-local.md).
type TableCapacity struct {
	Read, Write, Estimated float64
}

// RoleUsage is one caller role's share of the AWS requests.
type RoleUsage struct {
	Requests      map[string]int
	EmptyReceives int
	Read, Write   float64
}

// FunctionUsage is one function's invocations.
type FunctionUsage struct {
	MemoryMB            int
	Invocations, Errors int
	// Duration is the emulators' busy time; BilledMillis each invocation
	// rounded up to the millisecond, as Lambda bills it; GBSeconds is
	// BilledMillis × MemorySize.
	Duration     time.Duration
	BilledMillis int64
	GBSeconds    float64
	// InFlight counts invocations asked for and not finished now (an
	// asynchronous one, such as the reconciler's, included); MaxInFlight
	// the most at once since the stack started or ResetPeaks. Sub keeps
	// the later reading's.
	InFlight, MaxInFlight int
}

// TaskUsage is the ECS stand-in's tasks.
type TaskUsage struct {
	// Started and Running count tasks; TaskSeconds is their billed time
	// (from image pull to stop) summed exactly, without Fargate's
	// per-task one-minute minimum.
	Started, Running int
	TaskSeconds      float64
}

// usageCounter is the gates' share of Usage, kept by metricSink.
type usageCounter struct {
	empty    int
	capacity map[string]TableCapacity
	byRole   map[string]RoleUsage // by role ARN
}

// call counts one request a gate authorized.
func (m *metricSink) call(c iamgate.Call) {
	role := c.Role
	key := string(c.Service) + ":" + c.Operation
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[key]++
	ru := m.usage.byRole[role]
	if ru.Requests == nil {
		ru.Requests = map[string]int{}
	}
	ru.Requests[key]++
	if c.EmptyReceive {
		m.usage.empty++
		ru.EmptyReceives++
	}
	for _, cp := range c.Capacity {
		tc := m.usage.capacity[cp.Table]
		tc.Read += cp.Read
		tc.Write += cp.Write
		if cp.Estimated {
			tc.Estimated += cp.Write + cp.Read
		}
		m.usage.capacity[cp.Table] = tc
		ru.Read += cp.Read
		ru.Write += cp.Write
	}
	m.usage.byRole[role] = ru
}

// Usage reads what the stack has done so far.
func (s *Stack) Usage() Usage {
	u := Usage{At: time.Now(), Functions: map[lambdaapp.Function]FunctionUsage{}}
	m := s.metrics
	m.mu.Lock()
	u.Requests = maps.Clone(m.calls)
	u.EmptyReceives = m.usage.empty
	u.Capacity = maps.Clone(m.usage.capacity)
	u.ByRole = map[string]RoleUsage{}
	for arn, ru := range m.usage.byRole {
		ru.Requests = maps.Clone(ru.Requests)
		name := arn[strings.LastIndex(arn, "/")+1:]
		if r := s.model.roles[arn]; r != nil {
			name = r.ID
		}
		u.ByRole[name] = ru
	}
	m.mu.Unlock()
	if s.gateway != nil {
		u.Routes = s.gateway.Requests()
	}
	s.mu.Lock()
	pools := maps.Clone(s.pools)
	s.mu.Unlock()
	for fn, id := range s.kinds {
		p := pools[id]
		if p == nil {
			continue
		}
		st := p.Stats()
		mem := s.model.functions[id].Memory
		u.Functions[fn] = FunctionUsage{MemoryMB: mem, Invocations: st.Invocations, Errors: st.Errors,
			Duration: st.Duration, BilledMillis: st.BilledMillis, GBSeconds: gbSeconds(st.BilledMillis, mem),
			InFlight: st.InFlight, MaxInFlight: st.MaxInFlight}
	}
	if s.ecs != nil {
		t := s.ecs.Usage()
		u.Tasks = TaskUsage{Started: t.Started, Running: t.Running, TaskSeconds: t.TaskSeconds}
	}
	return u
}

func gbSeconds(billedMillis int64, memoryMB int) float64 {
	return float64(billedMillis) / 1000 * float64(memoryMB) / 1024
}

// ResetPeaks starts every function's MaxInFlight again from what is in
// flight now.
func (s *Stack) ResetPeaks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pools {
		p.ResetPeak()
	}
}

// Sub is what happened between earlier and u: counters are differences;
// in-flight figures, running tasks and memory sizes are u's.
func (u Usage) Sub(earlier Usage) Usage {
	d := Usage{At: u.At, Requests: subCounts(u.Requests, earlier.Requests),
		EmptyReceives: u.EmptyReceives - earlier.EmptyReceives, Capacity: map[string]TableCapacity{},
		ByRole: map[string]RoleUsage{}, Routes: subCounts(u.Routes, earlier.Routes),
		Functions: map[lambdaapp.Function]FunctionUsage{}}
	for t, c := range u.Capacity {
		e := earlier.Capacity[t]
		if c := (TableCapacity{Read: c.Read - e.Read, Write: c.Write - e.Write, Estimated: c.Estimated - e.Estimated}); c != (TableCapacity{}) {
			d.Capacity[t] = c
		}
	}
	for r, ru := range u.ByRole {
		e := earlier.ByRole[r]
		x := RoleUsage{Requests: subCounts(ru.Requests, e.Requests), EmptyReceives: ru.EmptyReceives - e.EmptyReceives,
			Read: ru.Read - e.Read, Write: ru.Write - e.Write}
		if len(x.Requests) > 0 || x.Read != 0 || x.Write != 0 {
			d.ByRole[r] = x
		}
	}
	for fn, f := range u.Functions {
		e := earlier.Functions[fn]
		f.Invocations -= e.Invocations
		f.Errors -= e.Errors
		f.Duration -= e.Duration
		f.BilledMillis -= e.BilledMillis
		f.GBSeconds = gbSeconds(f.BilledMillis, f.MemoryMB)
		d.Functions[fn] = f
	}
	d.Tasks = TaskUsage{Started: u.Tasks.Started - earlier.Tasks.Started, Running: u.Tasks.Running,
		TaskSeconds: u.Tasks.TaskSeconds - earlier.Tasks.TaskSeconds}
	return d
}

// subCounts is a − b, without the keys whose difference is 0.
func subCounts(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range a {
		if n -= b[k]; n != 0 {
			out[k] = n
		}
	}
	return out
}
