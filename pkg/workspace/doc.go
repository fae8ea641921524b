// Package workspace is what a worker's harness does with the worker's
// workspace: Prepare clones the house's repository with the worker's branch
// checked out and restricts pushes to that branch, CommitAndPush commits one
// file and pushes the branch (the scripted agent's `commit` directive), and
// Remove deletes the files when the workspace is released. Nothing here
// creates, resets or deletes a branch.
//
// It drives the git binary rather than go-git, because the agents
// themselves (Claude Code, Codex) use git in the workspace: the clone, its
// configuration and its pre-push hook must be exactly what git honours, and
// clone and push over every transport the deployment uses (local paths,
// file://, https with a credential helper) behave as they will for the
// agent. Each workspace is a full clone, not a worktree of a shared
// repository, so that its config, hooks and refs are its own.
//
// Pushes are restricted in two ways: remote.origin.push maps only the
// worker's branch, so a bare `git push` pushes nothing else, and a pre-push
// hook (core.hooksPath points at it, whatever the global configuration
// says) refuses any other ref and the deletion of the branch. A hook is a
// guard against mistakes, not a security boundary: an agent can pass
// --no-verify. The git host credential a worker holds is what must limit it
// on the server side.
//
// Credentials never appear in a repository URL (Prepare refuses one that
// carries them), so they can reach neither the clone's config nor a log;
// a harness passes them through git's credential helpers in the
// environment (GIT_CONFIG_COUNT/KEY/VALUE, GIT_ASKPASS), which git, run
// here, inherits. Errors are redacted all the same.
package workspace
