package drive

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestConnClientKeepsAliveReadsChunkedAndReconnects(t *testing.T) {
	var conns atomic.Int32
	big := strings.Repeat("x", 64<<10) // larger than any buffer: sent chunked
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s", r.Method, b)
		case "/big":
			io.WriteString(w, big)
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := newConnClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for i := range 3 {
		st, b, err := c.do("POST", "/echo", "tok", []byte(fmt.Sprintf(`{"n":%d}`, i)))
		if err != nil || st != 200 || string(b) != fmt.Sprintf(`POST {"n":%d}`, i) {
			t.Fatalf("echo %d: %d %q %v", i, st, b, err)
		}
	}
	if st, b, err := c.do("GET", "/big", "tok", nil); err != nil || st != 200 || string(b) != big {
		t.Fatalf("big: %d len %d %v", st, len(b), err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("kept-alive calls used %d connections, want 1", n)
	}
	if st, b, err := c.do("GET", "/close", "tok", nil); err != nil || st != 200 || string(b) != "bye" {
		t.Fatalf("close: %d %q %v", st, b, err)
	}
	if st, _, err := c.do("GET", "/echo", "wrong", nil); err != nil || st != http.StatusForbidden {
		t.Fatalf("after a closed connection: %d %v, want 403 on a new connection", st, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("after the server closed: %d connections, want 2", n)
	}
	srv.CloseClientConnections() // the server drops the idle connection
	if st, _, err := c.do("POST", "/echo", "tok", []byte("{}")); err != nil || st != 200 {
		t.Fatalf("after the server dropped the connection: %d %v", st, err)
	}
}
