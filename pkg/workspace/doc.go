// Package workspace is what a worker's harness does with the worker's
// workspace: Prepare clones the house's repository with the worker's branch
// checked out and restricts pushes to that branch, CommitAndPush commits one
// file and pushes the branch (the scripted agent's `commit` directive), and
// Remove deletes the files when the workspace is released; Scrub clears a
// reused clone of planted git configuration and UseGate routes its origin
// through a push gate. Nothing here creates, resets or deletes a branch.
//
// It drives the git binary rather than go-git, because the agents
// themselves (Claude Code, Codex) use git in the workspace: the clone, its
// configuration and its pre-push hook must be exactly what git honours, and
// clone and push over every transport the deployment uses (local paths,
// file://, https with a credential helper) behave as they will for the
// agent. Each workspace is a full clone, not a worktree of a shared
// repository, so that its config, hooks and refs are its own. WithCache
// makes that clone fetch only what is new, through a mirror that the
// harness alone keeps; the clone borrows nothing from it once made
// (cache.go).
//
// What limits a worker's pushes is its push gate (package gitserve): the
// harness, under a user the agent cannot read, serves the agent's origin
// on loopback (UseGate points the clone there), authenticated with a
// per-session secret; the gate forwards fetches, and pushes of the
// worker's own branch only, to the house repository with the house
// credential, which the agent never holds. Deleting the insteadOf setting
// does not help the agent: the house refuses it without the credential.
//
// Prepare still installs a courtesy restriction, because it costs nothing
// and helps where there is no gate (the local server, whose house is a
// path on disk): remote.origin.push maps only the worker's branch, so a
// bare `git push` pushes nothing else, and a pre-push hook (core.hooksPath
// points at it, whatever the global configuration says) refuses any other
// ref and the deletion of the branch, with a message before any bytes are
// sent. It is not a boundary: an agent can pass --no-verify.
//
// A workspace the agent has used is hostile ground: its .git/config can
// name programs git runs (hooks, core.fsmonitor, filters, credential
// helpers, includes of other files). Prepare of an existing clone first
// Scrubs it, rewriting the config from Go with an allowlist and deleting
// hooks, without running git there; and every git command galley runs in a
// workspace does so with hooks and fsmonitor off and no system or global
// configuration (inRepo).
//
// Credentials never appear in a repository URL (Prepare refuses one that
// carries them), so they can reach neither the clone's config nor a log.
// WithCredential passes the house credential to Prepare's clone as an
// HTTP header in the git process's environment only; a harness may also
// pass helpers through GIT_CONFIG_COUNT/KEY/VALUE, which git, run here,
// inherits. Errors are redacted all the same.
package workspace
