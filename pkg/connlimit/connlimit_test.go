package connlimit_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
)

type server struct {
	ln      *connlimit.Listener
	url     string
	release chan struct{}
	held    sync.WaitGroup
}

func start(t *testing.T, lim connlimit.Limits) *server {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: connlimit.Wrap(inner, lim, nil), url: "http://" + inner.Addr().String(), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/trust", func(w http.ResponseWriter, r *http.Request) {
		connlimit.Trust(r.Context())
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		s.held.Done()
		<-s.release
		io.WriteString(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	s.ln.Install(srv)
	go srv.Serve(s.ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dialIdle(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func get(t *testing.T, c *http.Client, url string) (reused bool) {
	t.Helper()
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("GET %s: %d %q", url, resp.StatusCode, b)
	}
	return reused
}

// An idle flood from one peer holds at most PerPeer connections: each new
// one evicts the oldest, and a client sending a request is still served.
func TestIdleFloodIsBoundedPerPeer(t *testing.T) {
	s := start(t, connlimit.Limits{PerPeer: 8, Total: 16})
	addr := s.ln.Addr().String()
	cs := dialIdle(t, addr, 200)
	eventually(t, "the server accepted all 200", func() bool { return s.ln.Stats().Accepted >= 200 })
	st := s.ln.Stats()
	if st.MaxOpen > 8 || st.Open > 8 {
		t.Fatalf("held %d connections (max %d) from one peer, bound 8", st.Open, st.MaxOpen)
	}
	if st.Evicted < 192 {
		t.Fatalf("evicted %d, want at least 192", st.Evicted)
	}
	// The first connection was evicted: the server closed it.
	cs[0].SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := cs[0].Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("the oldest idle connection still open (read %d, %v)", n, err)
	}
	get(t, &http.Client{Transport: &http.Transport{}}, s.url+"/")
}

// Connections serving a request are never evicted: at the bound with every
// connection busy, a new one is closed at once, and the busy ones finish.
func TestBusyConnectionsAreKept(t *testing.T) {
	s := start(t, connlimit.Limits{PerPeer: 4, Total: 4})
	s.held.Add(4)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := (&http.Client{Transport: &http.Transport{}}).Get(s.url + "/hold")
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
		}()
	}
	s.held.Wait()
	c := dialIdle(t, s.ln.Addr().String(), 1)[0]
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection beyond the bound was served while every connection was busy")
	}
	eventually(t, "the refusal counted", func() bool { return s.ln.Stats().Refused == 1 })
	close(s.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a busy connection was cut: %v", err)
	}
	if st := s.ln.Stats(); st.Evicted != 0 {
		t.Fatalf("evicted %d busy connections", st.Evicted)
	}
}

// A trusted connection leaves the counts: a flood that evicts everything
// else leaves it open, and it keeps serving on the same connection.
func TestTrustedConnectionSurvivesAFlood(t *testing.T) {
	s := start(t, connlimit.Limits{PerPeer: 4, Total: 8, Reserved: 2})
	kitchn := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	get(t, kitchn, s.url+"/trust")
	eventually(t, "the connection trusted", func() bool { return s.ln.Stats().Trusted == 1 })
	dialIdle(t, s.ln.Addr().String(), 100)
	eventually(t, "the flood accepted", func() bool { return s.ln.Stats().Accepted >= 101 })
	for range 5 {
		if !get(t, kitchn, s.url+"/") {
			t.Fatal("kitchn's trusted connection was closed by the flood")
		}
	}
	if st := s.ln.Stats(); st.Open > 4 || st.Trusted != 1 {
		t.Fatalf("open %d (bound 4), trusted %d", st.Open, st.Trusted)
	}
}

// Everything closed, the counts return to zero.
func TestCountsReturnToZero(t *testing.T) {
	s := start(t, connlimit.Limits{PerPeer: 8, Total: 8})
	cs := dialIdle(t, s.ln.Addr().String(), 20)
	eventually(t, "accepted", func() bool { return s.ln.Stats().Accepted >= 20 })
	for _, c := range cs {
		c.Close()
	}
	eventually(t, "every connection released", func() bool { return s.ln.Stats().Open == 0 })
}
