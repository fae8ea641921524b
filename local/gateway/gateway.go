// Package gateway is a local stand-in for an API Gateway HTTP API with
// Lambda proxy integrations (payload format 2.0): it turns each HTTP
// request into the event API Gateway would send, invokes the route's
// function (under the Lambda Runtime Interface Emulator, one invocation per
// emulator at a time), and writes the function's response back, with API
// Gateway's limits: 30 s per integration, 10 MB per request, Lambda's 6 MB
// per invocation payload, and its error answers (500 for a function error,
// 503 for an integration timeout or an unreachable function, 404 for a
// path no route matches, 413 for a body over the limit, 429 for a route
// over its throttle).
//
// A request's body must arrive within a deadline of its headers (see
// WithBodyTimeout): the gateway is galley's front door, and a client that
// trickles a body would otherwise hold a connection and a goroutine for as
// long as it likes. Stage throttles (RouteSettings) are enforced when given
// (WithThrottle), so that the throttles the stack declares can be tested.
//
// The aws-lambda-go-api-proxy adapter reads the event back into an
// http.Request on the function side, so what passes through here is what
// passes through API Gateway: lowercased, comma-joined headers, the body as
// text or base64, the request time (requestContext.timeEpoch) by the
// gateway's clock.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// API Gateway HTTP API limits.
const (
	IntegrationTimeout = 30 * time.Second
	MaxPayload         = 10 << 20
)

// Limits of the gateway's own HTTP server. AWS documents no body read
// deadline for HTTP APIs; DefaultBodyTimeout is galley's bound, long
// enough for a largest galley body (1 MiB) over a slow link. ServerLimits
// applies the others to an http.Server.
const (
	DefaultBodyTimeout = 15 * time.Second
	ReadHeaderTimeout  = 10 * time.Second
	IdleTimeout        = 60 * time.Second
	// MaxHeaderBytes bounds the request line and headers; HTTP APIs
	// refuse more than 10,240 bytes of them, which this is well above.
	MaxHeaderBytes = 64 << 10
)

// ServerLimits sets srv's header deadline, idle timeout and header bound.
// It sets no ReadTimeout nor WriteTimeout: the body deadline is per request
// (in ServeHTTP), and a call may run for the whole integration timeout.
func ServerLimits(srv *http.Server) {
	srv.ReadHeaderTimeout = ReadHeaderTimeout
	srv.IdleTimeout = IdleTimeout
	srv.MaxHeaderBytes = MaxHeaderBytes
}

// Route is one route: a method and a path, which may end in a greedy
// "{proxy+}" segment, and the function that serves it.
type Route struct {
	Method   string
	Path     string
	Function string
}

// Key is the route key API Gateway writes ("POST /v1/effects").
func (r Route) Key() string { return r.Method + " " + r.Path }

// Gateway is the local API Gateway; it is an http.Handler.
type Gateway struct {
	routes      []Route
	fns         map[string]Invoker
	timeout     time.Duration
	bodyTimeout time.Duration
	now         func() time.Time
	log         *slog.Logger
	stage       string
	apiID       string
	// throttleSpec is what WithThrottle was given ("" the stage default);
	// throttles the buckets made of it, by route key.
	throttleSpec map[string]Throttle
	throttles    map[string]*bucket
	counted      requestCounter
}

// Option configures a Gateway.
type Option func(*Gateway)

// WithTimeout sets the integration timeout (default 30 s).
func WithTimeout(d time.Duration) Option { return func(g *Gateway) { g.timeout = d } }

// WithBodyTimeout sets how long a request's body may take to arrive once
// its headers have (default DefaultBodyTimeout). A body still incomplete
// then is answered 400 and its connection closed.
func WithBodyTimeout(d time.Duration) Option { return func(g *Gateway) { g.bodyTimeout = d } }

// WithClock sets the clock that stamps requestContext.timeEpoch and fills
// the throttles' buckets.
func WithClock(now func() time.Time) Option { return func(g *Gateway) { g.now = now } }

// WithLogger sets the access log (one line per request).
func WithLogger(l *slog.Logger) Option { return func(g *Gateway) { g.log = l } }

