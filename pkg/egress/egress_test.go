package egress_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/egress/egresstest"
)

const (
	secret      = "harness-secret-0123456789abcdef"
	otherSecret = "another-secret-0123456789abcdef"
)

// world is what a test's proxies reach: an HTTPS and a plain-HTTP origin on
// loopback, and a DNS server whose names stand for them and for addresses
// the proxy must refuse.
type world struct {
	dns                *egresstest.DNS
	tlsOrigin, origin  *httptest.Server
	tlsPort, plainPort int
	tlsAddr, plainAddr string
	roots              *x509.CertPool
	// closedAddr is a loopback address where nothing listens.
	closedAddr string
	closedPort int
}

func newWorld(t *testing.T) *world {
	t.Helper()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			// More than any socket buffers hold.
			zeros := make([]byte, 1<<20)
			for range 256 {
				if _, err := w.Write(zeros); err != nil {
					return
				}
			}
			return
		}
		fmt.Fprintf(w, "origin says hello to %s", r.Host)
	})
	w := &world{tlsOrigin: httptest.NewTLSServer(hello), origin: httptest.NewServer(hello)}
	t.Cleanup(w.tlsOrigin.Close)
	t.Cleanup(w.origin.Close)
	w.tlsAddr = w.tlsOrigin.Listener.Addr().String()
	w.plainAddr = w.origin.Listener.Addr().String()
	w.tlsPort = w.tlsOrigin.Listener.Addr().(*net.TCPAddr).Port
	w.plainPort = w.origin.Listener.Addr().(*net.TCPAddr).Port
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.closedAddr, w.closedPort = closed.Addr().String(), closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	w.roots = x509.NewCertPool()
	w.roots.AddCert(w.tlsOrigin.Certificate())
	w.dns = egresstest.StartDNS(t, map[string][]string{
		"allowed.galley.test":        {"127.0.0.1"},
		"second.galley.test":         {"127.0.0.1"},
		"other.galley.test":          {"127.0.0.1"},
		"harness.galley.test":        {"127.0.0.1"},
		"a.b.wild.galley.test":       {"127.0.0.1"},
		"wild.galley.test":           {"127.0.0.1"},
		"private.galley.test":        {"10.255.255.1"},
		"loopback.galley.test":       {"127.0.0.1"},
		"loopback-other.galley.test": {"127.0.0.2"},
		"loopback6.galley.test":      {"::1"},
		"metadata.galley.test":       {"169.254.169.254"},
		"ecs.galley.test":            {"169.254.170.2"},
		"cgnat.galley.test":          {"100.64.0.1"},
		"slow.galley.test":           {"127.0.0.1"},
		"closed.galley.test":         {"127.0.0.1"},
	})
	w.dns.Silence("slow.galley.test")
	return w
}

// recorder keeps a proxy's decisions.
type recorder struct {
	mu sync.Mutex
	ds []egress.Decision
}

func (r *recorder) add(d egress.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
}

// last is the latest decision; every answer of the proxy comes after its
// decision was reported, so there is no waiting.
func (r *recorder) last(t *testing.T) egress.Decision {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ds) == 0 {
		t.Fatal("no decision was reported")
	}
	return r.ds[len(r.ds)-1]
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ds)
}

