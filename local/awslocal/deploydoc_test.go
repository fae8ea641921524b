package awslocal_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freshClone copies the module's files as a fresh clone has them (tracked
// and not ignored: no bin/, no cdk.out/, no node_modules/) to a temporary
// folder. node_modules (the pinned CDK CLI, which `npm ci` would install)
// is linked from the module, with package-lock.json made older than it so
// that make does not run npm ci again.
func freshClone(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "galley")
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		st, err := os.Lstat(src)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	nm := filepath.Join(root, "node_modules")
	if _, err := os.Stat(filepath.Join(nm, ".bin", "cdk")); err != nil {
		t.Fatalf("no CDK CLI in %s (npm ci, or make synth-local, installs it): %v", nm, err)
	}
	if err := os.Symlink(nm, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "package-lock.json"), old, old); err != nil {
		t.Fatal(err)
	}
	return dir
}

// noCredentials is this process's environment without any AWS credential
// or profile: no AWS_ variable, no config or credentials file, no instance
// metadata; a region, which is no credential, so that commands get as far
// as asking for one. CI=true, as a CI job has it.
func noCredentials(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") || k == "CI" || k == "CDK_DEFAULT_ACCOUNT" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, append([]string{"AWS_CONFIG_FILE=/nonexistent/config", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent/credentials",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1", "CI=true"}, extra...)...)
}

// Each tool's words for "no credentials": the AWS CLI's, the CDK CLI's,
// the Go SDK's.
var noCredentialMarks = []string{
	"Unable to locate credentials",
	"no credentials have been configured",
	// The CDK CLI, for an environment-agnostic stack, whose account only
	// credentials say.
	"Unable to resolve AWS account to use",
	"failed to retrieve credentials",
	"Could not load credentials",
}

// docPlaceholders are the doc's placeholders and what the runs put there.
var docPlaceholders = strings.NewReplacer(
	"aws://ACCOUNT-ID/REGION", "aws://123456789012/us-east-1",
	"--region REGION", "--region us-east-1",
	"TOKEN-SECRET-ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:galley/myhouse/bearer-token-AbCdEf",
	"REGISTRY/", "registry/",
)

// runUntilCredentials runs a doc command as written (its placeholders
// filled in) with bash in dir and no credentials, and checks that it got
// past synthesis and its argument checks and failed only for want of
// credentials.
func runUntilCredentials(t *testing.T, dir, cmd string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", docPlaceholders.Replace(cmd))
	c.Dir = dir
	c.Env = noCredentials()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	start := time.Now()
	err := c.Run()
	got := out.String()
	marked := false
	for _, m := range noCredentialMarks {
		marked = marked || strings.Contains(got, m)
	}
	if !marked {
		t.Errorf("%s: %v after %v; want it to stop only for want of AWS credentials; output:\n%s", cmd, err, time.Since(start).Round(time.Second), tail(got, 4000))
		return
	}
	t.Logf("%s: stopped at the credentials after %v", cmd, time.Since(start).Round(time.Second))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// docWorkDir is a folder for the doc's aws commands to run in, holding the
// files they read (the keys put with file://) and the folders they write.
func docWorkDir(t *testing.T) string {
	dir := t.TempDir()
	for _, f := range []string{"anthropic.key", "openai.key", "git.token"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not-a-key"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "registry", "private", "myhouse", "credentials"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
