package gitserve_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

// commitRandom commits size incompressible bytes as big.bin in a clone of
// url and returns the clone.
func commitRandom(t testing.TB, url, user, pass string, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "agent")
	must(t, "", user, pass, "clone", "--quiet", url, dir)
	blob := make([]byte, size)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, dir, user, pass, "add", "big.bin")
	must(t, dir, user, pass, "commit", "--quiet", "-m", "big")
	return dir
}

// TestLargePushThroughGate: a worker's push goes through its harness's gate
// inside its task or process, never through API Gateway and Lambda, so
// their payload limits (10 MB a request, 6 MB an invocation) do not bound
// it. A 24 MiB incompressible push — four times Lambda's limit — lands
// through the gate, the upstream forwarder and the house's backend.
func TestLargePushThroughGate(t *testing.T) {
	const branch = "kitchen/big"
	h := newHouse(t)
	url, user, session := gated(t, h, branch)
	dir := commitRandom(t, url, user, session, 24<<20)
	must(t, dir, user, session, "push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
	want := must(t, dir, user, session, "rev-parse", "HEAD")
	if got := must(t, h.dir, "", "", "rev-parse", "refs/heads/"+branch); got != want {
		t.Fatalf("%s at %s, want %s", branch, got, want)
	}
	if size := must(t, h.dir, "", "", "cat-file", "-s", want+":big.bin"); size != "25165824" {
		t.Fatalf("big.bin in the house is %s bytes", size)
	}
}

// BenchmarkPushThroughGate measures a 16 MiB incompressible push through
// a worker's gate (gate, upstream forwarder, house backend) against the
// same push straight to the house's backend, in one run; docs/harness.md
// records the figures.
//
//	go test -run '^$' -bench PushThroughGate -benchtime 5x -count 3 ./pkg/gitserve/
func BenchmarkPushThroughGate(b *testing.B) {
	for _, mode := range []string{"direct", "gate"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(16 << 20)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				h := newHouse(b)
				url, user, pass := served(b, h)
				if mode == "gate" {
					url, user, pass = gated(b, h, "kitchen/big")
				}
				dir := commitRandom(b, url, user, pass, 16<<20)
				b.StartTimer()
				must(b, dir, user, pass, "push", "--quiet", "origin", "HEAD:refs/heads/kitchen/big")
			}
		})
	}
}
