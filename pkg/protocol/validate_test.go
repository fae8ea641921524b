package protocol

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestIsIdentifier(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"a", true},
		{"Z", true},
		{"0", true},
		{"origin89", true},
		{"sandbox-token", true},
		{"a_b-C9", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"-a", false},
		{"_a", false},
		{"a.b", false},
		{"a b", false},
		{"a/b", false},
		{"é", false},
		{"a\x00", false},
	} {
		if got := IsIdentifier(tc.s); got != tc.ok {
			t.Errorf("IsIdentifier(%q) = %v, want %v", tc.s, got, tc.ok)
		}
	}
}

func TestIsReference(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"k-8d2f", true},
		{"!", true},
		{"~", true},
		{`a"b\c{}`, true},
		{strings.Repeat("x", 256), true},
		{strings.Repeat("x", 257), false},
		{"", false},
		{"a b", false},
		{"a\tb", false},
		{"a\x7f", false},
		{"a\x1f", false},
		{"é", false},
	} {
		if got := IsReference(tc.s); got != tc.ok {
			t.Errorf("IsReference(%q) = %v, want %v", tc.s, got, tc.ok)
		}
	}
}

func TestIsText(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		ok   bool
	}{
		{"one byte", "x", true},
		{"spaces and newlines", "Fix it.\n\tNow ", true},
		{"unicode", "héllo, 世界 🍳", true},
		{"64 KiB", strings.Repeat("x", 64<<10), true},
		{"64 KiB of multibyte", strings.Repeat("é", 32<<10), true},
		{"over 64 KiB", strings.Repeat("x", 64<<10+1), false},
		{"empty", "", false},
		{"NUL", "a\x00b", false},
		{"invalid UTF-8", "a\xffb", false},
		{"truncated rune", "\xe4\xb8", false},
		{"surrogate half", "\xed\xa0\x80", false},
		{"DEL allowed", "a\x7f", true},
	} {
		if got := IsText(tc.s); got != tc.ok {
			t.Errorf("%s: IsText = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// branchCases are checked against IsBranchName and, where git is present,
// against git check-ref-format --branch itself.
var branchCases = []struct {
	s  string
	ok bool
	// stricter marks a name git accepts and galley refuses on purpose.
	stricter bool
}{
	{"main", true, false},
	{"kitchen/issue-195", true, false},
	{"a/b/c", true, false},
	{"a-", true, false},
	{"a./b", true, false},
	{"a.b", true, false},
	{"a@b", true, false},
	{"a{b", true, false},
	{"a}", true, false},
	{"@/a", true, false},
	{"a/@", true, false},
	{"lock", true, false},
	{"a.lock.b", true, false},
	{"a.lockx", true, false},
	{"refs/heads/x", true, false},
	{"HEADS", true, false},
	{"x+y=z!#$%&'()<>|,;`\"", true, false},
	{strings.Repeat("b", 255), true, false},
	{strings.Repeat("b", 256), false, true},
	{"@", false, true},
	{"é", false, true},
	{"naïve", false, true},
	{"", false, false},
	{"HEAD", false, false},
	{"-a", false, false},
	{"-", false, false},
	{"a.", false, false},
	{"a/b.", false, false},
	{".a", false, false},
	{"a/.b", false, false},
	{".", false, false},
	{"..", false, false},
	{"a..b", false, false},
	{"a/..", false, false},
	{"a//b", false, false},
	{"/a", false, false},
	{"a/", false, false},
	{"a@{b", false, false},
	{"@{-1}", false, false},
	{"a b", false, false},
	{"a\tb", false, false},
	{"a\x01b", false, false},
	{"a\x7fb", false, false},
	{"a~b", false, false},
	{"a^b", false, false},
	{"a:b", false, false},
	{"a?b", false, false},
	{"a*b", false, false},
	{"a[b", false, false},
	{`a\b`, false, false},
	{"x.lock", false, false},
	{"x.lock/y", false, false},
	{"a/x.lock", false, false},
	{".lock", false, false},
	{"a/.lock", false, false},
}

func TestIsBranchName(t *testing.T) {
	for _, tc := range branchCases {
		if got := IsBranchName(tc.s); got != tc.ok {
			t.Errorf("IsBranchName(%q) = %v, want %v", tc.s, got, tc.ok)
		}
	}
}

// gitAcceptsBranch runs the real git check-ref-format --branch outside any
// repository (so "@{-1}" is not expanded).
func gitAcceptsBranch(t *testing.T, git, dir, name string) bool {
	t.Helper()
	cmd := exec.Command(git, "check-ref-format", "--branch", name)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("git: %v", err)
	}
	return err == nil
}

func TestIsBranchNameAgreesWithGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv("GALLEY_REQUIRE_STANDINS") == "1" {
			t.Fatal("git not found")
		}
		t.Skip("git not found")
	}
	dir := t.TempDir()
	for _, tc := range branchCases {
		if tc.s == "" || strings.ContainsRune(tc.s, 0) {
			continue // not passable as an argument
		}
		want := gitAcceptsBranch(t, git, dir, tc.s)
		if tc.stricter {
			if want != true && len(tc.s) <= 255 {
				t.Errorf("%q: git refuses a name marked as refused only by galley", tc.s)
			}
			continue
		}
		if got := IsBranchName(tc.s); got != want {
			t.Errorf("IsBranchName(%q) = %v, git says %v", tc.s, got, want)
		}
	}
	// Every short name over an alphabet of the characters the rules are
	// about, so that their combinations are checked, not only the table.
	alphabet := []string{"a", ".", "/", "@", "{", "-", "lock"}
	names := []string{""}
	for n := 0; n < 3; n++ {
		var next []string
		for _, p := range names {
			for _, c := range alphabet {
				next = append(next, p+c)
			}
		}
		names = next
		for _, name := range names {
			want := gitAcceptsBranch(t, git, dir, name)
			if name == "@" {
				want = false // the one deliberate difference below 256 ASCII bytes
			}
			if got := IsBranchName(name); got != want {
				t.Errorf("IsBranchName(%q) = %v, git says %v", name, got, want)
			}
		}
	}
}

