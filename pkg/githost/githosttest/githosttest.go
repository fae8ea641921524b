// Package githosttest is the shared suite every git host passes, whether
// the house repository is on this machine's disk (package githost) or on a
// git server reached over smart HTTP (package remote): branch reads one at
// a time (BranchHead) and in a batch (ExistingBranches) agree with each
// other and with git itself, across loose and packed refs and changes made
// by other writers, and a batch is one read of the repository however many
// names it holds.
//
// An implementation's test supplies a Harness that builds a fresh host over
// a fresh bare repository whose main branch has one commit (githost.InitBare
// makes one), and says where that repository is on disk so that the suite
// can change it behind the host's back with git.
package githosttest

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Host is service.GitHost's method set, copied so that the suite does not
// build package service.
type Host interface {
	DefaultHead(ctx context.Context) (string, error)
	BranchHead(ctx context.Context, branch string) (commit string, exists bool, err error)
	ExistingBranches(ctx context.Context, branches []string) (map[string]bool, error)
	CreateBranch(ctx context.Context, branch, commit string) error
	DeleteBranch(ctx context.Context, branch string) error
}

// Subject is one fresh host under test.
type Subject struct {
	Host Host
	// Bare is the repository the host serves, on disk: the suite runs git
	// in it to play another writer.
	Bare string
	// Reads, when set, counts the host's reads of the repository so far
	// (reference advertisements, for a remote host). Nil skips the checks
	// that a batch is one read.
	Reads func() int
}

// Harness returns a fresh Subject for one subtest. Subtests run in
// parallel, so it must not use t.Setenv.
type Harness func(t *testing.T) Subject

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		run  func(*testing.T, *suite)
	}{
		{"BranchReadsAgreeWithGit", testAgree},
		{"BranchReadsFollowCreateAndDelete", testCreateDelete},
		{"ExistingBranchesEmpty", testEmpty},
		{"ExistingBranchesInvalid", testInvalid},
		{"ExistingBranchesManyInOneRead", testMany},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := h(t)
			if s.Host == nil || s.Bare == "" {
				t.Fatal("githosttest: the harness left Host or Bare unset")
			}
			tc.run(t, &suite{Subject: s, t: t})
		})
	}
}

type suite struct {
	Subject
	t *testing.T
}

