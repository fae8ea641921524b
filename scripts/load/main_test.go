package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagsRefuseBeforeCalling(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint", "http://192.0.2.1:8080", "--token-file", tok}, "refusing an endpoint off this machine"},
		{[]string{"--endpoint", "https://127.0.0.1:8080", "--token-file", tok}, "refusing an endpoint off this machine"},
		{[]string{"--token-file", filepath.Join(t.TempDir(), "none")}, "token file"},
		{[]string{"--token-file", tok, "--duration", "2h"}, "--duration"},
		{[]string{"--token-file", tok, "--mode", "chaos", "--endpoint", "http://127.0.0.1:1"}, "--mode"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, errb.String(), tc.want)
		}
		if strings.Contains(out.String()+errb.String(), "secret-token") {
			t.Errorf("%v: the token was printed", tc.args)
		}
	}
}
