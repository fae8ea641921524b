package testnet_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/galley-run/galley/local/testnet"
)

// The host beyond is reached from this machine's network, by its
// public-looking address, as a host of the internet would be.
func TestHostBeyondIsReached(t *testing.T) {
	h, err := testnet.New()
	if errors.Is(err, testnet.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	if h.Addr.IsPrivate() || h.Addr.IsLoopback() || !h.Addr.IsGlobalUnicast() {
		t.Fatalf("%s does not look public", h.Addr)
	}
	ln, err := h.Listen(443)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.WriteString(c, "beyond\n")
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(h.Addr.String(), "443"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	if string(b) != "beyond\n" {
		t.Fatalf("read %q", b)
	}
}