// proxy is a running Proxy and what it reported.
type proxy struct {
	*egress.Proxy
	addr string
	rec  *recorder
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a proxy that resolves through the world's DNS server, allows
// the origins' ports besides 443 and 80, and lets exactly the origins'
// loopback addresses through its address rules. Its log must never hold
// a secret.
func (w *world) start(t *testing.T, opts ...egress.Option) *proxy {
	t.Helper()
	p := &proxy{rec: &recorder{}, logs: &syncBuffer{}}
	base := []egress.Option{
		egress.WithResolver(w.dns.Addr),
		egress.WithPorts(443, 80, w.tlsPort, w.plainPort, w.closedPort),
		egress.AllowTestAddress(w.tlsAddr),
		egress.AllowTestAddress(w.plainAddr),
		egress.AllowTestAddress(w.closedAddr),
		egress.OnDecision(p.rec.add),
		egress.WithLogger(slog.New(slog.NewJSONHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}
	var err error
	p.Proxy, err = egress.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		logs := p.logs.String()
		for _, s := range []string{secret, otherSecret, base64.StdEncoding.EncodeToString([]byte(egress.HarnessUser + ":" + secret))} {
			if strings.Contains(logs, s) {
				t.Errorf("the proxy's log holds a secret: %s", logs)
			}
		}
	})
	return p
}

func allow(t *testing.T, s string) egress.HostList {
	t.Helper()
	l, err := egress.ParseAllowlist(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func destinations(t *testing.T, s string) egress.HostList {
	t.Helper()
	l, err := egress.ParseDestinations(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func authHeader(s string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(egress.HarnessUser+":"+s))
}

// connect sends CONNECT target to the proxy at addr from the local address
// from (nil: any) and returns the answer and the connection, open.
func connect(t *testing.T, addr, target, auth string, from net.IP) (*http.Response, net.Conn) {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	if from != nil {
		d.LocalAddr = &net.TCPAddr{IP: from}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return resp, c
}

// client is an HTTP client using the proxy at addr (with proxyUser, if
// set) that trusts the HTTPS origin for the names of the test.
func (w *world) client(t *testing.T, proxyURL *url.URL) *http.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:           http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: w.roots, ServerName: "example.com"},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func wantDecision(t *testing.T, got egress.Decision, role egress.Role, host string, port int, addr string, allowed bool, reason string) {
	t.Helper()
	if got.Role != role || got.Host != host || got.Port != port || got.Addr != addr || got.Allowed != allowed || !strings.Contains(got.Reason, reason) {
		t.Errorf("decision %+v, want role %q host %s port %d addr %q allowed %v reason containing %q", got, role, host, port, addr, allowed, reason)
	}
	if got.Client == "" || got.Method == "" {
		t.Errorf("decision %+v lacks its client or method", got)
	}
}

func TestAgentReachesAnAllowedName(t *testing.T) {
	w := newWorld(t)
	p := w.start(t, egress.WithAllowlist(allow(t, "allowed.galley.test, *.wild.galley.test")))
	c := w.client(t, &url.URL{Scheme: "http", Host: p.addr})

	// CONNECT, with TLS to the origin inside the tunnel.
	status, body := get(t, c, "https://allowed.galley.test:"+strconv.Itoa(w.tlsPort)+"/")
	if status != http.StatusOK || !strings.Contains(body, "hello to allowed.galley.test") {
		t.Fatalf("CONNECT through the proxy: %d %q", status, body)
	}
	d := p.rec.last(t)
	wantDecision(t, d, egress.RoleAgent, "allowed.galley.test", w.tlsPort, w.tlsAddr, true, "on the allowlist as allowed.galley.test")
	if d.Method != http.MethodConnect {
		t.Errorf("method %q, want CONNECT", d.Method)
	}
	if f := d.Fields(); f["host"] != "allowed.galley.test" || f["port"] != strconv.Itoa(w.tlsPort) || f["addr"] != w.tlsAddr || f["allowed"] != "true" || f["role"] != "agent" {
		t.Errorf("the decision's fields %v", f)
	}

	// A plain-HTTP proxy request.
	status, body = get(t, c, "http://allowed.galley.test:"+strconv.Itoa(w.plainPort)+"/path")
	if status != http.StatusOK || !strings.Contains(body, "hello to allowed.galley.test") {
		t.Fatalf("GET through the proxy: %d %q", status, body)
	}
	d = p.rec.last(t)
	wantDecision(t, d, egress.RoleAgent, "allowed.galley.test", w.plainPort, w.plainAddr, true, "on the allowlist")
	if d.Method != http.MethodGet {
		t.Errorf("method %q, want GET", d.Method)
	}

	// A wildcard's subdomain, in another case.
	status, _ = get(t, c, "http://A.B.Wild.Galley.Test:"+strconv.Itoa(w.plainPort)+"/")
	if status != http.StatusOK {
		t.Fatalf("GET to a subdomain of a wildcard: %d", status)
	}
	wantDecision(t, p.rec.last(t), egress.RoleAgent, "a.b.wild.galley.test", w.plainPort, w.plainAddr, true, "*.wild.galley.test")

	if !strings.Contains(p.logs.String(), `"msg":"egress decision"`) {
		t.Errorf("no decision in the log: %s", p.logs)
	}
}

func TestAgentIsRefused(t *testing.T) {
	w := newWorld(t)
	p := w.start(t,
		egress.WithAllowlist(allow(t, strings.Join([]string{
			"allowed.galley.test", "*.wild.galley.test", "private.galley.test", "loopback.galley.test",
			"loopback-other.galley.test", "loopback6.galley.test", "metadata.galley.test", "ecs.galley.test",
			"cgnat.galley.test", "gone.galley.test", "slow.galley.test", "closed.galley.test",
		}, ","))),
		egress.WithLimits(egress.Limits{DNSTimeout: 500 * time.Millisecond}))
	tlsPort, plainPort := strconv.Itoa(w.tlsPort), strconv.Itoa(w.plainPort)
	for _, c := range []struct {
		name, target string
		status       int
		host         string
		port         int
		addr, reason string
	}{
		{"a name not on the list", "other.galley.test:" + tlsPort, 403, "other.galley.test", w.tlsPort, "", "other.galley.test is not on the allowlist"},
		{"the wildcard's own name", "wild.galley.test:" + tlsPort, 403, "wild.galley.test", w.tlsPort, "", "not on the allowlist"},
		{"an IP address (that of an allowed origin)", w.tlsAddr, 403, "127.0.0.1", w.tlsPort, "", "is an IP address"},
		{"a port not allowed", "allowed.galley.test:22", 403, "allowed.galley.test", 22, "", "port 22 is not allowed"},
		{"a name resolving to a private address", "private.galley.test:443", 403, "private.galley.test", 443, "10.255.255.1:443", "Private Range"},
		{"a name resolving to loopback", "loopback.galley.test:443", 403, "loopback.galley.test", 443, "127.0.0.1:443", "Not Global Unicast"},
		{"a name resolving to another loopback address", "loopback-other.galley.test:" + tlsPort, 403, "loopback-other.galley.test", w.tlsPort, "127.0.0.2:" + tlsPort, "Not Global Unicast"},
		{"a name resolving to IPv6 loopback", "loopback6.galley.test:443", 403, "loopback6.galley.test", 443, "[::1]:443", "Not Global Unicast"},
		{"the instance metadata address", "metadata.galley.test:80", 403, "metadata.galley.test", 80, "169.254.169.254:80", "Not Global Unicast"},
		{"the ECS metadata address", "ecs.galley.test:80", 403, "ecs.galley.test", 80, "169.254.170.2:80", "Not Global Unicast"},
		{"a CGNAT address", "cgnat.galley.test:443", 403, "cgnat.galley.test", 443, "100.64.0.1:443", "CGNAT"},
		{"a name that does not resolve", "gone.galley.test:443", 502, "gone.galley.test", 443, "", "no such host"},
		{"a name whose DNS server does not answer", "slow.galley.test:" + tlsPort, 504, "slow.galley.test", w.tlsPort, "", "slow.galley.test"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, _ := connect(t, p.addr, c.target, "", nil)
			if resp.StatusCode != c.status {
				t.Errorf("CONNECT %s: %s, want %d", c.target, resp.Status, c.status)
			}
			wantDecision(t, p.rec.last(t), egress.RoleAgent, c.host, c.port, c.addr, false, c.reason)
		})
	}
	// A name not on the list is refused before it is resolved.
	if n := w.dns.Queries("other.galley.test"); n != 0 {
		t.Errorf("the proxy asked the DNS server about a name not on the list %d times", n)
	}

	// The same refusals for plain-HTTP requests.
	c := w.client(t, &url.URL{Scheme: "http", Host: p.addr})
	for _, u := range []string{
		"http://" + w.plainAddr + "/",
		"http://other.galley.test:" + plainPort + "/",
		"http://metadata.galley.test/latest/meta-data/",
		"http://ecs.galley.test/v2/credentials",
	} {
		if status, body := get(t, c, u); status != http.StatusForbidden || !strings.Contains(body, "denied") {
			t.Errorf("GET %s: %d %q, want 403", u, status, body)
		}
		if d := p.rec.last(t); d.Allowed || d.Method != http.MethodGet {
			t.Errorf("GET %s: decision %+v", u, d)
		}
	}

	// An allowed destination that refuses the connection: allowed, and
	// answered 502 with the reason.
	closed := "closed.galley.test:" + strconv.Itoa(w.closedPort)
	resp, _ := connect(t, p.addr, closed, "", nil)
	if msg := resp.Header.Get("X-Smokescreen-Error"); resp.StatusCode != http.StatusBadGateway || !strings.Contains(msg, "could not connect") || !strings.Contains(msg, "refused") {
		t.Errorf("CONNECT %s: %s %q", closed, resp.Status, msg)
	}
	wantDecision(t, p.rec.last(t), egress.RoleAgent, "closed.galley.test", w.closedPort, w.closedAddr, true, "on the allowlist")
	if status, body := get(t, c, "http://"+closed+"/"); status != http.StatusBadGateway || !strings.Contains(body, "could not connect") {
		t.Errorf("GET %s: %d %q", closed, status, body)
	}

	// A request that is not a proxy request is refused, and reported.
	resp, err := http.Get("http://" + p.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || p.rec.last(t).Reason != "not a proxy request" {
		t.Errorf("a direct GET: %s, decision %+v", resp.Status, p.rec.last(t))
	}
}

func TestHarnessRole(t *testing.T) {
	w := newWorld(t)
	p := w.start(t,
		egress.WithAllowlist(allow(t, "allowed.galley.test, private.galley.test")),
		egress.WithHarness(secret, destinations(t, fmt.Sprintf(
			"harness.galley.test:%d, private.galley.test:443, ecs.galley.test, loopback.galley.test, %s",
			w.tlsPort, w.plainAddr))),
		egress.WithLimits(egress.Limits{ConnectTimeout: 500 * time.Millisecond}))
	proxyURL := &url.URL{Scheme: "http", Host: p.addr}
	harnessURL, err := egress.HarnessProxyURL(proxyURL.String(), secret)
	if err != nil {
		t.Fatal(err)
	}
	harness, agent := w.client(t, harnessURL), w.client(t, proxyURL)
	tlsPort := strconv.Itoa(w.tlsPort)

	// The harness reaches its destination; the agent does not.
	if status, body := get(t, harness, "https://harness.galley.test:"+tlsPort+"/"); status != 200 || !strings.Contains(body, "hello") {
		t.Fatalf("the harness to its destination: %d %q", status, body)
	}
	wantDecision(t, p.rec.last(t), egress.RoleHarness, "harness.galley.test", w.tlsPort, w.tlsAddr, true, "a harness destination as harness.galley.test:"+tlsPort)
	resp, _ := connect(t, p.addr, "harness.galley.test:"+tlsPort, "", nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the agent to the harness's destination: %s", resp.Status)
	}
	wantDecision(t, p.rec.last(t), egress.RoleAgent, "harness.galley.test", w.tlsPort, "", false, "not on the allowlist")

	// The harness has the agent's allowlist too.
	if status, _ := get(t, harness, "https://allowed.galley.test:"+tlsPort+"/"); status != 200 {
		t.Errorf("the harness to the allowlist: %d", status)
	}
	wantDecision(t, p.rec.last(t), egress.RoleHarness, "allowed.galley.test", w.tlsPort, w.tlsAddr, true, "on the allowlist")

	// A harness destination given as an address: the harness only.
	if status, _ := get(t, harness, "http://"+w.plainAddr+"/"); status != 200 {
		t.Errorf("the harness to its address destination: %d", status)
	}
	wantDecision(t, p.rec.last(t), egress.RoleHarness, "127.0.0.1", w.plainPort, w.plainAddr, true, "a harness destination")
	if status, _ := get(t, agent, "http://"+w.plainAddr+"/"); status != http.StatusForbidden {
		t.Errorf("the agent to the harness's address destination: %d", status)
	}

	// A private address, for a name among the harness's destinations: the
	// harness is let through (whether anything answers there or not); the
	// agent, with the same name on its list, is refused by address.
	resp, _ = connect(t, p.addr, "private.galley.test:443", authHeader(secret), nil)
	if resp.StatusCode == http.StatusForbidden {
		t.Errorf("the harness to a private destination: %s", resp.Status)
	}
	wantDecision(t, p.rec.last(t), egress.RoleHarness, "private.galley.test", 443, "10.255.255.1:443", true, "a harness destination")
	resp, _ = connect(t, p.addr, "private.galley.test:443", "", nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the agent to a private address: %s", resp.Status)
	}
	wantDecision(t, p.rec.last(t), egress.RoleAgent, "private.galley.test", 443, "10.255.255.1:443", false, "Private Range")

	// Loopback and link-local stay refused for the harness's destinations.
	for _, target := range []string{"ecs.galley.test:80", "loopback.galley.test:443"} {
		resp, _ = connect(t, p.addr, target, authHeader(secret), nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("the harness to %s: %s", target, resp.Status)
		}
		if d := p.rec.last(t); d.Allowed || d.Role != egress.RoleHarness || !strings.Contains(d.Reason, "Not Global Unicast") {
			t.Errorf("the harness to %s: decision %+v", target, d)
		}
	}

	// A destination's own port only.
	resp, _ = connect(t, p.addr, "harness.galley.test:443", authHeader(secret), nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the harness to its destination on another port: %s", resp.Status)
	}

	// A wrong credential is refused as such, not served as the agent.
	resp, _ = connect(t, p.addr, "allowed.galley.test:"+tlsPort, authHeader(otherSecret), nil)
	if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
		t.Errorf("a wrong credential: %s %v", resp.Status, resp.Header)
	}
	wantDecision(t, p.rec.last(t), "", "allowed.galley.test", w.tlsPort, "", false, "wrong egress proxy credentials")
}

func TestProxyWithoutHarnessRefusesCredentials(t *testing.T) {
	w := newWorld(t)
	p := w.start(t, egress.WithAllowlist(allow(t, "allowed.galley.test")))
	resp, _ := connect(t, p.addr, "allowed.galley.test:"+strconv.Itoa(w.tlsPort), authHeader(secret), nil)
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("a credential where none is taken: %s", resp.Status)
	}
	if d := p.rec.last(t); d.Allowed || d.Reason != "this egress proxy takes no credentials" {
		t.Errorf("decision %+v", d)
	}
}

func TestServiceModeServesOnlyTheHarness(t *testing.T) {
	w := newWorld(t)
	p := w.start(t, egress.RequireHarness(),
		egress.WithAllowlist(allow(t, "allowed.galley.test")),
		egress.WithHarness(secret, destinations(t, "harness.galley.test")))
	target := "allowed.galley.test:" + strconv.Itoa(w.tlsPort)
	resp, c := connect(t, p.addr, target, "", nil)
	if resp.StatusCode != http.StatusProxyAuthRequired || !strings.HasPrefix(resp.Header.Get("Proxy-Authenticate"), "Basic") {
		t.Errorf("an anonymous CONNECT: %s %v", resp.Status, resp.Header)
	}
	wantDecision(t, p.rec.last(t), "", "allowed.galley.test", w.tlsPort, "", false, "serves only the harness")
	// It gets nothing more on that connection.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("the refused connection stays open (read %d bytes)", n)
	}
	agent := w.client(t, &url.URL{Scheme: "http", Host: p.addr})
	if status, _ := get(t, agent, "http://allowed.galley.test:"+strconv.Itoa(w.plainPort)+"/"); status != http.StatusProxyAuthRequired {
		t.Errorf("an anonymous GET: %d", status)
	}
	resp, _ = connect(t, p.addr, target, authHeader(otherSecret), nil)
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("a wrong credential: %s", resp.Status)
	}
	resp, _ = connect(t, p.addr, target, authHeader(secret), nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the harness: %s", resp.Status)
	}
	wantDecision(t, p.rec.last(t), egress.RoleHarness, "allowed.galley.test", w.tlsPort, w.tlsAddr, true, "on the allowlist")
	// A health check needs no credential and tells nothing.
	hresp, err := http.Get("http://" + p.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK {
		t.Errorf("the health check: %s", hresp.Status)
	}
}

func TestChainedThroughAnUpstream(t *testing.T) {
	w := newWorld(t)
	up := w.start(t, egress.RequireHarness(),
		egress.WithAllowlist(allow(t, "allowed.galley.test")),
		egress.WithHarness(secret, egress.HostList{}))
	// The per-worker proxy's own resolver answers nothing (a worker task
	// here may have none): chained, it decides by name and the upstream
	// resolves.
	down := w.start(t,
		egress.WithAllowlist(allow(t, "allowed.galley.test, second.galley.test")),
		egress.WithUpstream("http://"+up.addr, secret), egress.WithResolver(deadResolver(t)))
	c := w.client(t, &url.URL{Scheme: "http", Host: down.addr})

	for _, u := range []string{
		"https://allowed.galley.test:" + strconv.Itoa(w.tlsPort) + "/",
		"http://allowed.galley.test:" + strconv.Itoa(w.plainPort) + "/",
	} {
		before := up.rec.count()
		if status, body := get(t, c, u); status != 200 || !strings.Contains(body, "hello to allowed.galley.test") {
			t.Fatalf("GET %s through two proxies: %d %q", u, status, body)
		}
		if up.rec.count() == before {
			t.Fatalf("GET %s did not pass through the upstream", u)
		}
		if d := down.rec.last(t); !d.Allowed || d.Role != egress.RoleAgent || d.Addr != "" {
			t.Errorf("the per-worker proxy's decision %+v (it resolves nothing when chained)", d)
		}
		if d := up.rec.last(t); !d.Allowed || d.Role != egress.RoleHarness || d.Host != "allowed.galley.test" {
			t.Errorf("the upstream's decision %+v", d)
		}
	}

	// What the per-worker proxy allows and the upstream does not is
	// refused, with the upstream's reason.
	resp, _ := connect(t, down.addr, "second.galley.test:"+strconv.Itoa(w.tlsPort), "", nil)
	body := resp.Header.Get("X-Smokescreen-Error")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "upstream egress proxy refused") || !strings.Contains(body, "not on the allowlist") {
		t.Errorf("a host the upstream refuses: %s %q", resp.Status, body)
	}
	if d := up.rec.last(t); d.Allowed || d.Host != "second.galley.test" || d.Role != egress.RoleHarness {
		t.Errorf("the upstream's decision %+v", d)
	}

	// With the wrong secret the upstream refuses everything.
	wrong := w.start(t, egress.WithAllowlist(allow(t, "allowed.galley.test")), egress.WithUpstream("http://"+up.addr, otherSecret))
	resp, _ = connect(t, wrong.addr, "allowed.galley.test:"+strconv.Itoa(w.tlsPort), "", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(resp.Header.Get("X-Smokescreen-Error"), "407") {
		t.Errorf("a wrong upstream secret: %s %q", resp.Status, resp.Header.Get("X-Smokescreen-Error"))
	}
}

func TestConnectionFloodIsBounded(t *testing.T) {
	w := newWorld(t)
	p := w.start(t, egress.WithAllowlist(allow(t, "allowed.galley.test")),
		egress.WithLimits(egress.Limits{Conns: connlimit.Limits{PerPeer: 8, Total: 16}, Tunnels: 4}))
	flooder, other := net.ParseIP("127.0.0.2"), net.ParseIP("127.0.0.3")
	target := "allowed.galley.test:" + strconv.Itoa(w.plainPort)

	// Idle connections from one client: the proxy holds at most its
	// bounds, and another client is served.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: flooder}}
	for range 100 {
		c, err := d.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	otherTr := &http.Transport{
		Proxy:       http.ProxyURL(&url.URL{Scheme: "http", Host: p.addr}),
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: other}}).DialContext,
	}
	t.Cleanup(otherTr.CloseIdleConnections)
	otherClient := &http.Client{Transport: otherTr, Timeout: 30 * time.Second}
	if status, _ := get(t, otherClient, "http://"+target+"/"); status != 200 {
		t.Fatalf("another client during the flood: %d", status)
	}
	st := p.ConnStats()
	if st.MaxOpen > 16 || st.Evicted == 0 {
		t.Errorf("connection stats during the flood: %+v, want at most 16 held and the flood's connections evicted", st)
	}

	// Tunnels: the fifth at once is refused, and another client's plain
	// request is still served.
	var tunnels []net.Conn
	for range 4 {
		resp, c := connect(t, p.addr, target, "", flooder)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("tunnel %d: %s", len(tunnels)+1, resp.Status)
		}
		tunnels = append(tunnels, c)
	}
	resp, _ := connect(t, p.addr, target, "", flooder)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the fifth tunnel: %s, want 429", resp.Status)
	}
	if status, _ := get(t, otherClient, "http://"+target+"/"); status != 200 {
		t.Errorf("another client with the tunnels full: %d", status)
	}
	// A tunnel closed makes room for one.
	tunnels[0].Close()
	eventually(t, "the closed tunnel is released", func() bool { return p.ActiveTunnels() < 4 })
	if resp, _ := connect(t, p.addr, target, "", flooder); resp.StatusCode != http.StatusOK {
		t.Errorf("a tunnel after one closed: %s", resp.Status)
	}
}

