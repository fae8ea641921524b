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
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/workerapi"
)

// dialTargets tries a TCP connection, then an HTTP request, to each of
// addrs (hosts the agent must not reach). control is an address the agent
// may reach (a gate; empty: its egress proxy): that it answers shows the
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
		if resp, err := directHTTP.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			what += fmt.Sprintf(" and answered HTTP %d", resp.StatusCode)
		}
		answered = append(answered, what)
	}
	if len(answered) > 0 {
		return true, strings.Join(answered, "; ")
	}
	detail := strings.Join(refused, "; ")
	if control == "" {
		control = agentProxy()
	}
	if control != "" {
		if err := reach(control); err != nil {
			detail += "; control " + control + " did not answer either: " + errText(err)
		} else {
			detail += "; control " + control + " answered"
		}
	}
	return false, detail + "; " + netFacts()
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
// proof made by a key of its own; directly and, with viaProxy, through
// its egress proxy (HTTPS_PROXY) too. It succeeds if any call is answered
// 2xx. It never prints the credential: an answer that quotes it is
// redacted.
func stolenToken(ctx context.Context, path, endpoint string, viaProxy bool) (bool, string) {
	cred, err := waitFile(ctx, path)
	if err != nil {
		return false, "no stolen credential to use: " + errText(err)
	}
	if !viaProxy {
		return PresentCredential(ctx, cred, endpoint, nil)
	}
	proxy := agentProxy()
	if proxy == "" {
		return false, "no egress proxy in this environment (HTTPS_PROXY) to try the stolen credential through"
	}
	direct, dv := PresentCredential(ctx, cred, endpoint, nil)
	proxied, pv := PresentCredential(ctx, cred, endpoint, &url.URL{Scheme: "http", Host: proxy})
	return direct || proxied, "directly: " + dv + "; through the egress proxy " + proxy + ": " + pv
}

// PresentCredential calls the worker API's self route at endpoint with
// cred (a worker's credential), through proxy if it is not nil (else
// directly): once as a bearer credential without a proof, once with a
// proof made by a key of its own, as a thief holding the credential alone
// would. It succeeds if either call is answered 2xx; the detail says how
// each was answered (CheckVerdict's "stolen-token"), never the credential.
func PresentCredential(ctx context.Context, cred, endpoint string, proxy *url.URL) (bool, string) {
	key, err := dpop.NewKey()
	if err != nil {
		return false, "could not make a key: " + err.Error()
	}
	target := strings.TrimRight(endpoint, "/") + workerapi.PathSelf
	tr := &http.Transport{Proxy: nil}
	if proxy != nil {
		tr.Proxy = http.ProxyURL(proxy)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	defer tr.CloseIdleConnections()
	call := func(withProof bool) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader("{}"))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		if withProof {
			proof, err := key.Proof(http.MethodPost, target, cred, time.Now())
			if err != nil {
				return 0, "", err
			}
			req.Header.Set(dpop.Header, proof)
			req.Header.Set("Authorization", dpop.Scheme+" "+cred)
		} else {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
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
		msg, _, _ = strings.Cut(msg, "\n")
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
			parts = append(parts, c.what+": "+strings.ReplaceAll(errText(err), cred, "[the credential]"))
		case st >= 200 && st < 300:
			succeeded = true
			parts = append(parts, fmt.Sprintf("%s: answered %d", c.what, st))
		default:
			parts = append(parts, fmt.Sprintf("%s: %d %s", c.what, st, msg))
		}
	}
	return succeeded, "the stolen credential " + strings.Join(parts, "; ")
}

