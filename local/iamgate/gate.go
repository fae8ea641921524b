package iamgate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/iampolicy"
)

// Defaults of the options.
const (
	DefaultRegion  = "us-east-1"
	DefaultAccount = "000000000000"
	// DefaultMaxBody bounds a request body: DynamoDB's own request limit.
	DefaultMaxBody = 16 << 20
	// maxRecords bounds the decisions a long-running gate keeps (the
	// latest); an observer sees every one.
	maxRecords = 10000
)

// Principal is one caller: a role session's credentials, the role's
// identity-based policies and, for a session made by sts:AssumeRole with a
// Policy, the session policies that further limit it.
type Principal struct {
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken, if set, must come in X-Amz-Security-Token.
	SessionToken string
	RoleARN      string // arn:aws:iam::<account>:role/<name>
	SessionName  string
	Policies     []iampolicy.Policy
	// SessionPolicies, when there are any, bound the session: a request
	// is allowed only if Policies allow it and SessionPolicies allow it
	// too, and neither denies it explicitly. None means no session policy
	// (the role's policies alone decide).
	SessionPolicies []iampolicy.Policy
	// Expires is when the credentials stop working (zero: never); a
	// request signed at or after it is refused with ExpiredToken.
	Expires time.Time
}

// SessionARN is the caller as AWS names it in a denial:
// arn:aws:sts::<account>:assumed-role/<role name>/<session name>.
func (p Principal) SessionARN() string {
	parts := strings.SplitN(p.RoleARN, ":", 6)
	if len(parts) != 6 {
		return p.RoleARN
	}
	name := parts[5][strings.LastIndex(parts[5], "/")+1:]
	return "arn:" + parts[1] + ":sts::" + parts[4] + ":assumed-role/" + name + "/" + p.SessionName
}

// Principals finds the principal an access key id belongs to.
type Principals interface {
	Lookup(accessKeyID string) (Principal, bool)
}

// Chain looks a key up in each of ps in turn: the stack's role sessions,
// then the sessions an STS stand-in issued, say.
func Chain(ps ...Principals) Principals { return chain(ps) }

type chain []Principals

func (c chain) Lookup(key string) (Principal, bool) {
	for _, p := range c {
		if pr, ok := p.Lookup(key); ok {
			return pr, true
		}
	}
	return Principal{}, false
}

// CallerHeader is the header the gate gives an STS upstream to say who
// the authenticated caller is, form-encoded: role (the role ARN), session
// (the session name), account, region and tls ("true" when the request
// came over TLS). The gate removes any copy a client sent, and every
// X-Galley-Iamgate-* header, before any upstream sees the request; so the
// upstream must be reachable only through the gate (served as its
// upstream handler, on no listener of its own).
const CallerHeader = "X-Galley-Iamgate-Caller"

// gateHeaderPrefix is the prefix of headers only the gate may set.
const gateHeaderPrefix = "X-Galley-Iamgate-"

// SecretResolver maps a Secrets Manager SecretId (a name, a partial or a
// full ARN) to the secret's full ARN; ok is false for a secret it does not
// know.
type SecretResolver func(secretID string) (arn string, ok bool)

// TaskDefinition is what the gate needs to know of one ECS task
// definition: its ARN (with revision) and the roles a task of it is given.
type TaskDefinition struct {
	ARN              string
	TaskRoleARN      string
	ExecutionRoleARN string
}

// TaskDefinitions resolves a RunTask taskDefinition ("family",
// "family:revision" or an ARN).
type TaskDefinitions func(ref string) (TaskDefinition, bool)

// Record is one authorization decision.
type Record struct {
	Service   Service
	Operation string // "PutItem"
	Caller    string // the session ARN
	Role      string // the role ARN
	Action    string // "dynamodb:PutItem"
	Resource  string
	Allowed   bool
	Explicit  bool   // denied by an explicit Deny
	Sid       string // the deciding statement's Sid, if any
	// BySession is true when the caller's session policy decided the
	// denial (the role's own policies allowed the request).
	BySession bool
}

