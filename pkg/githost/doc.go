// Package githost is the local implementation of service.GitHost: it reads,
// creates and deletes branches in the house's repository on this machine's
// disk, bare or not. InitBare makes such a repository for a fresh local
// deployment.
//
// Reading (HEAD, branch heads, commit objects) and making the first commit
// use go-git, which reads loose and packed refs the way git writes them.
// ExistingBranches, the inventory's read of many branches, lists the ref
// folders and packed-refs itself: go-git opens a file per branch with
// several system calls per path element.
//
// Creating and deleting a branch shell out to `git update-ref`. go-git's
// CheckAndSetReference cannot express "must not exist" (a nil old value means
// "don't check"), and it locks with flock on the ref file itself, which git
// and other processes do not honour. `git update-ref refs/heads/B <commit> ""`
// is git's own expected-absent update: it takes refs/heads/B.lock with
// O_CREAT|O_EXCL, checks under that lock that B exists neither loose nor
// packed, and renames the lock into place. That is atomic against every
// other git writer in any process, which is the guarantee the service's
// effects need (a retried launch converges on the branch instead of making
// a second one). The lock wait (core.filesRefLockTimeout) is raised so that
// many concurrent creators queue on the lock and then lose on the check,
// rather than fail on the lock: the loser's answer is then always Conflict.
// A lock file left by a git process killed mid-update blocks that one ref
// until an operator removes it; CreateBranch then answers Unavailable.
//
// Branch names are checked with ValidateBranch before any ref is touched.
package githost
