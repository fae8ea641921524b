package smstandin

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A client that sends a call's headers and then never sends its body is
// cut off at the body deadline, and the stand-in keeps serving.
func TestSlowBodyCutOff(t *testing.T) {
	srv, err := New(WithBodyTimeout(50 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST / HTTP/1.1\r\nHost: sm\r\nContent-Type: " + ContentType +
		"\r\nX-Amz-Target: " + TargetPrefix + OpListSecrets + "\r\nContent-Length: 100\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute)) // a safety net, not an assertion
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body that never arrived: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Amzn-Errortype") != "SerializationException" {
		t.Fatalf("a body that never arrived: %s %s", resp.Status, resp.Header.Get("X-Amzn-Errortype"))
	}
	if got := srv.Requests(); len(got) != 1 || got[0].Code != "SerializationException" {
		t.Fatalf("recorded %+v", got)
	}
	h := newHarness(t)
	if _, err := h.sm.ListSecrets(t.Context(), nil); err != nil {
		t.Fatalf("a call after the slow one: %v", err)
	}
}
