package gitexec_test

import (
	"context"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/githost/gitexec"
)

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://x-access-token:s3cr3t@github.com/o/r.git", "https://<redacted>@github.com/o/r.git"},
		{"fatal: unable to access 'https://tok@host/r/': 403", "fatal: unable to access 'https://<redacted>@host/r/': 403"},
		{"ssh://git@host/r.git", "ssh://<redacted>@host/r.git"},
		{"https://host/r.git", "https://host/r.git"},
		{"/srv/house.git", "/srv/house.git"},
		{"a https://u:p@h/x and http://v:q@k/y", "a https://<redacted>@h/x and http://<redacted>@k/y"},
	}
	for _, tt := range tests {
		if got := gitexec.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A GIT_DIR inherited from a hook or a parent git must not redirect git.
func TestRunIgnoresRepositoryVariables(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := gitexec.Run(ctx, dir, "init", "-q", "--bare"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_DIR", t.TempDir())
	out, err := gitexec.Run(ctx, dir, "rev-parse", "--absolute-git-dir")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != dir {
		t.Fatalf("git dir = %s, want %s", got, dir)
	}
}

func TestErrorIsRedacted(t *testing.T) {
	_, err := gitexec.Run(context.Background(), t.TempDir(), "ls-remote", "https://u:s3cr3t@127.0.0.1:1/r.git")
	if err == nil {
		t.Fatal("ls-remote of a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error leaks the credential: %v", err)
	}
	if gitexec.ExitCode(err) <= 0 {
		t.Fatalf("exit code = %d", gitexec.ExitCode(err))
	}
}
