package service

import (
	"context"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// TaskIndex remembers which ECS task runs a worker in the worker's own
// record (store.Worker.TaskARN), so that every function finds it, however
// far behind ListTasks is: a cancel served by another function right after
// the launch stops the task instead of finding none. It implements
// ecsrt.TaskIndex.
type TaskIndex struct{ st store.Resources }

// NewTaskIndex returns the index kept in st's worker records.
func NewTaskIndex(st store.Resources) *TaskIndex { return &TaskIndex{st: st} }

// TaskARN returns the task recorded for handle.
func (x *TaskIndex) TaskARN(ctx context.Context, handle string) (string, bool, error) {
	res, _, err := x.st.GetResource(ctx, protocol.KindWorker, handle)
	switch {
	case galleyerr.Is(galleyerr.NotFound, err):
		return "", false, nil
	case err != nil:
		return "", false, err
	case res.Worker == nil || res.Worker.TaskARN == "":
		return "", false, nil
	}
	return res.Worker.TaskARN, true, nil
}

// SetTaskARN records handle's task. It leaves the record's Updated alone:
// naming the task is no sign of the worker's life.
func (x *TaskIndex) SetTaskARN(ctx context.Context, handle, arn string) error {
	for range claimAttempts {
		res, ver, err := x.st.GetResource(ctx, protocol.KindWorker, handle)
		switch {
		case err != nil:
			return err
		case res.Worker == nil || res.Worker.TaskARN == arn:
			return nil
		}
		res.Worker.TaskARN = arn
		if _, err := x.st.PutResource(ctx, res, ver); !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
	}
	return galleyerr.Errorf(galleyerr.InFlight, "worker %s is contended", quoteShort(handle))
}
