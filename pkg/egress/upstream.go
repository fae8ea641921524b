package egress

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/stripe/goproxy"
	"github.com/stripe/smokescreen/pkg/smokescreen"
)

// ParseUpstream checks an upstream egress proxy's address: an http URL
// with a host and a port and nothing else (the secret is given apart, so
// that no URL a program logs holds it).
func ParseUpstream(upstream string) (*url.URL, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the upstream egress proxy %q is not a URL", upstream)
	}
	switch {
	case u.Scheme != "http":
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the upstream egress proxy %q must be an http:// URL", u.Redacted())
	case u.User != nil:
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the upstream egress proxy's URL must not hold credentials: give the secret apart")
	case u.Hostname() == "" || u.Port() == "":
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the upstream egress proxy %q needs a host and a port", u.Redacted())
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the upstream egress proxy %q must have no path or query", u.Redacted())
	}
	return &url.URL{Scheme: "http", Host: u.Host}, nil
}

// HarnessProxyURL is the proxy URL with which the harness's own clients
// (an http.Transport's Proxy, git's http.proxy) reach the egress proxy at
// upstream as the harness. It holds the secret: never log it (log
// ParseUpstream's URL, or u.Redacted()).
func HarnessProxyURL(upstream, secret string) (*url.URL, error) {
	u, err := ParseUpstream(upstream)
	if err != nil {
		return nil, err
	}
	if len(secret) < MinSecretLen {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the egress proxy's harness secret must have at least %d characters", MinSecretLen)
	}
	u.User = url.UserPassword(HarnessUser, secret)
	return u, nil
}

// upstream is the egress proxy a chained proxy sends everything through.
type upstream struct {
	addr   string // host:port
	auth   string // the Proxy-Authorization value
	dialer net.Dialer
}

func newUpstream(raw, secret, resolver string) (*upstream, error) {
	u, err := ParseUpstream(raw)
	if err != nil {
		return nil, err
	}
	if len(secret) < MinSecretLen {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the upstream egress proxy's secret must have at least %d characters", MinSecretLen)
	}
	return &upstream{addr: u.Host, auth: basicAuth(secret), dialer: net.Dialer{Resolver: newResolver(resolver)}}, nil
}

// dial is smokescreen's ProxyDialTimeout when chained: smokescreen has
// decided, resolved and checked the destination, and instead of dialing
// that address this opens a tunnel to the destination's name through the
// upstream, which decides again. Called for CONNECT tunnels and for the
// connections of plain-HTTP requests alike.
func (u *upstream) dial(ctx context.Context, _, _ string, timeout time.Duration) (net.Conn, error) {
	pctx, _ := ctx.Value(goproxy.ProxyContextKey).(*goproxy.ProxyCtx)
	var dest string
	if pctx != nil {
		if sctx, ok := pctx.UserData.(*smokescreen.SmokescreenContext); ok && sctx.Decision != nil {
			dest = sctx.Decision.OutboundHost
		}
	}
	if dest == "" {
		return nil, fmt.Errorf("egress: no decided destination to ask the upstream proxy for")
	}
	d := u.dialer
	d.Timeout = timeout
	c, err := d.DialContext(ctx, "tcp", u.addr)
	if err != nil {
		return nil, fmt.Errorf("egress: the upstream egress proxy %s: %w", u.addr, err)
	}
	c.SetDeadline(time.Now().Add(timeout))
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Opaque: dest},
		Host:   dest,
		Header: http.Header{"Proxy-Authorization": {u.auth}},
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("egress: the upstream egress proxy %s: %w", u.addr, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("egress: the upstream egress proxy %s: %w", u.addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, &upstreamRefusal{dest: dest, status: resp.Status, reason: resp.Header.Get("X-Smokescreen-Error")}
	}
	c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// upstreamRefusal is the upstream's refusal of a destination.
type upstreamRefusal struct {
	dest, status, reason string
}

func (e *upstreamRefusal) Error() string {
	s := "the upstream egress proxy refused " + e.dest + ": " + e.status
	if e.reason != "" {
		r := e.reason
		if len(r) > 300 {
			r = r[:300]
		}
		s += ": " + strings.TrimSpace(r)
	}
	return s
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