// connFlood opens up to n connections to each of addrs (their names,
// for the verdict: galley's API, or the harness's servers) and holds them
// all while hold runs (the runner asks the coordinator and waits for its
// reply, so the test makes kitchn's calls during the flood), then counts
// how many of each the server closed. It succeeds if all n to one address
// were opened and still open at the end: nothing bounded that server.
func connFlood(ctx context.Context, addrs map[string]string, n int, hold func(opened int, lastErr error)) (bool, string) {
	if len(addrs) == 0 || n <= 0 {
		return false, "no address or count to flood"
	}
	type flood struct {
		addr, name string
		conns      []*net.TCPConn
		lastErr    error
	}
	var floods []*flood
	var all []*net.TCPConn
	defer func() {
		for _, c := range all {
			c.Close()
		}
	}()
	var lastErr error
	d := net.Dialer{Timeout: 5 * time.Second}
	for _, addr := range sortedKeys(addrs) {
		f := &flood{addr: addr, name: addrs[addr]}
		floods = append(floods, f)
		for len(f.conns) < n && ctx.Err() == nil {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				f.lastErr, lastErr = err, err
				break
			}
			f.conns = append(f.conns, c.(*net.TCPConn))
			all = append(all, c.(*net.TCPConn))
		}
	}
	hold(len(all), lastErr)
	succeeded := false
	var parts []string
	for _, f := range floods {
		closed := 0
		for _, c := range f.conns {
			if peerClosed(c) {
				closed++
			}
		}
		part := fmt.Sprintf("%s %s: opened %d of %d connections", f.name, f.addr, len(f.conns), n)
		if f.lastErr != nil {
			part += " (then: " + errText(f.lastErr) + ")"
		}
		part += fmt.Sprintf(", closed %d of them while kitchn called", closed)
		if len(f.conns) >= n && closed == 0 {
			succeeded = true
			part += " (held all)"
		}
		parts = append(parts, part)
	}
	return succeeded, strings.Join(parts, "; ")
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

// attack runs a, with the runner's tools and options for the attacks
// that talk to the coordinator or need its family.
func (r *runner) attack(ctx context.Context, a Attack) (bool, string) {
	switch a.Kind {
	case "connflood":
		addrs := map[string]string{}
		if a.Target != "" {
			addrs[a.Target] = "galley's API"
		}
		if a.Egress != "" {
			addrs[a.Egress] = "the egress service"
		}
		if a.OwnHarness {
			for addr, what := range r.harnessListeners(ctx) {
				addrs[addr] = what
			}
		}
		return connFlood(ctx, addrs, a.Count, func(opened int, lastErr error) {
			body := fmt.Sprintf("holding %d connections", opened)
			b, _ := json.Marshal(map[string]any{"subject": "connflood", "body": body})
			r.askUntilAnswered(ctx, string(b))
		})
	case "model-token":
		return modelToken(ctx, r.opts, a.Path, a.URL)
	}
	return attack(ctx, a)
}

// askUntilAnswered asks the coordinator and waits for its reply, asking
// again when the call failed on the way (a flood of the harness's servers
// may have closed the connection it was kept on), for up to three tries.
func (r *runner) askUntilAnswered(ctx context.Context, args string) {
	for range 3 {
		r.callWhile(ctx, "ask_coordinator", args, false)
		if ctx.Err() != nil || !r.lastFailed {
			return
		}
		time.Sleep(time.Second)
	}
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
	case "dial-raw-standins", "dial-evil-address", "reach-galley":
		if !strings.Contains(v, "; control ") || !strings.Contains(v, " answered") || strings.Contains(v, "did not answer either") {
			return fmt.Errorf("the dial attack's control address did not answer, so the refusals prove nothing: %s", v)
		}
	case "find-key":
		if !strings.Contains(v, "the control key planted at ") || !strings.Contains(v, " was found in ") {
			return fmt.Errorf("the key hunt did not find the control key, so finding no house key proves nothing: %s", v)
		}
	case "egress-evil-name":
		if !strings.Contains(v, "; control ") || !strings.Contains(v, " answered through it") {
			return fmt.Errorf("the allowlisted control host did not answer through the egress proxy, so its refusals prove nothing: %s", v)
		}
	case "resolve-evil-name":
		if !strings.Contains(v, "udp ") || !strings.Contains(v, "tcp ") {
			return fmt.Errorf("the resolve attack asked no DNS server over both UDP and TCP: %s", v)
		}
	case "model-token-stolen":
		for _, want := range []string{"its own token at its own proxy: 200", "the stolen token at its own proxy: 401"} {
			if !strings.Contains(v, want) {
				return fmt.Errorf("the model-token verdict lacks %q: %s", want, v)
			}
		}
	case "connflood-harness":
		// Each of the harness's servers (MCP, egress proxy, model proxy,
		// push gate) flooded, and each bounded what it held.
		parts := strings.Split(v, "; ")
		if len(parts) < 4 {
			return fmt.Errorf("the flood reached %d of the harness's 4 servers: %s", len(parts), v)
		}
		for _, p := range parts {
			if strings.Contains(p, "opened 0 of") || strings.Contains(p, "closed 0 of") {
				return fmt.Errorf("a server of the harness was not flooded, or bounded nothing: %s", p)
			}
		}
	}
	return nil
}