func TestSmallPredicates(t *testing.T) {
	hex40 := strings.Repeat("a1", 20)
	hex64 := strings.Repeat("0f", 32)
	for _, tc := range []struct {
		name string
		f    func(string) bool
		s    string
		ok   bool
	}{
		{"commit sha1", IsCommitID, hex40, true},
		{"commit sha256", IsCommitID, hex64, true},
		{"commit 39", IsCommitID, hex40[:39], false},
		{"commit 41", IsCommitID, hex40 + "a", false},
		{"commit 63", IsCommitID, hex64[:63], false},
		{"commit uppercase", IsCommitID, strings.ToUpper(hex40), false},
		{"commit non-hex", IsCommitID, strings.Repeat("g", 40), false},
		{"commit empty", IsCommitID, "", false},

		{"report simple", IsReportPath, "report.md", true},
		{"report nested", IsReportPath, "docs/reports/out.md", true},
		{"report dots in names", IsReportPath, "a..b/..c/c../.../.x", true},
		{"report single dot", IsReportPath, "./a", true},
		{"report unicode", IsReportPath, "rapports/été.md", true},
		{"report 4096", IsReportPath, strings.Repeat("r", 4096), true},
		{"report 4097", IsReportPath, strings.Repeat("r", 4097), false},
		{"report absolute", IsReportPath, "/etc/passwd", false},
		{"report dotdot", IsReportPath, "..", false},
		{"report dotdot first", IsReportPath, "../a", false},
		{"report dotdot middle", IsReportPath, "a/../b", false},
		{"report dotdot last", IsReportPath, "a/..", false},
		{"report NUL", IsReportPath, "a\x00b", false},
		{"report bad UTF-8", IsReportPath, "a\xff", false},
		{"report empty", IsReportPath, "", false},

		{"model", IsModel, "gpt-6-sol", true},
		{"model punctuation", IsModel, "claude-opus-4[1m]", true},
		{"model 128", IsModel, strings.Repeat("m", 128), true},
		{"model 129", IsModel, strings.Repeat("m", 129), false},
		{"model dash", IsModel, "-rf", false},
		{"model space", IsModel, "gpt 6", false},
		{"model unicode", IsModel, "modèle", false},
		{"model empty", IsModel, "", false},

		{"effort", IsEffort, "high", true},
		{"effort digits", IsEffort, "0", true},
		{"effort punctuation", IsEffort, "x1.5_y-z", true},
		{"effort 64", IsEffort, strings.Repeat("e", 64), true},
		{"effort 65", IsEffort, strings.Repeat("e", 65), false},
		{"effort uppercase", IsEffort, "High", false},
		{"effort leading dot", IsEffort, ".x", false},
		{"effort leading dash", IsEffort, "-x", false},
		{"effort leading underscore", IsEffort, "_x", false},
		{"effort space", IsEffort, "a b", false},
		{"effort empty", IsEffort, "", false},

		{"role", IsRole, RoleInspector, true},
		{"role unknown", IsRole, "chef", false},
		{"role case", IsRole, "Commis", false},
		{"kind", IsResourceKind, KindSchedule, true},
		{"kind unknown", IsResourceKind, "container", false},
		{"family claude", IsAgentFamily, AgentClaude, true},
		{"family other", IsAgentFamily, "gemini", false},
		{"capability", IsCapability, CapUsageAttribution, true},
		{"capability per op", IsCapability, "effect.idempotent.release-resource", true},
		{"capability lookup per op", IsCapability, "effect.lookup.launch-worker", true},
		{"capability made up", IsCapability, "effect.idempotent_requests.launch-worker", false},
		{"capability schedule", IsCapability, "schedule.manage", false},
	} {
		if got := tc.f(tc.s); got != tc.ok {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestCapabilitiesList(t *testing.T) {
	if len(Capabilities) != 13+10 {
		t.Fatalf("%d capabilities, want 23", len(Capabilities))
	}
	seen := map[string]bool{}
	for _, c := range Capabilities {
		if seen[c] {
			t.Errorf("%q twice", c)
		}
		seen[c] = true
	}
	for _, op := range []string{OpLaunch, OpMessage, OpReply, OpCancel, OpRelease} {
		c, ok := OpCapability(op)
		if !ok || !IsCapability(c) {
			t.Errorf("OpCapability(%q) = %q, %v", op, c, ok)
		}
	}
	if _, ok := OpCapability("launch-schedule"); ok {
		t.Error("an unknown type has a capability")
	}
}
