package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/localserver"
)

// The bench reads what galley serve (and galley-dev serve --stack
// aws-local) prints when ready: localserver.PrintReady's lines.
func TestReadReady(t *testing.T) {
	dir := t.TempDir()
	tokenFile, opFile := filepath.Join(dir, "token"), filepath.Join(dir, "operator-token")
	if err := os.WriteFile(tokenFile, []byte("kitchn-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(opFile, []byte("operator-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	localserver.PrintReady(&out, localserver.Options{House: "h1", Backend: "galley", Credential: "galley-token",
		OperatorTokenFile: opFile}, "http://127.0.0.1:48090", tokenFile)
	tgt, err := readReady(&out, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := target{endpoint: "http://127.0.0.1:48090", token: "kitchn-token", opToken: "operator-token", house: "h1", backend: "galley"}
	if tgt != want {
		t.Errorf("readReady = %+v, want %+v", tgt, want)
	}
	// A server that ends before its ready lines is an error.
	if _, err := readReady(strings.NewReader("galley: cannot listen\n"), &bytes.Buffer{}); err == nil {
		t.Error("readReady took a server that never said it was ready")
	}
}

// p50 and p95 by nearest rank.
func TestQuantiles(t *testing.T) {
	v := make([]float64, 20)
	for i := range v {
		v[i] = float64(20 - i) // 20, 19, ..., 1
	}
	if p50, p95 := quantiles(v); p50 != 10 || p95 != 19 {
		t.Errorf("quantiles of 1..20 = %v, %v, want 10, 19", p50, p95)
	}
}
