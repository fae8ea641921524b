package gitserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// UpstreamOption tunes how Upstream reaches the repository.
type UpstreamOption func(*http.Transport)

// ViaProxy makes Upstream reach the repository through the HTTP proxy at
// u (the egress proxy, as the harness: u may carry its credential), and
// through nothing else: the process's proxy variables are not read.
func ViaProxy(u *url.URL) UpstreamOption {
	return func(t *http.Transport) { t.Proxy = http.ProxyURL(u) }
}

// Upstream forwards smart-HTTP requests to the repository at rawURL
// (https, or http on loopback), adding basic auth user:token() to each.
// token is called per request (rotation); the credential never appears in
// a log line or error. The client's own Authorization and cookies are not
// forwarded. An upstream 401 (the house credential was refused) becomes a
// 502 naming the cause, so the client is not asked for a credential of its
// own it could never supply.
func Upstream(rawURL, user string, token func(context.Context) (string, error), opts ...UpstreamOption) (http.Handler, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("gitserve: the upstream repository is not a valid URL") // it may hold a secret: not repeated
	}
	switch {
	case u.User != nil:
		return nil, errors.New("gitserve: the upstream URL must not hold credentials")
	case u.Scheme == "https":
	case u.Scheme == "http" && loopback(u.Hostname()):
	default:
		return nil, fmt.Errorf("gitserve: the upstream must be https, or http on loopback: %s", u.Redacted())
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("gitserve: the upstream must be a repository URL without query or fragment: %s", u.Redacted())
	}
	if token == nil {
		return nil, errors.New("gitserve: no token function for the upstream")
	}
	base := *u
	base.Path = strings.TrimSuffix(u.Path, "/")
	base.RawPath = ""
	up := &upstream{user: user, token: token}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	for _, o := range opts {
		o(transport)
	}
	up.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := base
			out.Path += pr.In.URL.Path[len(pr.In.URL.Path)-len(endpoint(pr.In.URL.Path)):]
			out.RawQuery = pr.In.URL.RawQuery
			pr.Out.URL = &out
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
			if tok, _ := pr.In.Context().Value(tokenKey{}).(string); tok != "" {
				pr.Out.SetBasicAuth(user, tok)
			}
		},
		Transport:     transport,
		FlushInterval: -1, // progress in side-band reaches the client as it comes
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("Set-Cookie")
			if resp.StatusCode != http.StatusUnauthorized {
				return nil
			}
			resp.Body.Close()
			msg := "the upstream repository refused the house git credential\n"
			resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
			resp.Header = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
			resp.Header.Set("Content-Length", strconv.Itoa(len(msg)))
			resp.ContentLength = int64(len(msg))
			resp.Body = io.NopCloser(strings.NewReader(msg))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// Transport errors name the URL, which holds no credential.
			http.Error(w, "the upstream repository is unreachable: "+err.Error(), http.StatusBadGateway)
		},
	}
	return up, nil
}

type upstream struct {
	user  string
	token func(context.Context) (string, error)
	proxy *httputil.ReverseProxy
}

type tokenKey struct{}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := checkRequest(w, r); !ok {
		return
	}
	tok, err := u.token(r.Context())
	if err != nil {
		// The token function's error is not shown: it may describe the secret.
		http.Error(w, "the house git credential is unavailable", http.StatusBadGateway)
		return
	}
	u.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
}

// loopback reports whether host names this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
