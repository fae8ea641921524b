// Package ecsrt runs galley's workers as ECS tasks on Fargate: one task per
// worker, started with RunTask under a clientToken derived from the effect
// key (ECS's own idempotency, so a retried launch converges on one task),
// stopped with StopTask, and observed with ListTasks and DescribeTasks. It
// implements service.Runtime and passes the shared suite in package
// runtimetest against local/ecsstandin, a stand-in speaking the ECS API.
//
// A task's container overrides carry only the worker's facts (handle,
// endpoint, repository, branch, workspace, agent) and a one-time bootstrap
// code (package bootstrap): never the worker's token, never kitchn's. The
// harness exchanges the code for its token once; docs/runtime-ecs.md gives
// the reasons.
//
// A handle maps to its task without state: startedBy is a pure function of
// the handle (StartedBy), and ListTasks filters on it. A Runtime also
// remembers the tasks it started, and an optional TaskIndex (the store) can
// remember them across processes, which spares the ListTasks call and covers
// ListTasks' own lag right after a launch. Livenesses, the inventory's read,
// describes 100 tasks a call, and lists the task definition's tasks once
// for the handles it does not remember.
//
// A worker's workspace lives on its task's own (ephemeral) storage and
// goes with the task, so RemoveWorkspace has nothing to do; what outlives
// the task is the worktree's snapshot (docs/snapshots.md).
//
// ParseTaskStateChange reads the EventBridge events ECS sends when a task
// changes state, for the reconciler.
package ecsrt
