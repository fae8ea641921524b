package connlimit

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// A loopback peer is keyed by the uid that owns its end.
func TestLoopbackPeerKeyedByUID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := "127.0.0.1 uid " + strconv.Itoa(os.Getuid())
	if got := peerKey(s.LocalAddr(), s.RemoteAddr()); got != want {
		t.Fatalf("peer key %q, want %q", got, want)
	}
	// Not loopback: the address alone.
	if got := peerKey(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 80}, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 5000}); got != "10.0.0.2" {
		t.Fatalf("peer key %q", got)
	}
}
