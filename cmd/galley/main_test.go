package main

import (
	"bytes"
	"strings"
	"testing"
)

// The providers' base URLs are checked before anything starts and their
// errors never quote them (galley-dev's tests: aws-local takes them from
// the template).
func TestBaseURLFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--anthropic-base-url", "http://gw.example"}, 1, "Anthropic base URL (--anthropic-base-url) must be https (http only to a loopback address)"},
		{[]string{"--openai-base-url", "https://user:s3cret-pw@gw.example/v1"}, 1, "OpenAI base URL (--openai-base-url) must not carry a user or password"},
		{[]string{"--openai-base-url", "https://gw.example/v1?key=s3cret-pw"}, 1, "must have no query"},
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
