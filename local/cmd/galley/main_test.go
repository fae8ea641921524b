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

// The providers' base URLs are checked before anything starts, their
// errors never quote them, and aws-local takes them from the template.
func TestBaseURLFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--anthropic-base-url", "http://gw.example"}, 1, "Anthropic base URL (--anthropic-base-url) must be https (http only to a loopback address)"},
		{[]string{"--openai-base-url", "https://user:s3cret-pw@gw.example/v1"}, 1, "OpenAI base URL (--openai-base-url) must not carry a user or password"},
		{[]string{"--openai-base-url", "https://gw.example/v1?key=s3cret-pw"}, 1, "must have no query"},
		{[]string{"--stack", "aws-local", "--anthropic-base-url", "https://gw.example"}, 2, "--anthropic-base-url comes from the template"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
			if code := run(args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.want)
			}
			if strings.Contains(stderr.String()+stdout.String(), "s3cret-pw") {
				t.Errorf("the output quotes the URL's secret: %s", stderr.String())
			}
		})
	}
}
