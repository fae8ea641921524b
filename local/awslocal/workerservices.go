package awslocal

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"
)

// serveWorkerServices serves each of Config.WorkerServices where worker
// tasks reach the stack and returns the origin rewrites for the template:
// with containers, over TLS with the stack's certificate on the network's
// host side (the harness takes a provider's base URL over http only to
// loopback, which a container's host is not); without, over http on
// loopback, as the git server is served.
func (s *Stack) serveWorkerServices(serverTLS *tls.Config) (map[string]string, error) {
	origins := make([]string, 0, len(s.cfg.WorkerServices))
	for o := range s.cfg.WorkerServices {
		origins = append(origins, o)
	}
	sort.Strings(origins)
	out := map[string]string{}
	for _, origin := range origins {
		u, err := url.Parse(origin)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") ||
			u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("aws-local: worker service %q: want an https origin (https://host, no path)", origin)
		}
		ln, err := s.ctrs.listenClosed()
		if err != nil {
			return nil, fmt.Errorf("aws-local: worker service %s: %w", origin, err)
		}
		h := s.cfg.WorkerServices[origin]
		if s.ctrs != nil {
			s.serveTLS(ln, h, serverTLS)
			out[u.Scheme+"://"+u.Host] = "https://" + ln.Addr().String()
			continue
		}
		// No write deadline: a model's answer streams.
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
		s.servers = append(s.servers, srv)
		go srv.Serve(ln)
		out[u.Scheme+"://"+u.Host] = "http://" + ln.Addr().String()
	}
	return out, nil
}
