package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/workerapi"
)

// dialTargets tries a TCP connection, then an HTTP request, to each of
// addrs (stand-ins that only an IAM gate may reach). control, when given,
// is an address the agent may reach (a gate): that it answers shows the
// attempt could have succeeded. It succeeds if any of addrs answers.
func dialTargets(ctx context.Context, addrs []string, control string) (bool, string) {
	if len(addrs) == 0 {
		return false, "no address to dial"
	}
	reach := func(addr string) error {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	}
	var refused, answered []string
	for _, addr := range addrs {
		if err := reach(addr); err != nil {
			refused = append(refused, addr+": "+errText(err))
			continue
		}
		what := addr + " accepted a connection"
		hc := &http.Client{Timeout: 5 * time.Second}
		if resp, err := hc.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			what += fmt.Sprintf(" and answered HTTP %d", resp.StatusCode)
		}
		answered = append(answered, what)
	}
	if len(answered) > 0 {
		return true, strings.Join(answered, "; ")
	}
	detail := strings.Join(refused, "; ")
	if control != "" {
		if err := reach(control); err != nil {
			detail += "; control " + control + " did not answer either: " + errText(err)
		} else {
			detail += "; control " + control + " answered"
		}
	}
	return false, detail
}

// waitFile waits for the file at path (the test plants it after the
// agent starts) and returns its content, trimmed.
func waitFile(ctx context.Context, path string) (string, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			return string(bytes.TrimSpace(b)), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = errors.New("the file stayed empty")
			}
			return "", err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stolenToken calls the worker API at endpoint as the worker whose
// credential is in the file at path (another worker's, as a thief would
// have it): once as a bearer credential without a proof, once with a
// proof made by a key of its own. It succeeds if either call is answered
// 2xx. It never prints the credential: an answer that quotes it is
// redacted.
func stolenToken(ctx context.Context, path, endpoint string) (bool, string) {
	cred, err := waitFile(ctx, path)
	if err != nil {
		return false, "no stolen credential to use: " + errText(err)
	}
	key, err := dpop.NewKey()
	if err != nil {
		return false, "could not make a key: " + err.Error()
	}
	url := strings.TrimRight(endpoint, "/") + workerapi.PathSelf
	call := func(withProof bool) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		if withProof {
			proof, err := key.Proof(http.MethodPost, url, cred, time.Now())
			if err != nil {
				return 0, "", err
			}
			req.Header.Set(dpop.Header, proof)
			req.Header.Set("Authorization", dpop.Scheme+" "+cred)
		} else {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		hc := &http.Client{Timeout: 30 * time.Second}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		msg := strings.TrimSpace(string(b))
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		msg = strings.ReplaceAll(msg, cred, "[the credential]")
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return resp.StatusCode, msg, nil
	}
	var parts []string
	succeeded := false
	for _, c := range []struct {
		what  string
		proof bool
	}{{"as a bearer credential without a proof", false}, {"with a proof of its own key", true}} {
		st, msg, err := call(c.proof)
		switch {
		case err != nil:
			parts = append(parts, c.what+": "+errText(err))
		case st >= 200 && st < 300:
			succeeded = true
			parts = append(parts, fmt.Sprintf("%s: answered %d", c.what, st))
		default:
			parts = append(parts, fmt.Sprintf("%s: %d %s", c.what, st, msg))
		}
	}
	return succeeded, "the stolen credential " + strings.Join(parts, "; ")
}

// connFlood opens up to n connections to addr and holds them while hold
// runs (the runner asks the coordinator and waits for its reply, so the
// test makes kitchn's calls during the flood), then counts how many galley
// closed. It succeeds if all n were opened and still open at the end:
// nothing bounded it.
func connFlood(ctx context.Context, addr string, n int, hold func(opened int, lastErr error)) (bool, string) {
	if addr == "" || n <= 0 {
		return false, "no address or count to flood"
	}
	var conns []*net.TCPConn
	var lastErr error
	d := net.Dialer{Timeout: 5 * time.Second}
	for len(conns) < n && ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			lastErr = err
			break
		}
		conns = append(conns, c.(*net.TCPConn))
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	hold(len(conns), lastErr)
	closed := 0
	for _, c := range conns {
		if peerClosed(c) {
			closed++
		}
	}
	detail := fmt.Sprintf("opened %d of %d connections", len(conns), n)
	if lastErr != nil {
		detail += " (then: " + errText(lastErr) + ")"
	}
	detail += fmt.Sprintf("; galley closed %d of them while kitchn called", closed)
	if len(conns) >= n && closed == 0 {
		return true, "held all " + detail
	}
	return false, detail
}

// peerClosed reports whether c's peer closed it (a pending EOF or reset),
// without waiting: a peek that would block means the connection is open.
func peerClosed(c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	_ = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (err == nil && n == 0) || (err != nil && !errors.Is(err, syscall.EAGAIN))
		return true
	})
	return closed
}

// attack runs a, with the runner's tools for the attacks that talk to the
// coordinator.
func (r *runner) attack(ctx context.Context, a Attack) (bool, string) {
	if a.Kind != "connflood" {
		return attack(ctx, a)
	}
	return connFlood(ctx, a.Target, a.Count, func(opened int, lastErr error) {
		body := fmt.Sprintf("holding %d connections", opened)
		b, _ := json.Marshal(map[string]any{"subject": "connflood", "body": body})
		r.callPatiently(ctx, "ask_coordinator", string(b))
	})
}

// CheckVerdict says what a blocked verdict of attack name must show for
// the attacks whose "blocked" alone could also mean the attempt never
// ran; nil for the others. The stand-in writes these verdicts, so it says
// what they must hold, for every shape's test.
func CheckVerdict(name, v string) error {
	switch name {
	case "stolen-token":
		// Refused both ways, and refused as a genuine credential bound to
		// another key: the credential was real, only the key was missing.
		for _, want := range []string{"without a proof: 401 ", "with a proof of its own key: 401 ", "bound to another key"} {
			if !strings.Contains(v, want) {
				return fmt.Errorf("the stolen credential's verdict lacks %q: %s", want, v)
			}
		}
	case "connflood":
		if !strings.Contains(v, "opened ") || strings.Contains(v, "opened 0 of") {
			return fmt.Errorf("the connection flood opened no connection: %s", v)
		}
	case "dial-raw-standins":
		if !strings.Contains(v, "; control ") || !strings.Contains(v, " answered") || strings.Contains(v, "did not answer either") {
			return fmt.Errorf("the dial attack's control address did not answer, so the refusals prove nothing: %s", v)
		}
	}
	return nil
}
