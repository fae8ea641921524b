package main

import (
	"bytes"
	"strings"
	"testing"
)

// --inject-aws-faults is refused unless an AWS client exists to inject
// into, and with a plan that does not parse; nothing is opened first.
func TestInjectAWSFaultsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--inject-aws-faults", "throttle=0.1"}, "needs --store dynamodb or --doorbell sqs"},
		{[]string{"--store", "bolt", "--doorbell", "local", "--inject-aws-faults", "timeout=0.1"}, "needs --store dynamodb or --doorbell sqs"},
		{[]string{"--store", "dynamodb", "--inject-aws-faults", "throttle=2"}, "not between 0 and 1"},
		{[]string{"--doorbell", "sqs", "--inject-aws-faults", "explode=0.1"}, "unknown fault"},
		{[]string{"--stack", "aws-local", "--inject-aws-faults", "throttle=0.1"}, "--stack local only"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
			if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// aws-local takes what the template sets from the template: such a flag
// is refused before anything starts, and the refusal never quotes a
// provider's base URL.
func TestAWSLocalRefusesTemplateFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--anthropic-base-url", "https://user:s3cret-pw@gw.example"}, "--anthropic-base-url comes from the template"},
		{[]string{"--openai-base-url", "https://gw.example/v1"}, "--openai-base-url comes from the template"},
		{[]string{"--store", "dynamodb"}, "--store comes from the template"},
		{[]string{"--default-agent", "claude"}, "--default-agent comes from the template"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--stack", "aws-local", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
			if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
			if strings.Contains(stderr.String()+stdout.String(), "s3cret-pw") {
				t.Errorf("the output quotes the URL's secret: %s", stderr.String())
			}
		})
	}
}

// galley serve's own flags are galley-dev serve's too, checked the same
// way: a bad provider base URL is refused before anything starts.
func TestServeFlagsAreGalleys(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--anthropic-base-url", "http://gw.example"}
	if code := run(args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "Anthropic base URL (--anthropic-base-url) must be https") {
		t.Fatalf("exit %d, stderr %q; want 1 and the base URL's refusal", code, stderr.String())
	}
}
