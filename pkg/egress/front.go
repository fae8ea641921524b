package egress

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/stripe/goproxy"
	"github.com/stripe/smokescreen/pkg/smokescreen"
	"github.com/stripe/smokescreen/pkg/smokescreen/hostport"
)

// exchange is one request's facts, kept while the front serves it so that
// the decision smokescreen logs can be told apart and completed.
type exchange struct {
	role     Role
	client   string
	method   string
	host     string
	port     int
	reported atomic.Bool
}

type exchangeKey struct{}

// traceHeader is smokescreen's trace id header, which it copies into each
// log entry of the request: the front sets it to find the exchange.
const traceHeader = "X-Smokescreen-Trace-ID"

func roleFromRequest(r *http.Request) (string, error) {
	if ex, ok := r.Context().Value(exchangeKey{}).(*exchange); ok {
		return string(ex.role), nil
	}
	return "", smokescreen.MissingRoleError("no role for this request")
}

// ServeHTTP is the front: it answers health checks, authenticates the
// client, and hands the request to the rules of its role and destination.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{client: r.RemoteAddr, method: r.Method}
	if r.Method != http.MethodConnect && !r.URL.IsAbs() {
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			io.WriteString(w, "ok\n")
			return
		}
		p.report(ex, Decision{Reason: "not a proxy request"})
		http.Error(w, "this is an egress proxy: send CONNECT host:port or an absolute URL", http.StatusBadRequest)
		return
	}
	ex.host, ex.port = target(r)
	role, refusal := p.authenticate(r)
	if refusal != "" {
		p.report(ex, Decision{Reason: refusal})
		w.Header().Set("Proxy-Authenticate", `Basic realm="galley egress"`)
		w.Header().Set("Connection", "close")
		http.Error(w, refusal, http.StatusProxyAuthRequired)
		return
	}
	ex.role = role
	// The credential goes no further, and a client may not pick the
	// proxy's upstream.
	r.Header.Del("Proxy-Authorization")
	r.Header.Del(goproxy.PerRequestHTTPSProxyHeaderKey)
	id := strconv.FormatUint(p.nextID.Add(1), 36)
	r.Header.Set(traceHeader, id)
	p.inflight.Store(id, ex)
	defer p.inflight.Delete(id)

	rs := p.general
	if role == RoleHarness {
		if _, ok := p.o.harness.match(ex.host, ex.port, p.o.ports); ok {
			rs = p.harnessOnly
		}
	}
	rs.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)))
	if !ex.reported.Load() {
		p.report(ex, Decision{Role: role, Reason: "the proxy reached no decision"})
	}
}

// target is the request's destination as smokescreen reads it.
func target(r *http.Request) (string, int) {
	var hp hostport.HostPort
	var err error
	if r.Method == http.MethodConnect {
		hp, err = hostport.New(r.Host, false)
	} else {
		hp, err = hostport.NewWithScheme(r.Host, r.URL.Scheme, false)
	}
	if err != nil {
		h := r.Host
		if len(h) > 256 {
			h = h[:256]
		}
		return h, 0
	}
	return normalizeHost(hp.Host), hp.Port
}

// authenticate returns the client's role, or why it is refused.
func (p *Proxy) authenticate(r *http.Request) (Role, string) {
	creds := r.Header.Values("Proxy-Authorization")
	switch {
	case len(creds) == 0 && p.o.requireHarness:
		return "", "this egress proxy serves only the harness: credentials required"
	case len(creds) == 0:
		return RoleAgent, ""
	case !p.hasHarness:
		return "", "this egress proxy takes no credentials"
	case len(creds) > 1:
		return "", "more than one Proxy-Authorization header"
	}
	// Compare digests, in constant time: neither the secret nor its
	// length shows in the time taken.
	got := sha256.Sum256([]byte(creds[0]))
	if subtle.ConstantTimeCompare(got[:], p.harnessKey[:]) != 1 {
		return "", "wrong egress proxy credentials"
	}
	return RoleHarness, ""
}

// basicAuth is the harness's Proxy-Authorization value for secret.
func basicAuth(secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(HarnessUser+":"+secret))
}

// report completes d with the exchange's facts and hands it on, once.
func (p *Proxy) report(ex *exchange, d Decision) {
	if ex.reported.Swap(true) {
		return
	}
	d.Client, d.Method, d.Host, d.Port = ex.client, ex.method, ex.host, ex.port
	if d.Role == "" {
		d.Role = ex.role
	}
	if p.o.onDecision != nil {
		p.o.onDecision(d)
	}
	p.log.Info("egress decision", "allowed", d.Allowed, "role", string(d.Role), "host", d.Host, "port", d.Port,
		"addr", d.Addr, "reason", d.Reason, "method", d.Method, "client", d.Client)
}