// Gate is an http.Handler that authenticates and authorizes every request
// for one service and hands the allowed ones to its upstream.
type Gate struct {
	service    Service
	proto      protocol
	ops        map[string]mapper
	upstream   http.Handler
	principals Principals
	region     string
	account    string
	maxBody    int64
	now        func() time.Time
	log        *slog.Logger
	secrets    SecretResolver
	taskDefs   TaskDefinitions
	observe    func(Record)
	usage      func(Call)

	mu      sync.Mutex
	records []Record
}

// Option configures a Gate.
type Option func(*Gate)

// WithRegion sets the region (default us-east-1): the one credential
// scopes must name and ARNs are built with.
func WithRegion(r string) Option { return func(g *Gate) { g.region = r } }

// WithAccount sets the account ARNs are built with (default 000000000000).
func WithAccount(a string) Option { return func(g *Gate) { g.account = a } }

// WithMaxBody bounds a request body (default DefaultMaxBody).
func WithMaxBody(n int64) Option { return func(g *Gate) { g.maxBody = n } }

// WithClock sets the clock X-Amz-Date is checked against.
func WithClock(now func() time.Time) Option { return func(g *Gate) { g.now = now } }

// WithLogger sets where denials are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(g *Gate) { g.log = l } }

// WithSecretResolver resolves Secrets Manager SecretIds to ARNs.
func WithSecretResolver(r SecretResolver) Option { return func(g *Gate) { g.secrets = r } }

// WithTaskDefinitions resolves ECS task definitions to their roles, for
// RunTask's iam:PassRole. Without it, or for one it does not know,
// RunTask answers ClientException "TaskDefinition not found.".
func WithTaskDefinitions(t TaskDefinitions) Option { return func(g *Gate) { g.taskDefs = t } }

// WithObserver calls f with every decision, as it is made (a cost counter,
// say). f must not block.
func WithObserver(f func(Record)) Option { return func(g *Gate) { g.observe = f } }

// New returns a gate for service in front of upstream.
func New(service Service, upstream http.Handler, principals Principals, opts ...Option) (*Gate, error) {
	proto, ok := protocols[service]
	if !ok {
		return nil, fmt.Errorf("iamgate: service %q is not modelled (dynamodb, sqs, secretsmanager, ecs, sts, s3)", service)
	}
	if upstream == nil || principals == nil {
		return nil, errors.New("iamgate: New needs an upstream and principals")
	}
	g := &Gate{
		service: service, proto: proto, ops: operations[service],
		upstream: upstream, principals: principals,
		region: DefaultRegion, account: DefaultAccount, maxBody: DefaultMaxBody,
		now: time.Now, log: slog.Default(),
	}
	for _, o := range opts {
		o(g)
	}
	return g, nil
}

// Proxy is an upstream that forwards to a stand-in at baseURL (DynamoDB
// Local, fauxqs, ...), keeping the path and the body.
func Proxy(baseURL string) (http.Handler, error) { return ProxyVia(baseURL, nil) }

// ProxyVia is Proxy sending its requests through rt (nil: the default
// transport), such as a layer that makes the stand-in behave as AWS does
// where it is kinder (awsfault.HarshSQS).
func ProxyVia(baseURL string, rt http.RoundTripper) (http.Handler, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("iamgate: upstream %q is not an absolute URL", baseURL)
	}
	return &httputil.ReverseProxy{
		Transport: rt,
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		// A caller that gave up (a long poll's client cancelled) is not
		// an upstream failure worth a line on stderr; anything else is
		// answered 502 as the default does, and logged.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				slog.Warn("iamgate: upstream failed", "upstream", u.Host, "err", err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}, nil
}