func TestIdleAndSlowClientsAreCut(t *testing.T) {
	w := newWorld(t)
	p := w.start(t, egress.WithAllowlist(allow(t, "allowed.galley.test")),
		egress.WithLimits(egress.Limits{IdleTimeout: 300 * time.Millisecond, ReadHeaderTimeout: 300 * time.Millisecond}))

	resp, tunnel := connect(t, p.addr, "allowed.galley.test:"+strconv.Itoa(w.plainPort), "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	// The tunnel works, then is closed once idle.
	io.WriteString(tunnel, "GET / HTTP/1.1\r\nHost: allowed.galley.test\r\n\r\n")
	tunnel.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(tunnel)
	inner, err := http.ReadResponse(br, nil)
	if err != nil || inner.StatusCode != 200 {
		t.Fatalf("a request through the tunnel: %v %v", inner, err)
	}
	io.Copy(io.Discard, inner.Body)
	if _, err := br.ReadByte(); err == nil || isTimeout(err) {
		t.Errorf("an idle tunnel was not closed by the proxy: %v", err)
	}

	// A client that stops reading a plain-HTTP response is cut.
	slow, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET http://allowed.galley.test:"+strconv.Itoa(w.plainPort)+"/big HTTP/1.1\r\nHost: allowed.galley.test\r\n\r\n")
	eventually(t, "the proxy serves the request", func() bool { return p.ConnStats().Open == 1 })
	eventually(t, "the proxy lets go of the connection that stopped reading", func() bool { return p.ConnStats().Open == 0 })
	slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := io.Copy(io.Discard, slow); isTimeout(err) || n >= 256<<20 {
		t.Errorf("read %d bytes of a response not read in time (%v)", n, err)
	}

	// A header never finished is cut.
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT allowed.galley.test:443 HTTP/1.1\r\nHost: allowed")
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(c); isTimeout(err) {
		t.Errorf("a slow header was not cut by the proxy")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestNewRefusesBadSettings(t *testing.T) {
	for name, opts := range map[string][]egress.Option{
		"a short secret":                  {egress.WithHarness("short", egress.HostList{})},
		"service mode without a secret":   {egress.RequireHarness()},
		"destinations without a secret":   {egress.WithHarness("", destinationsOrDie("api.example.com"))},
		"an upstream with credentials":    {egress.WithUpstream("http://u:p@proxy.example:3128", secret)},
		"an upstream without a port":      {egress.WithUpstream("http://proxy.example", secret)},
		"an https upstream":               {egress.WithUpstream("https://proxy.example:3128", secret)},
		"an upstream without a secret":    {egress.WithUpstream("http://proxy.example:3128", "")},
		"a port out of range":             {egress.WithPorts(0)},
		"a resolver that is not hostport": {egress.WithResolver("10.0.0.2")},
	} {
		if _, err := egress.New(opts...); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error holds the secret: %v", name, err)
		}
	}
}

func destinationsOrDie(s string) egress.HostList {
	l, err := egress.ParseDestinations(s)
	if err != nil {
		panic(err)
	}
	return l
}

func TestNewRefusesAnEnvironmentProxy(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://elsewhere.example:3128")
	_, err := egress.New()
	if err == nil || !strings.Contains(err.Error(), "HTTPS_PROXY") {
		t.Errorf("New with HTTPS_PROXY set: %v", err)
	}
}

func TestHarnessProxyURL(t *testing.T) {
	u, err := egress.HarnessProxyURL("http://egress.internal:3128", secret)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); u.User.Username() != egress.HarnessUser || pw != secret || u.Host != "egress.internal:3128" {
		t.Errorf("HarnessProxyURL = %s", u.Redacted())
	}
	if _, err := egress.HarnessProxyURL("http://egress.internal:3128", "short"); err == nil {
		t.Error("a short secret was accepted")
	}
}

func TestRunService(t *testing.T) {
	w := newWorld(t)
	env := map[string]string{
		contract.EnvEgressAllow:        "allowed.galley.test",
		contract.EnvEgressHarnessAllow: "harness.galley.test:" + strconv.Itoa(w.tlsPort),
		contract.EnvEgressSecret:       secret,
		contract.EnvEgressResolver:     w.dns.Addr,
		contract.EnvEgressPorts:        "443, 80",
	}
	getenv := func(k string) string { return env[k] }

	for name, change := range map[string][2]string{
		"no secret":          {contract.EnvEgressSecret, ""},
		"a bad allowlist":    {contract.EnvEgressAllow, "allowed.galley.test, 10.0.0.1"},
		"bad destinations":   {contract.EnvEgressHarnessAllow, "https://api.example.com"},
		"a bad port":         {contract.EnvEgressPorts, "443, https"},
		"a bad listen value": {contract.EnvEgressListen, "3128"},
	} {
		saved := env[change[0]]
		env[change[0]] = change[1]
		err := egress.RunService(context.Background(), getenv, slog.New(slog.DiscardHandler))
		env[change[0]] = saved
		if err == nil || !strings.Contains(err.Error(), change[0]) {
			t.Errorf("%s: %v", name, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error holds the secret", name)
		}
	}

	// It serves on its address until its context ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env[contract.EnvEgressListen] = addr
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- egress.RunService(ctx, getenv, slog.New(slog.NewJSONHandler(&logs, nil))) }()
	eventually(t, "the service listens", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if resp, _ := connect(t, addr, "allowed.galley.test:443", "", nil); resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("the service to an anonymous client: %s", resp.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunService: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "egress proxy serving") || !strings.Contains(l, "egress decision") || strings.Contains(l, secret) {
		t.Errorf("the service's log: %s", l)
	}
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

// deadResolver is a DNS server address where nothing answers: a port of
// loopback that was just free.
func deadResolver(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