// git runs git in the bare repository.
func (s *suite) git(stdin string, args ...string) string {
	s.t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir=" + s.Bare}, args...)...)
	cmd.Env = append(cmd.Environ(), "LC_ALL=C", "GIT_TERMINAL_PROMPT=0")
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// truth is what git says of each branch: its commit, or absent.
func (s *suite) truth(branches []string) map[string]string {
	s.t.Helper()
	out := s.git("", "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
	all := map[string]string{}
	for line := range strings.Lines(out) {
		h, name, _ := strings.Cut(strings.TrimSpace(line), " ")
		all[strings.TrimPrefix(name, "refs/heads/")] = h
	}
	want := map[string]string{}
	for _, b := range branches {
		if h, ok := all[b]; ok {
			want[b] = h
		}
	}
	return want
}

func (s *suite) head() string {
	s.t.Helper()
	h, err := s.Host.DefaultHead(context.Background())
	if err != nil {
		s.t.Fatalf("DefaultHead: %v", err)
	}
	return h
}

// commit makes a commit on top of parent that no branch points at.
func (s *suite) commit(parent, msg string) string {
	s.t.Helper()
	tree := s.git("", "rev-parse", parent+"^{tree}")
	return s.git("", "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree, "-p", parent, "-m", msg)
}

// existing is the set of truth's names.
func existing(heads map[string]string) map[string]bool {
	out := map[string]bool{}
	for b := range heads {
		out[b] = true
	}
	return out
}

// check compares BranchHead and ExistingBranches with git, name by name,
// and returns the heads BranchHead read.
func (s *suite) check(branches []string) map[string]string {
	s.t.Helper()
	ctx := context.Background()
	exist, err := s.Host.ExistingBranches(ctx, branches)
	if err != nil {
		s.t.Fatalf("ExistingBranches: %v", err)
	}
	want := s.truth(branches)
	if !maps.Equal(exist, existing(want)) {
		s.t.Errorf("ExistingBranches = %v, git has %v", exist, want)
	}
	got := map[string]string{}
	for _, b := range branches {
		h, ok, err := s.Host.BranchHead(ctx, b)
		if err != nil {
			s.t.Fatalf("BranchHead(%s): %v", b, err)
		}
		if ok {
			got[b] = h
		}
	}
	if !maps.Equal(got, want) {
		s.t.Errorf("BranchHead gives %v, git has %v", got, want)
	}
	return got
}

func testAgree(t *testing.T, s *suite) {
	ctx := context.Background()
	head := s.head()
	other := s.commit(head, "other")
	for _, b := range []string{"kitchen/a", "dir/leaf", "packed", "packed-moved", "gone"} {
		if err := s.Host.CreateBranch(ctx, b, head); err != nil {
			t.Fatalf("CreateBranch(%s): %v", b, err)
		}
	}
	// Another writer: packs every ref, moves one packed branch (a loose ref
	// now overrides the packed one), makes one branch and deletes another.
	s.git("", "pack-refs", "--all", "--prune")
	s.git("", "update-ref", "refs/heads/packed-moved", other)
	s.git("", "update-ref", "refs/heads/theirs", other)
	s.git("", "update-ref", "refs/heads/loose/leaf", other)
	s.git("", "update-ref", "-d", "refs/heads/gone")
	// Names that are folders of loose or packed branches, or lie below a
	// branch, are no branches.
	got := s.check([]string{
		"main", "kitchen/a", "dir/leaf", "packed", "packed-moved", "theirs", "loose/leaf", "gone",
		"dir", "dir/leaf/deeper", "kitchen", "loose", "loose/leaf/deeper", "nope",
	})
	if got["packed-moved"] != other || got["theirs"] != other || got["packed"] != head {
		t.Errorf("BranchHead gives %v: packed %s, moved and theirs %s", got, head, other)
	}
	for _, absent := range []string{"gone", "dir", "dir/leaf/deeper", "kitchen", "loose", "loose/leaf/deeper", "nope"} {
		if h, ok := got[absent]; ok {
			t.Errorf("BranchHead gives %s at %s; it does not exist", absent, h)
		}
	}
}

func testCreateDelete(t *testing.T, s *suite) {
	ctx := context.Background()
	head := s.head()
	names := []string{"kitchen/issue-1", "kitchen/issue-2"}
	if got := s.check(names); len(got) != 0 {
		t.Fatalf("branches before any creation: %v", got)
	}
	if err := s.Host.CreateBranch(ctx, names[0], head); err != nil {
		t.Fatal(err)
	}
	if got := s.check(names); got[names[0]] != head || len(got) != 1 {
		t.Errorf("after CreateBranch: %v", got)
	}
	if err := s.Host.DeleteBranch(ctx, names[0]); err != nil {
		t.Fatal(err)
	}
	if got := s.check(names); len(got) != 0 {
		t.Errorf("after DeleteBranch: %v", got)
	}
}

func testEmpty(t *testing.T, s *suite) {
	for _, names := range [][]string{nil, {}} {
		got, err := s.Host.ExistingBranches(context.Background(), names)
		if err != nil || len(got) != 0 {
			t.Errorf("ExistingBranches(%v) = %v, %v; want an empty map", names, got, err)
		}
	}
}

func testInvalid(t *testing.T, s *suite) {
	for _, bad := range []string{"a..b", "-x", "HEAD", "", "a b"} {
		_, err := s.Host.ExistingBranches(context.Background(), []string{"main", bad})
		if !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("ExistingBranches with %q = %v, want an invalid error", bad, err)
		}
	}
}

// testMany asks about hundreds of branches, some missing, in one batch.
func testMany(t *testing.T, s *suite) {
	head := s.head()
	other := s.commit(head, "other")
	const n = 300
	var in strings.Builder
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("kitchen/many-%03d", i))
		if i%3 != 0 {
			fmt.Fprintf(&in, "create refs/heads/%s %s\n", names[i], head)
		}
	}
	s.git(in.String(), "update-ref", "--stdin")
	// All packed, then some moved (loose again): a batch reads loose and
	// packed refs alike, and a loose ref wins over its packed line.
	s.git("", "pack-refs", "--all", "--prune")
	in.Reset()
	for i := 1; i < n; i += 6 {
		fmt.Fprintf(&in, "update refs/heads/%s %s\n", names[i], other)
		names = append(names, fmt.Sprintf("kitchen/many-%03d/x", i))
	}
	s.git(in.String(), "update-ref", "--stdin")
	before := 0
	if s.Reads != nil {
		before = s.Reads()
	}
	got, err := s.Host.ExistingBranches(context.Background(), slices.Clone(names))
	if err != nil {
		t.Fatal(err)
	}
	if s.Reads != nil {
		if reads := s.Reads() - before; reads != 1 {
			t.Errorf("ExistingBranches of %d names read the repository %d times, want once", len(names), reads)
		}
	}
	if want := existing(s.truth(names)); !maps.Equal(got, want) {
		t.Errorf("ExistingBranches of %d names: %d found, git has %d (%v)", len(names), len(got), len(want), diff(got, want))
	}
}

// diff names the branches on which got and want disagree.
func diff(got, want map[string]bool) []string {
	var out []string
	for k := range maps.Keys(want) {
		if got[k] != want[k] {
			out = append(out, k)
		}
	}
	for k := range maps.Keys(got) {
		if _, ok := want[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