// Decisions returns the decisions made so far, in order; a long-running
// gate keeps only the latest (at least 5000, at most 10000).
func (g *Gate) Decisions() []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Record(nil), g.records...)
}

func (g *Gate) record(r Record) {
	g.mu.Lock()
	if len(g.records) == maxRecords {
		g.records = append(g.records[:0], g.records[maxRecords/2:]...)
	}
	g.records = append(g.records, r)
	g.mu.Unlock()
	if g.observe != nil {
		g.observe(r)
	}
}

// ServeHTTP authenticates the request by SigV4, maps it to the
// authorizations it needs, evaluates each against the caller's policies,
// and passes it upstream only if all allow.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, g.maxBody+1))
	_ = r.Body.Close()
	if err != nil {
		g.proto.write(w, g.proto.refused("SerializationException", "could not read the request body"))
		return
	}
	if int64(len(body)) > g.maxBody {
		e := g.proto.refused("RequestEntityTooLarge", fmt.Sprintf("Request size exceeds %d bytes", g.maxBody))
		e.status = http.StatusRequestEntityTooLarge
		g.proto.write(w, e)
		return
	}

	p, authErr := g.authenticate(r, body)
	if authErr != nil {
		g.log.Warn("iamgate: request not authenticated", "service", g.service, "error", authErr.typ)
		g.proto.write(w, *authErr)
		return
	}

	var op string
	var m mapping
	if g.proto.rest {
		var mapErr *awsError
		if op, m, mapErr = g.s3Operation(r); mapErr != nil {
			g.log.Warn("iamgate: unmodelled operation", "service", g.service, "method", r.Method, "role", p.RoleARN)
			g.proto.write(w, *mapErr)
			return
		}
	} else {
		var named string
		var ok bool
		op, named, ok = g.operation(r, body)
		mapOp := g.ops[op]
		if r.Method != http.MethodPost || !ok || mapOp == nil {
			// Refused, never passed through unchecked: the gate cannot tell
			// what it would authorize.
			msg := fmt.Sprintf("iamgate: %s operation %q is not modelled by the IAM gate; refusing it rather than passing it unchecked", g.service, named)
			g.log.Warn("iamgate: unmodelled operation", "service", g.service, "target", named, "role", p.RoleARN)
			g.proto.write(w, g.proto.refused("UnknownOperationException", msg))
			return
		}
		var mapErr *awsError
		if m, mapErr = mapOp(g, body); mapErr != nil {
			g.proto.write(w, *mapErr)
			return
		}
	}

	if len(m.checks) == 0 && m.after == nil && !m.free {
		// Every operation is authorized by at least one check; a request
		// the mapping found nothing to check in is not passed on unchecked.
		g.proto.write(w, *g.missing("the operation's resource"))
		return
	}
	base := map[string][]string{
		"aws:SecureTransport":  {fmt.Sprint(r.TLS != nil)},
		"aws:PrincipalArn":     {p.RoleARN},
		"aws:PrincipalAccount": {g.account},
		"aws:PrincipalType":    {"AssumedRole"},
		"aws:RequestedRegion":  {g.region},
	}
	for _, c := range m.checks {
		ctx := make(map[string][]string, len(base)+len(c.context))
		for k, v := range base {
			ctx[k] = v
		}
		for k, v := range c.context {
			ctx[k] = v
		}
		d, why := evaluate(p, iampolicy.Request{Action: c.action, Resource: c.resource, Context: ctx})
		g.record(Record{
			Service: g.service, Operation: op, Caller: p.SessionARN(), Role: p.RoleARN,
			Action: c.action, Resource: c.resource, Allowed: d.Allowed, Explicit: d.Explicit, Sid: d.Sid,
			BySession: !d.Allowed && (why == sessionDeny || why == noSessionAllow),
		})
		if !d.Allowed {
			shown := c.shown
			if shown == "" {
				shown = c.resource
			}
			g.log.Warn("iamgate: access denied", "service", g.service, "operation", op, "role", p.RoleARN,
				"action", c.action, "resource", c.resource, "explicit", d.Explicit, "sid", d.Sid,
				"session_policy", why == sessionDeny || why == noSessionAllow)
			g.proto.write(w, g.proto.denied(p.SessionARN(), c.action, shown, why))
			return
		}
	}
	if m.free {
		// An operation AWS allows whatever the policies say
		// (sts:GetCallerIdentity): recorded, never evaluated.
		g.record(Record{Service: g.service, Operation: op, Caller: p.SessionARN(), Role: p.RoleARN,
			Action: m.freeAction, Resource: "*", Allowed: true})
	}
	if m.after != nil {
		g.proto.write(w, *m.after)
		if g.usage != nil {
			g.usage(Call{Service: g.service, Operation: op, Role: p.RoleARN, Status: m.after.status})
		}
		return
	}
	// Only the gate speaks for the caller: a client's copy of a gate
	// header never reaches the upstream, counted or not.
	for k := range r.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), gateHeaderPrefix) {
			r.Header.Del(k)
		}
	}
	if g.service == STS {
		r.Header.Set(CallerHeader, url.Values{
			"role": {p.RoleARN}, "session": {p.SessionName}, "account": {g.account},
			"region": {g.region}, "tls": {fmt.Sprint(r.TLS != nil)},
		}.Encode())
	}
	if g.usage != nil && !g.proto.rest {
		g.serveCounted(w, r, p, op, body)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if g.usage == nil {
		g.upstream.ServeHTTP(w, r)
		return
	}
	// S3's answers (an object) stream through, their status seen on the
	// way.
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	g.upstream.ServeHTTP(sw, r)
	g.usage(Call{Service: g.service, Operation: op, Role: p.RoleARN, Status: sw.status})
}

