package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/client"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

const token = "w-1.s3cr3t-worker-token-value"

func newFake(t *testing.T) *fakeapi.Server {
	t.Helper()
	f := fakeapi.New(workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "hi", Agent: protocol.AgentSelection{Agent: "script"}}, token)
	t.Cleanup(f.Close)
	return f
}

// fast keeps retries quick: the tests count attempts, not time.
func fast() client.Option { return client.WithRetry(4, time.Millisecond, 5*time.Millisecond) }

func TestCallsRoundTrip(t *testing.T) {
	f := newFake(t)
	c := client.New(f.URL, token, fast())
	ctx := context.Background()

	self, err := c.Self(ctx)
	if err != nil || self.Handle != "w-1" || self.State != protocol.StateStarting {
		t.Fatalf("Self = %+v, %v", self, err)
	}
	if err := c.Ready(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	ans, err := c.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgQuestion, Subject: "s", Body: "b"})
	if err != nil || ans.ID == "" {
		t.Fatalf("Post = %+v, %v", ans, err)
	}
	in, out := int64(3), int64(4)
	if err := c.Usage(ctx, protocol.UsageReport{Source: "w-1", Tokens: &protocol.Tokens{Input: &in, Output: &out}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Exited(ctx, 3, "agent exited"); err != nil {
		t.Fatal(err)
	}
	snap := f.Snapshot()
	want := []string{workerapi.PathReady, workerapi.PathPost, workerapi.PathUsage, workerapi.PathExited}
	if len(snap.Calls) != len(want) {
		t.Fatalf("calls = %+v", snap.Calls)
	}
	for i, p := range want {
		if snap.Calls[i].Path != p {
			t.Errorf("call %d = %s, want %s", i, snap.Calls[i].Path, p)
		}
	}
	if got := snap.Calls[1].Post; got.Kind != protocol.MsgQuestion || got.Subject != "s" || got.Body != "b" {
		t.Errorf("posted %+v", got)
	}
	if got := snap.Calls[3].Exited; got.Code != 3 || got.Reason != "agent exited" {
		t.Errorf("exited %+v", got)
	}
	if snap.State != protocol.StateSettled || snap.Outcome != protocol.OutcomeFailed {
		t.Errorf("state %s/%s", snap.State, snap.Outcome)
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name     string
		path     string
		statuses []int
		call     func(*client.Client) error
		kind     galleyerr.Kind // 0 (Other) with ok=true means success
		ok       bool
		attempts int
	}{
		{"5xx retried until success", workerapi.PathSelf, []int{503, 500}, selfCall, 0, true, 3},
		{"5xx retried until attempts run out", workerapi.PathReady, []int{503, 503, 503, 503}, readyCall, galleyerr.Unavailable, false, 4},
		{"post retried after 5xx (its client id makes it idempotent)", workerapi.PathPost, []int{503}, postCall, 0, true, 2},
		{"4xx not retried", workerapi.PathSelf, []int{404}, selfCall, galleyerr.NotFound, false, 1},
		{"rate limited", workerapi.PathUsage, []int{429}, usageCall, galleyerr.RateLimited, false, 1},
		{"bad request", workerapi.PathExited, []int{400}, exitedCall, galleyerr.Malformed, false, 1},
		{"conflict", workerapi.PathPost, []int{409}, postCall, galleyerr.Conflict, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.FailNext(tt.path, tt.statuses...)
			err := tt.call(client.New(f.URL, token, fast()))
			if tt.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok && galleyerr.KindOf(err) != tt.kind {
				t.Errorf("kind = %v, want %v (%v)", galleyerr.KindOf(err), tt.kind, err)
			}
			if got := f.Snapshot().Attempts[tt.path]; got != tt.attempts {
				t.Errorf("attempts = %d, want %d", got, tt.attempts)
			}
			if err != nil && strings.Contains(err.Error(), token) {
				t.Errorf("error holds the token: %v", err)
			}
		})
	}
}

func selfCall(c *client.Client) error  { _, err := c.Self(context.Background()); return err }
func readyCall(c *client.Client) error { return c.Ready(context.Background(), "x") }
func postCall(c *client.Client) error {
	_, err := c.Post(context.Background(), workerapi.PostRequest{Kind: protocol.MsgStatus, Body: "b"})
	return err
}
func usageCall(c *client.Client) error {
	return c.Usage(context.Background(), protocol.UsageReport{Source: "w-1"})
}
func exitedCall(c *client.Client) error { return c.Exited(context.Background(), 1, "r") }

