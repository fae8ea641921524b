//go:build linux

package gateway

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// A port is ours only while our socket listens on it: not before, not
// after, and never when another process holds it.
func TestListensOnSaysWhoseSocketListens(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if ours, err := listensOn(os.Getpid(), port); err != nil || !ours {
		t.Fatalf("listensOn(self, %d) = %v, %v; want true", port, ours, err)
	}
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	if ours, err := listensOn(other.Process.Pid, port); err != nil || ours {
		t.Fatalf("listensOn(other, %d) = %v, %v; want false", port, ours, err)
	}
	l.Close()
	if ours, err := listensOn(os.Getpid(), port); err != nil || ours {
		t.Fatalf("listensOn(self, %d) after close = %v, %v; want false", port, ours, err)
	}
}