// statusWriter remembers the status its handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// evaluate decides a request of p's session as AWS does for a role
// session: an explicit Deny in the role's identity-based policies or in a
// session policy denies; otherwise the identity-based policies must allow
// it and, when the session has session policies, so must they (the
// session's permissions are the intersection of the two). See
// https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html
// and "Session policies" in
// https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session.
func evaluate(p Principal, req iampolicy.Request) (iampolicy.Decision, denial) {
	id := iampolicy.Evaluate(p.Policies, req)
	if id.Explicit {
		return id, identityDeny
	}
	if len(p.SessionPolicies) == 0 {
		return id, noIdentityAllow
	}
	sess := iampolicy.Evaluate(p.SessionPolicies, req)
	switch {
	case sess.Explicit:
		return sess, sessionDeny
	case !id.Allowed:
		return id, noIdentityAllow
	case !sess.Allowed:
		return sess, noSessionAllow
	}
	return id, noIdentityAllow
}

// operation names the request's operation: from X-Amz-Target for the JSON
// services; from the form body's Action for a query service, whose
// request must be a form-encoded POST with no query string (so the gate
// and its upstream read the one body) and name the API version. named is
// what the caller asked for, for messages; ok is false when the request
// does not name an operation the way the service reads it.
func (g *Gate) operation(r *http.Request, body []byte) (op, named string, ok bool) {
	if !g.proto.query {
		named = r.Header.Get("X-Amz-Target")
		op, ok = strings.CutPrefix(named, g.proto.target)
		return op, named, ok
	}
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(mt) != "application/x-www-form-urlencoded" || r.URL.RawQuery != "" {
		return "", "a request that is not a form-encoded POST without a query string", false
	}
	f, err := url.ParseQuery(string(body))
	if err != nil || len(f["Action"]) != 1 || len(f["Version"]) != 1 {
		return "", "a form without one Action and one Version", false
	}
	named = f.Get("Action") + " (version " + f.Get("Version") + ")"
	if f.Get("Version") != stsVersion {
		return "", named, false
	}
	return f.Get("Action"), named, true
}

