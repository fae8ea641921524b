package ecsrt

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/service"
)

// OverrideEnv lists every variable the container overrides may hold: the
// worker's facts, on top of the task definition's environment. Nothing
// here is secret: the bootstrap code is good for one exchange, shortly
// after the launch (see package bootstrap).
var OverrideEnv = []string{contract.EnvAgent, contract.EnvBranch, contract.EnvParking, contract.EnvRepository, contract.EnvWorkerBootstrap, contract.EnvWorkerEndpoint, contract.EnvWorkerHandle, contract.EnvWorkspace}

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
	if _, ok := r.memoGet(spec.Handle); ok {
		return nil
	}
	in := r.runTaskInput(spec, 0)
	arn, _, err := r.runTask(ctx, in, bootstrap.Code(spec.Token, spec.Handle))
	if err != nil {
		return wrap(op, err)
	}
	r.remember(ctx, spec.Handle, arn)
	r.log.Info("worker task started", "handle", spec.Handle, "task", arn, "run", spec.Run, "task_name", spec.Task)
	return nil
}

// runTaskInput builds the RunTask request of spec, resuming parking (0:
// the launch's task). It is a pure function of spec, parking and the
// config: a retry with another request under the same clientToken would
// be refused as a conflict.
func (r *Runtime) runTaskInput(spec service.WorkerSpec, parking int) *ecs.RunTaskInput {
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
	if parking > 0 {
		vars[contract.EnvParking] = strconv.Itoa(parking)
	}
	var env []types.KeyValuePair
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if vars[k] != "" {
			env = append(env, types.KeyValuePair{Name: aws.String(k), Value: aws.String(vars[k])})
		}
	}
	in := r.baseInput(r.taskDefinition(spec.Agent))
	in.ClientToken = aws.String(ClientToken(idem))
	in.StartedBy = aws.String(StartedBy(spec.Handle))
	in.Overrides = &types.TaskOverride{ContainerOverrides: []types.ContainerOverride{{
		Name:        aws.String(r.cfg.Container),
		Environment: env,
	}}}
	in.Tags = r.tags(spec)
	return in
}

// baseInput is what every RunTask of this runtime shares: cluster, network
// and capacity, with the task definition td.
func (r *Runtime) baseInput(td string) *ecs.RunTaskInput {
	assign := types.AssignPublicIpDisabled
	if r.cfg.AssignPublicIP {
		assign = types.AssignPublicIpEnabled
	}
	in := &ecs.RunTaskInput{
		Cluster:              aws.String(r.cfg.Cluster),
		TaskDefinition:       aws.String(td),
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

// runTask calls RunTask up to r.attempts times and returns the task's ARN
// and its lastStatus as ECS answered it ("" when it did not say: a task
// the clientToken had already made, named by a conflict). secret is
// scrubbed from any message ECS sends back.
func (r *Runtime) runTask(ctx context.Context, in *ecs.RunTaskInput, secret string) (arn, status string, err error) {
	uncertain := false // an attempt may have launched a task
	var last error
	for attempt := 1; ; attempt++ {
		out, err := r.ecs.RunTask(ctx, in, noRetry)
		if err == nil {
			if len(out.Tasks) > 0 && out.Tasks[0].TaskArn != nil {
				return *out.Tasks[0].TaskArn, aws.ToString(out.Tasks[0].LastStatus), nil
			}
			if len(out.Failures) == 0 {
				return "", "", galleyerr.Errorf(galleyerr.Other, "RunTask answered neither a task nor a failure")
			}
			f := out.Failures[0]
			reason, detail := aws.ToString(f.Reason), aws.ToString(f.Detail)
			msg := scrub("RunTask failed: "+reason+" "+detail, secret)
			switch {
			case uncertain:
				return "", "", galleyerr.E(galleyerr.Unavailable, msg+" (after an attempt of unknown outcome)")
			case quotaMessage(reason) || quotaMessage(detail):
				return "", "", rateLimited(msg, quotaRetryAfter)
			case capacityFailure(reason) || capacityMessage(detail):
				return "", "", galleyerr.E(galleyerr.RateLimited, msg)
			}
			// ECS placed nothing and says why: a definite refusal.
			return "", "", galleyerr.E(galleyerr.Other, msg, service.ErrStartRefused)
		}
		c := classify(err)
		msg := scrub(c.msg, secret)
		switch c.class {
		case classConverged:
			// The clientToken already made a task, from a request that
			// differed (a deployment changed the config meanwhile).
			r.log.Warn("RunTask converged on an existing task", "task", c.arn)
			return c.arn, "", nil
		case classCapacity:
			if uncertain {
				return "", "", galleyerr.E(galleyerr.Unavailable, msg+" (after an attempt of unknown outcome)")
			}
			if ra := c.retryAfter; quotaMessage(msg) && ra == 0 {
				return "", "", rateLimited(msg, quotaRetryAfter)
			}
			return "", "", rateLimited(msg, c.retryAfter)
		case classThrottled:
			last = rateLimited(msg, c.retryAfter)
		case classUncertain:
			uncertain = true
			last = galleyerr.E(galleyerr.Unavailable, "RunTask: "+msg)
		default:
			if uncertain {
				return "", "", galleyerr.E(galleyerr.Unavailable, "RunTask: "+msg+" (after an attempt of unknown outcome)")
			}
			return "", "", galleyerr.E(galleyerr.Other, "RunTask: "+msg, service.ErrStartRefused)
		}
		if attempt >= r.attempts || !r.pause(ctx, attempt, c.retryAfter) {
			break
		}
	}
	if uncertain {
		return "", "", galleyerr.E(galleyerr.Unavailable, "RunTask: no attempt succeeded and one may have launched the task", last)
	}
	return "", "", last
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

func scrub(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "[redacted]")
}