// New returns a gateway serving routes with the functions in fns, by name.
func New(routes []Route, fns map[string]Invoker, opts ...Option) (*Gateway, error) {
	g := &Gateway{routes: routes, fns: fns, timeout: IntegrationTimeout, bodyTimeout: DefaultBodyTimeout, now: time.Now,
		log: slog.New(slog.DiscardHandler), stage: "$default", apiID: "local"}
	for _, o := range opts {
		o(g)
	}
	if g.bodyTimeout <= 0 {
		return nil, errors.New("gateway: the body timeout must be positive")
	}
	if err := g.buckets(); err != nil {
		return nil, err
	}
	for _, r := range routes {
		if fns[r.Function] == nil {
			return nil, fmt.Errorf("gateway: route %s names function %q, which is not given", r.Key(), r.Function)
		}
		if i := strings.Index(r.Path, "{"); i >= 0 && (r.Path[i:] != "{proxy+}" || !strings.HasSuffix(r.Path[:i], "/")) {
			return nil, fmt.Errorf("gateway: route %s: only a final /{proxy+} segment is supported", r.Key())
		}
	}
	return g, nil
}

// match finds the route for method and path as API Gateway does, by how
// well each matches and never by the order routes were given: the full
// path with the request's method, then the full path under ANY (which
// takes the methods a path has no route of its own for), then the greedy
// route with the longest prefix, its own method before ANY. A greedy
// route needs at least one character after its prefix.
func (g *Gateway) match(method, path string) (Route, map[string]string, bool) {
	var exact, best *Route
	var proxy string
	for i := range g.routes {
		r := &g.routes[i]
		if r.Method != method && r.Method != "ANY" {
			continue
		}
		if r.Path == path {
			if r.Method == method {
				return *r, nil, true
			}
			exact = r
			continue
		}
		if prefix, ok := strings.CutSuffix(r.Path, "{proxy+}"); ok && strings.HasPrefix(path, prefix) && len(path) > len(prefix) {
			if best == nil || len(r.Path) > len(best.Path) || (len(r.Path) == len(best.Path) && r.Method == method) {
				best, proxy = r, path[len(prefix):]
			}
		}
	}
	switch {
	case exact != nil:
		return *exact, nil, true
	case best != nil:
		return *best, map[string]string{"proxy": proxy}, true
	}
	return Route{}, nil, false
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := g.now()
	reqID := newRequestID()
	w.Header().Set("Apigw-Requestid", reqID)
	status, integration := 0, 0
	var ierr error
	route := "-"
	defer func() {
		attrs := []any{"requestId", reqID, "routeKey", route, "status", status,
			"ms", float64(time.Since(start).Microseconds()) / 1000}
		if integration != 0 {
			attrs = append(attrs, "integrationStatus", integration)
		}
		if ierr != nil {
			attrs = append(attrs, "integrationError", ierr.Error())
		}
		g.log.Info("request", attrs...)
	}()
	rt, params, ok := g.match(r.Method, r.URL.Path)
	if !ok {
		status = message(w, http.StatusNotFound, "Not Found")
		return
	}
	route = rt.Key()
	if !g.admit(route) {
		status = message(w, http.StatusTooManyRequests, "Too Many Requests")
		return
	}
	g.counted.add(route)
	if r.ContentLength > MaxPayload {
		status = message(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
		return
	}
	body, err := g.readBody(w, r)
	if err != nil {
		status = message(w, http.StatusBadRequest, "Bad Request")
		return
	}
	if len(body) > MaxPayload {
		status = message(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
		return
	}
	ev := g.event(r, rt, params, body, reqID, start)
	payload, err := json.Marshal(ev)
	if err != nil {
		status = message(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.timeout)
	defer cancel()
	result, err := g.fns[rt.Function].Invoke(ctx, payload)
	if err != nil {
		ierr = err
		status = g.failure(ctx, w, err)
		return
	}
	integration = 200
	status, err = writeResult(w, result)
	if err != nil {
		ierr = err
		status = message(w, http.StatusInternalServerError, "Internal Server Error")
	}
}

// readBody reads r's body, at most MaxPayload+1 bytes, under the body
// deadline. A request without a body gets no deadline: net/http is already
// reading ahead on its connection to notice a client that goes away, and a
// deadline there would cancel the call.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(g.bodyTimeout)); err != nil {
		return nil, fmt.Errorf("gateway: cannot set the body deadline: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxPayload+1))
	if err == nil && len(body) <= MaxPayload {
		// The invocation may outlast the deadline; the connection is only
		// watched for the client going away from here on. A body cut
		// short keeps its deadline: net/http reads what remains of a
		// small one before answering, and must not wait for it.
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, err
}

// failure answers a failed invocation as API Gateway does.
func (g *Gateway) failure(ctx context.Context, w http.ResponseWriter, err error) int {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		// HTTP APIs answer an integration that outlived the timeout so.
		return message(w, http.StatusServiceUnavailable, "Service Unavailable")
	}
	if ie, ok := errAs(err); ok && ie.Kind == Unreachable {
		return message(w, http.StatusServiceUnavailable, "Service Unavailable")
	}
	// A function error, a Lambda timeout, a payload Lambda refused.
	return message(w, http.StatusInternalServerError, "Internal Server Error")
}

// event builds the payload format 2.0 event of r.
func (g *Gateway) event(r *http.Request, rt Route, params map[string]string, body []byte, reqID string, at time.Time) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	var cookies []string
	for name, vs := range r.Header {
		lname := strings.ToLower(name)
		if lname == "cookie" {
			for _, v := range vs {
				for _, c := range strings.Split(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						cookies = append(cookies, c)
					}
				}
			}
			continue
		}
		headers[lname] = strings.Join(vs, ",")
	}
	host := r.Host
	headers["host"] = host
	if r.ContentLength >= 0 || len(body) > 0 {
		headers["content-length"] = strconv.Itoa(len(body))
	}
	sourceIP, _, _ := net.SplitHostPort(r.RemoteAddr)
	if prior := headers["x-forwarded-for"]; prior != "" {
		headers["x-forwarded-for"] = prior + ", " + sourceIP
	} else {
		headers["x-forwarded-for"] = sourceIP
	}
	port := "80"
	if _, p, err := net.SplitHostPort(host); err == nil {
		port = p
	}
	headers["x-forwarded-port"] = port
	headers["x-forwarded-proto"] = "http"
	headers["x-amzn-trace-id"] = "Root=1-" + strconv.FormatInt(at.Unix(), 16) + "-" + randomHex(12)

	var query map[string]string
	if r.URL.RawQuery != "" {
		query = map[string]string{}
		for k, vs := range r.URL.Query() {
			query[k] = strings.Join(vs, ",")
		}
	}
	domain := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		domain = h
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              rt.Key(),
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     rt.Key(),
			AccountID:    "000000000000",
			Stage:        g.stage,
			RequestID:    reqID,
			APIID:        g.apiID,
			DomainName:   domain,
			DomainPrefix: strings.SplitN(domain, ".", 2)[0],
			Time:         at.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    at.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: r.Method, Path: r.URL.Path, Protocol: r.Proto, SourceIP: sourceIP, UserAgent: r.UserAgent(),
			},
		},
	}
	if len(body) > 0 {
		if textual(r.Header.Get("Content-Type")) && utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// textual reports whether a body of this media type is passed as text;
// any other is base64-encoded.
func textual(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "/json"), strings.HasSuffix(mt, "+json"),
		strings.HasSuffix(mt, "/xml"), strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/x-www-form-urlencoded":
		return true
	}
	return false
}

// writeResult writes a function's result. A result with a statusCode is a
// response object; any other JSON value is, in payload format 2.0, the
// body of a 200 application/json answer.
func writeResult(w http.ResponseWriter, result []byte) (int, error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(result, &probe) != nil || probe["statusCode"] == nil {
		if !json.Valid(result) {
			return 0, errors.New("the function's result is not JSON")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(result)
		return http.StatusOK, nil
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(result, &resp); err != nil {
		return 0, fmt.Errorf("malformed response object: %w", err)
	}
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return 0, fmt.Errorf("response status %d", resp.StatusCode)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			return 0, fmt.Errorf("response body is not base64: %w", err)
		}
		body = b
	}
	h := w.Header()
	names := make([]string, 0, len(resp.Headers))
	for k := range resp.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		h.Set(k, resp.Headers[k])
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	h.Del("Content-Length")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	return resp.StatusCode, nil
}

// message writes API Gateway's own error answer.
func message(w http.ResponseWriter, status int, msg string) int {
	b, _ := json.Marshal(map[string]string{"message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return status
}

func newRequestID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return strings.TrimRight(base64.StdEncoding.EncodeToString(b[:]), "=") + "="
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