func TestWrongTokenIsUnauthorized(t *testing.T) {
	f := newFake(t)
	const wrong = "w-1.not-the-right-one"
	_, err := client.New(f.URL, wrong, fast()).Self(context.Background())
	if !galleyerr.Is(galleyerr.Unauthorized, err) {
		t.Fatalf("err = %v, want unauthorized", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("error holds the token: %v", err)
	}
	if s := f.Snapshot(); s.Refused != 1 || s.Attempts[workerapi.PathSelf] != 1 {
		t.Errorf("refused=%d attempts=%d, want 1 and 1 (no retry)", s.Refused, s.Attempts[workerapi.PathSelf])
	}
}

// TestDialFailureRetried: a post that could not connect never reached
// galley, so even a post is retried.
func TestDialFailureRetried(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var dials atomic.Int32
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}}}
	c := client.New("http://"+addr, token, fast(), client.WithHTTPClient(hc))
	_, err = c.Post(context.Background(), workerapi.PostRequest{Kind: protocol.MsgStatus, Body: "b"})
	if !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	if dials.Load() != 4 {
		t.Errorf("dials = %d, want 4", dials.Load())
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		followed.Add(1)
		_, _ = w.Write([]byte(`{}`))
	}))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	err := client.New(redirect.URL, token, fast()).Ready(context.Background(), "x")
	if err == nil || galleyerr.KindOf(err) != galleyerr.Other {
		t.Fatalf("err = %v, want an unclassified failure", err)
	}
	if followed.Load() != 0 {
		t.Error("the redirect was followed, carrying the token")
	}
}

func TestInboxLongPoll(t *testing.T) {
	f := newFake(t)
	c := client.New(f.URL, token, fast())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type result struct {
		ans workerapi.InboxAnswer
		err error
	}
	done := make(chan result, 1)
	go func() {
		ans, err := c.Inbox(ctx, 0, client.MaxInboxWait)
		done <- result{ans, err}
	}()
	// Enqueue only once the poll is held, so the answer proves the wake.
	if _, err := f.Wait(ctx, func(s fakeapi.Snapshot) bool { return s.Attempts[workerapi.PathInbox] == 1 }); err != nil {
		t.Fatal(err)
	}
	f.Message("first")
	r := <-done
	if r.err != nil || len(r.ans.Items) != 1 || r.ans.Items[0].Body != "first" || r.ans.Items[0].Seq != 1 {
		t.Fatalf("Inbox = %+v, %v", r.ans, r.err)
	}

	f.Reply("msg-9", "answer")
	ans, err := c.Inbox(ctx, 1, client.MaxInboxWait)
	if err != nil || len(ans.Items) != 1 || ans.Items[0].Kind != workerapi.ItemReply || ans.Items[0].Question != "msg-9" {
		t.Fatalf("Inbox after 1 = %+v, %v", ans, err)
	}

	f.Settle(protocol.OutcomeCancelled)
	ans, err = c.Inbox(ctx, 2, client.MaxInboxWait)
	if err != nil || !ans.Settled || ans.Outcome != protocol.OutcomeCancelled || len(ans.Items) != 0 {
		t.Fatalf("Inbox settled = %+v, %v", ans, err)
	}
}

func TestInboxShortWaitAnswersEmpty(t *testing.T) {
	f := newFake(t)
	ans, err := client.New(f.URL, token, fast()).Inbox(context.Background(), 0, 0)
	if err != nil || len(ans.Items) != 0 || ans.Settled {
		t.Fatalf("Inbox = %+v, %v", ans, err)
	}
}

func TestCancelledContextStopsRetries(t *testing.T) {
	f := newFake(t)
	f.FailNext(workerapi.PathSelf, 503, 503, 503, 503)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := client.New(f.URL, token, client.WithRetry(4, time.Hour, time.Hour)).Self(ctx)
	if err == nil {
		t.Fatal("want an error")
	}
	if n := f.Snapshot().Attempts[workerapi.PathSelf]; n > 1 {
		t.Errorf("attempts = %d after cancel, want at most 1", n)
	}
}

func TestBadEndpoint(t *testing.T) {
	for _, ep := range []string{"", "ftp://h", "http://user:pw@h", "http://h/?q=1", "http://h/#f", "/relative"} {
		if _, err := client.ParseEndpoint(ep); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("ParseEndpoint(%q) = %v, want invalid", ep, err)
		}
		if err := client.New(ep, token).Ready(context.Background(), "x"); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Ready via %q = %v, want invalid", ep, err)
		}
	}
}

func TestEndpointPathPrefix(t *testing.T) {
	var seen atomic.Value
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.Path)
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer proxy.Close()
	_ = client.New(proxy.URL+"/kitchen/", token, fast()).Ready(context.Background(), "x")
	if got := seen.Load(); got != "/kitchen"+workerapi.PathReady {
		t.Errorf("path = %v", got)
	}
}
