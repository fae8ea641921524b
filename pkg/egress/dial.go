package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/goproxy"
	"github.com/stripe/smokescreen/pkg/smokescreen"
)

// connectDial dials a CONNECT tunnel's destination through smokescreen's
// dialer, and only the destination that was decided on: goproxy would
// otherwise dial a proxy named in the process's environment.
func connectDial(h *goproxy.ProxyHttpServer) func(*goproxy.ProxyCtx, string, string) (net.Conn, error) {
	return func(pctx *goproxy.ProxyCtx, network, addr string) (net.Conn, error) {
		sctx, _ := pctx.UserData.(*smokescreen.SmokescreenContext)
		if sctx == nil || sctx.Decision == nil || sctx.Decision.OutboundHost != addr {
			return nil, fmt.Errorf("refused to dial %s: not the destination decided on (is HTTPS_PROXY set in the proxy's environment?)", addr)
		}
		ctx := context.WithValue(context.Background(), goproxy.ProxyContextKey, pctx)
		return h.Tr.DialContext(ctx, network, addr)
	}
}

// dial connects to the destination smokescreen decided on and resolved,
// or through the upstream when chained.
func (p *Proxy) dial(ctx context.Context, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	var err error
	if p.upstream != nil {
		c, err = p.upstream.dial(ctx, network, addr, timeout)
	} else {
		d := net.Dialer{Timeout: timeout}
		c, err = d.DialContext(ctx, network, addr)
	}
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		return nil, &dialFailure{err.Error()}
	}
	return c, err
}

// dialFailure is a connection that failed other than by timing out. It is
// not a net.Error on purpose: smokescreen v0.1.0 answers such a net.Error
// with the text "<nil>" (a shadowed variable in rejectResponse), and an
// error of its own with its text, 500, which rewriteRejection makes 502.
type dialFailure struct{ msg string }

func (e *dialFailure) Error() string { return dialFailurePrefix + e.msg }

const (
	dialFailurePrefix = "could not connect: "
	unexpectedPrefix  = "An unexpected error occurred: " // smokescreen's text for an error it does not know
)

// rewriteRejection is smokescreen's RejectResponseHandlerWithCtx: a refusal
// is 403 (smokescreen answers 407, which means "credentials needed" here),
// and a failed connection 502.
func rewriteRejection(_ *smokescreen.SmokescreenContext, resp *http.Response) {
	switch msg := resp.Header.Get("X-Smokescreen-Error"); {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		resp.StatusCode, resp.Status = http.StatusForbidden, "403 Forbidden"
	case resp.StatusCode == http.StatusInternalServerError && strings.HasPrefix(msg, unexpectedPrefix+dialFailurePrefix):
		msg = strings.TrimPrefix(msg, unexpectedPrefix)
		resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
		resp.Header.Set("X-Smokescreen-Error", msg)
		resp.Body = io.NopCloser(strings.NewReader(msg + "\n"))
		resp.ContentLength = int64(len(msg) + 1)
	}
}
