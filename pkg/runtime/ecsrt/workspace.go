package ecsrt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

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
