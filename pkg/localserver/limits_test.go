package localserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/workerapi"
)

// startLimited starts a local server with a short body deadline.
func startLimited(t *testing.T, o Options) *Server {
	t.Helper()
	o.Listen, o.House, o.Data, o.WorkerBin = "127.0.0.1:0", "h", filepath.Join(t.TempDir(), "d"), "/bin/true"
	srv, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

func token(t *testing.T, srv *Server) string {
	t.Helper()
	b, err := os.ReadFile(srv.TokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// slowRequest opens a connection, sends the headers of a credential
// exchange that announces a body of length bytes, and then sends it one byte
// at a time until the server stops reading (trickle) or never (!trickle).
// It returns once the server has answered or closed the connection, with
// an error if neither happens within a minute (a server without a body
// deadline holds the connection for ever).
func slowRequest(addr string, length int, trickle bool) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	head := "POST " + workerapi.PathCredential + " HTTP/1.1\r\nHost: galley\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(length) + "\r\n\r\n{\"handle\":\""
	if _, err := io.WriteString(conn, head); err != nil {
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if trickle {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	// A safety net, not an assertion on time: the deadline under test is
	// far shorter.
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	var ne net.Error
	switch {
	case err == nil:
		resp.Body.Close()
		if resp.StatusCode < 400 {
			return fmt.Errorf("a body that never arrived was answered %s", resp.Status)
		}
		return nil
	case errors.As(err, &ne) && ne.Timeout():
		return errors.New("the server still holds a connection whose body never arrived")
	}
	return nil // closed without an answer
}

// TestSlowBodyCutOff: a client that sends headers and then trickles its
// body, or never sends it, is cut off by the body deadline, and the server
// keeps serving the others, kitchn and the slow route alike.
func TestSlowBodyCutOff(t *testing.T) {
	srv := startLimited(t, Options{BodyTimeout: 100 * time.Millisecond, MaxUnauthenticated: 4})
	addr := strings.TrimPrefix(srv.Endpoint, "http://")
	// A large announced body is abandoned after the answer; what remains
	// of a small one net/http reads before answering, under the deadline.
	for _, length := range []int{1_000_000, 100} {
		for _, trickle := range []bool{false, true} {
			var wg sync.WaitGroup
			for range 8 { // more than MaxUnauthenticated: the refused ones end too
				wg.Go(func() {
					if err := slowRequest(addr, length, trickle); err != nil {
						t.Errorf("%d bytes announced, trickle %v: %v", length, trickle, err)
					}
				})
			}
			wg.Wait()
		}
	}
	req, _ := http.NewRequest("GET", srv.Endpoint+"/v1/descriptor", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, srv))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("descriptor after the slow clients: %s", resp.Status)
	}
	// The credential route itself still reads a body that arrives: a bad
	// code is refused, not timed out.
	resp, err = http.Post(srv.Endpoint+workerapi.PathCredential, "application/json",
		strings.NewReader(`{"handle":"w-1","code":"nope","claim":"c"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode < 400 {
		t.Fatalf("credential exchange with a bad code after the slow clients: %s", resp.Status)
	}
}

// TestLongPollOutlivesBodyDeadline: the body deadline is lifted once the
// body has arrived, so deliveries/await holds the call for its whole wait,
// well past the deadline, and answers.
func TestLongPollOutlivesBodyDeadline(t *testing.T) {
	const deadline = 50 * time.Millisecond
	srv := startLimited(t, Options{BodyTimeout: deadline})
	body := `{"run":"run-1","coordinator":"coord-1","waitMs":400}`
	req, _ := http.NewRequest("POST", srv.Endpoint+"/v1/deliveries/await", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token(t, srv))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	defer resp.Body.Close()
	var ans struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || ans.Status == "" {
		t.Fatalf("await answered %s %+v", resp.Status, ans)
	}
	// A lower bound, which cannot flake: the call was held past the
	// deadline, so the test is not passing vacuously.
	if held := time.Since(start); held < deadline {
		t.Fatalf("await answered after %v, before the body deadline: the test proves nothing", held)
	}
}

// TestLimitUnauthenticated: at most n unauthenticated requests are served
// at once; the next is refused 503 at once, a request with a token is not
// counted, and a freed slot serves again.
func TestLimitUnauthenticated(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := limitUnauthenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" || r.URL.Path == workerapi.PathCredential {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}), 2)
	ts := httptest.NewServer(h)
	defer ts.Close()
	do := func(path, auth string) int {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader("{}"))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	held := make(chan int, 2)
	go func() { held <- do(workerapi.PathCredential, "") }()
	go func() { held <- do("/v1/effects", "") }()
	<-entered
	<-entered
	if got := do(workerapi.PathCredential, "Bearer x"); got != http.StatusServiceUnavailable {
		t.Fatalf("a third credential exchange: %d, want 503", got)
	}
	if got := do("/v1/effects", "Bearer x"); got != http.StatusNoContent {
		t.Fatalf("an authenticated call while the slots are full: %d, want 204", got)
	}
	release <- struct{}{}
	if got := <-held; got != http.StatusNoContent {
		t.Fatalf("a held call: %d", got)
	}
	go func() { held <- do(workerapi.PathCredential, "") }()
	<-entered // a freed slot serves again
	release <- struct{}{}
	release <- struct{}{}
	for range 2 {
		if got := <-held; got != http.StatusNoContent {
			t.Fatalf("a held call: %d", got)
		}
	}
}