// authenticate verifies the request's SigV4 signature and finds its
// principal, answering as AWS does when it cannot.
func (g *Gate) authenticate(r *http.Request, body []byte) (Principal, *awsError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		e := g.proto.missingToken()
		return Principal{}, &e
	}
	a, why := parseAuth(h)
	if why != "" {
		e := g.proto.incompleteSignature(why)
		return Principal{}, &e
	}
	p, ok := g.principals.Lookup(a.accessKey)
	if !ok {
		e := g.proto.unrecognizedClient()
		return Principal{}, &e
	}
	// The session token must be the principal's, and only a principal
	// with one may send one.
	if tok := r.Header.Get(amzToken); tok != p.SessionToken || (tok != "" && !signed(a, "x-amz-security-token")) {
		e := g.proto.unrecognizedClient()
		return Principal{}, &e
	}
	if a.service != string(g.service) {
		e := g.proto.invalidSignature(fmt.Sprintf("Credential should be scoped to correct service: '%s'. ", g.service))
		return Principal{}, &e
	}
	if a.region != g.region {
		e := g.proto.invalidSignature(fmt.Sprintf("Credential should be scoped to a valid region, not '%s'. ", a.region))
		return Principal{}, &e
	}
	if !signed(a, "host") {
		e := g.proto.invalidSignature("'Host' must be a 'SignedHeader' in the AWS Authorization.")
		return Principal{}, &e
	}
	// The operation travels in X-Amz-Target: unsigned, a captured request
	// could be replayed as another operation. The SDK always signs it.
	if r.Header.Get("X-Amz-Target") != "" && !signed(a, "x-amz-target") {
		e := g.proto.invalidSignature("'X-Amz-Target' must be a 'SignedHeader' in the AWS Authorization.")
		return Principal{}, &e
	}
	stamp := r.Header.Get(amzDate)
	t, err := time.Parse(timeFormat, stamp)
	if err != nil || !signed(a, "x-amz-date") {
		e := g.proto.incompleteSignature("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header, signed.")
		return Principal{}, &e
	}
	if stamp[:8] != a.date {
		e := g.proto.invalidSignature(fmt.Sprintf("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from '%s'.", a.date, stamp[:8], stamp))
		return Principal{}, &e
	}
	now := g.now().UTC()
	if d := now.Sub(t); d > maxSkew || d < -maxSkew {
		e := g.proto.invalidSignature(fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 5 min.)",
			stamp, now.Add(-maxSkew).Format(timeFormat), now.Format(timeFormat)))
		if d < 0 {
			e.message = fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 5 min.)",
				stamp, now.Add(maxSkew).Format(timeFormat), now.Format(timeFormat))
		}
		return Principal{}, &e
	}
	payload, s3Path := bodyHash(body), false
	if g.proto.rest {
		// S3: the payload's hash as x-amz-content-sha256 names it, which
		// must be signed so that it cannot be swapped.
		var e *awsError
		if payload, e = g.s3PayloadHash(r, body); e != nil {
			return Principal{}, e
		}
		if !signed(a, "x-amz-content-sha256") {
			e := g.proto.invalidSignature("'x-amz-content-sha256' must be a 'SignedHeader' in the AWS Authorization.")
			return Principal{}, &e
		}
		s3Path = true
	}
	if !sameSignature(signature(r, payload, s3Path, a, p.SecretAccessKey, stamp), a.signature) {
		e := g.proto.invalidSignature("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")
		return Principal{}, &e
	}
	// Checked once the signature holds, so that only the credentials'
	// holder learns they have expired.
	if !p.Expires.IsZero() && !now.Before(p.Expires) {
		e := g.proto.expiredToken()
		return Principal{}, &e
	}
	return p, nil
}

func signed(a authHeader, name string) bool {
	for _, h := range a.signedHeaders {
		if h == name {
			return true
		}
	}
	return false
}
