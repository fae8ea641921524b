package harness

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/workerapi"
)

// startEgress serves the agent's egress proxy where the agent reaches it
// and returns its URL, for the agent's proxy variables. It is the agent's
// way out (pkg/egress): it lets the agent reach the house's allowlist
// (contract.EnvEgressAllow) and nothing else, and, on AWS, chains to the
// stack's egress service (contract.EnvEgressUpstream), through which the
// harness itself reaches galley, the git host, SQS and the model
// providers.
func (h *harness) startEgress() (*egress.Proxy, string, error) {
	opts := []egress.Option{
		egress.WithAllowlist(h.cfg.EgressAllow),
		egress.OnDecision(h.egressLog().decided),
		egress.WithLogger(h.log.With("component", "egress")),
	}
	if h.cfg.EgressResolver != "" {
		opts = append(opts, egress.WithResolver(h.cfg.EgressResolver))
	}
	if h.cfg.EgressUpstream != "" {
		opts = append(opts, egress.WithUpstream(h.cfg.EgressUpstream, h.cfg.EgressSecret))
	}
	p, err := egress.New(opts...)
	if err != nil {
		return nil, "", err
	}
	ln, err := h.listenForAgent("egress proxy")
	if err != nil {
		p.Close()
		return nil, "", err
	}
	go func() { _ = p.Serve(ln) }()
	return p, "http://" + ln.Addr().String(), nil
}

// egressEnv points the agent's HTTP clients at its egress proxy (the
// names curl, git, Node's and Rust's clients read), and leaves loopback,
// where its MCP server, model proxy and push gate are, direct. The
// network does the enforcing: a client that ignores them reaches nothing.
func egressEnv(proxyURL string) []string {
	const direct = "127.0.0.1,localhost,::1"
	return []string{
		"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		"NO_PROXY=" + direct, "no_proxy=" + direct,
	}
}

// ownProxy is the proxy the harness's own clients go through: the egress
// service as the harness, or none (the harness's network is this
// machine's).
func (h *harness) ownProxy() (*url.URL, error) {
	if h.cfg.EgressUpstream == "" {
		return nil, nil
	}
	return egress.HarnessProxyURL(h.cfg.EgressUpstream, h.cfg.EgressSecret)
}

// ownTransport is a transport for the harness's own calls: through
// ownProxy, and never through a proxy the process's environment names.
func ownTransport(proxy *url.URL) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	if proxy != nil {
		t.Proxy = http.ProxyURL(proxy)
	}
	return t
}

// egressReports bounds what the agent's egress proxy writes to the
// worker's event log: each (host, verdict) at once the first time, then
// at most once a minute with how many came since, for at most
// egressReportHosts hosts (the rest are counted in one line): an agent
// that floods refused connections cannot push everything else out of
// its log.
type egressReports struct {
	h    *harness
	mu   sync.Mutex
	seen map[string]*egressSeen
	more int // decisions about hosts past the bound, not reported
}

type egressSeen struct {
	last  time.Time
	since int
}

const (
	egressReportHosts    = 64
	egressReportInterval = time.Minute
)

func (h *harness) egressLog() *egressReports {
	return &egressReports{h: h, seen: map[string]*egressSeen{}}
}

func (r *egressReports) decided(d egress.Decision) {
	verdict := "refused"
	if d.Allowed {
		verdict = "allowed"
	}
	key := verdict + " " + strings.ToLower(d.Host)
	now := time.Now()
	r.mu.Lock()
	s, ok := r.seen[key]
	if !ok && len(r.seen) >= egressReportHosts {
		r.more++
		more := r.more
		r.mu.Unlock()
		if more == 1 || more%1000 == 0 {
			r.h.rep.report(workerapi.EventEgress, "egress decisions past the log's bound of hosts",
				"count", strconv.Itoa(more))
		}
		return
	}
	if !ok {
		s = &egressSeen{}
		r.seen[key] = s
	}
	s.since++
	if ok && now.Sub(s.last) < egressReportInterval {
		r.mu.Unlock()
		return
	}
	count := s.since
	s.last, s.since = now, 0
	r.mu.Unlock()
	// What the log keeps of a decision (at most 8 fields with the
	// service's "event"): not the client, which is the agent's, nor the
	// method.
	fields := []string{}
	for k, v := range d.Fields() {
		if k != "client" && k != "method" {
			fields = append(fields, k, v)
		}
	}
	fields = append(fields, "count", strconv.Itoa(count))
	text := "egress " + verdict
	if !d.Allowed && d.Reason != "" {
		text += ": " + d.Reason
	}
	r.h.rep.report(workerapi.EventEgress, text, fields...)
}

// closeEgress ends the agent's egress proxy and its tunnels.
func closeEgress(p *egress.Proxy) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		_ = p.Close()
	}
}
