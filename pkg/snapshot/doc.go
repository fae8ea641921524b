// Package snapshot keeps what a worker's worktree holds beyond its pushed
// commits, so that a worktree on a task's own disk can outlive the task:
// Save writes every file, folder and symbolic link of the worktree except
// its .git folder as one archive (tar, zstd-compressed), Restore puts an
// archive back into a worktree, and a Store (a folder for the local shape,
// an S3 bucket on AWS) keeps archives by key between the two.
//
// Restore treats an archive as the agent's, so as hostile: it writes
// nothing outside the worktree, follows no link, makes no device, fifo,
// hard link or setuid file, writes its files as the agent's uid, and spends
// no more disk, entries or decompressed bytes than the caller's Limits,
// refusing an archive before it goes past them, not after. It fills a
// staging folder beside the worktree, closed to every other user, and only
// a complete, verified archive replaces the worktree's files (its .git is
// kept): a refused, truncated or corrupt archive leaves the worktree as it
// was. docs/snapshots.md says what is kept, what is refused and why.
package snapshot
