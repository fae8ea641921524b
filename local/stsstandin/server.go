package stsstandin

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/iampolicy"
)

// The awsQuery protocol of STS.
const (
	Version = "2011-06-15"
	// Namespace is the XML namespace of every answer.
	Namespace = iamgate.STSNamespace
	// SigningName is the service in a SigV4 credential scope.
	SigningName = "sts"
)

// Defaults and limits.
const (
	DefaultAccount = "000000000000"
	// DefaultMaxSessionDuration is a role's MaxSessionDuration when the
	// role does not set one, as in IAM.
	DefaultMaxSessionDuration = time.Hour
	// DefaultDuration is a session's length when the request names none.
	DefaultDuration = time.Hour
	// ChainedMax is the longest session AWS grants a role session that
	// assumes a role (role chaining), whatever the role allows.
	ChainedMax = time.Hour
	// PackedBudget is the size, in characters of the policy with
	// insignificant whitespace removed, that counts as 100 % of the packed
	// policy limit. AWS compresses the policy into a binary form whose
	// limit it does not publish; this linear measure is an assumption,
	// chosen so that a policy well within the 2,048-character plain limit
	// can still be refused with PackedPolicyTooLarge, as on AWS.
	PackedBudget = 1800
	// maxBody bounds a request: the largest parameters with room to spare.
	maxBody = 64 << 10
	// forgetAfter is how long an expired session is still recognized.
	forgetAfter = 24 * time.Hour
)

// Role is what the stand-in needs to know of one IAM role.
type Role struct {
	ARN   string // arn:aws:iam::<account>:role/<path><name>
	Trust iampolicy.TrustPolicy
	// MaxSessionDuration bounds DurationSeconds (IAM: 1 to 12 hours);
	// zero means DefaultMaxSessionDuration.
	MaxSessionDuration time.Duration
	// Policies are the role's identity-based policies, which the issued
	// session carries.
	Policies []iampolicy.Policy
}

// Roles finds a role by ARN; ok is false for a role that does not exist.
type Roles func(arn string) (Role, bool)

// Server is the stand-in; it is an http.Handler and an iamgate.Principals.
type Server struct {
	roles   Roles
	account string
	now     func() time.Time
	log     *slog.Logger
	onIssue func(iamgate.Principal)

	mu       sync.Mutex
	sessions map[string]iamgate.Principal // by access key id
}

// Option configures a Server.
type Option func(*Server)

// WithAccount sets the account (default 000000000000): the one issued
// session ARNs name and the caller's account root stands for.
func WithAccount(a string) Option { return func(s *Server) { s.account = a } }

// WithClock sets the clock expirations are computed with.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithLogger sets the logger (default: discard). Lines name roles and
// sessions, never keys or tokens.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithOnIssue calls f with each issued session, as it is issued (to
// count them, or to add them to a registry of one's own). f must not
// block, and must not log the principal's secret or token.
func WithOnIssue(f func(iamgate.Principal)) Option { return func(s *Server) { s.onIssue = f } }

// New returns a stand-in that assumes the roles roles knows.
func New(roles Roles, opts ...Option) (*Server, error) {
	if roles == nil {
		return nil, fmt.Errorf("stsstandin: New needs a Roles function")
	}
	s := &Server{roles: roles, account: DefaultAccount, now: time.Now,
		log: slog.New(slog.DiscardHandler), sessions: map[string]iamgate.Principal{}}
	for _, o := range opts {
		o(s)
	}
	if len(s.account) != 12 || strings.Trim(s.account, "0123456789") != "" {
		return nil, fmt.Errorf("stsstandin: account %q is not 12 digits", s.account)
	}
	if s.now == nil || s.log == nil {
		return nil, fmt.Errorf("stsstandin: the clock and the logger must be set")
	}
	return s, nil
}

// Lookup implements iamgate.Principals: the session an access key id was
// issued to, expired or not (the gate refuses an expired one).
func (s *Server) Lookup(accessKeyID string) (iamgate.Principal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.sessions[accessKeyID]
	return p, ok
}

// caller is the authenticated caller, as the gate names it.
type caller struct {
	role, session, account, region string
	tls                            bool
}

func (c caller) sessionARN() string {
	return iamgate.Principal{RoleARN: c.role, SessionName: c.session}.SessionARN()
}

// ServeHTTP serves the STS API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := callerOf(r.Header)
	if !ok {
		s.log.Warn("stsstandin: a request without the IAM gate's caller header: serve the stand-in only behind iamgate")
		writeError(w, errMissingAuth)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	_ = r.Body.Close()
	if err != nil || len(body) > maxBody {
		writeError(w, apiError{http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "the request body is too large or could not be read"})
		return
	}
	mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	if r.Method != http.MethodPost || strings.TrimSpace(mt) != "application/x-www-form-urlencoded" || r.URL.RawQuery != "" {
		writeError(w, apiError{http.StatusBadRequest, "InvalidAction", "the STS stand-in serves only form-encoded POSTs without a query string"})
		return
	}
	f, err := url.ParseQuery(string(body))
	if err != nil {
		writeError(w, apiError{http.StatusBadRequest, "MalformedQueryString", "the request body is not a form"})
		return
	}
	for k, v := range f {
		if len(v) > 1 {
			writeError(w, validation("parameter "+k+" is given more than once"))
			return
		}
	}
	action, version := f.Get("Action"), f.Get("Version")
	if version != Version {
		writeError(w, apiError{http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, version)})
		return
	}
	switch action {
	case "AssumeRole":
		out, e := s.assumeRole(c, f)
		if e != nil {
			s.log.Info("stsstandin: AssumeRole refused", "caller", c.sessionARN(), "role", f.Get("RoleArn"), "code", e.code)
			writeError(w, *e)
			return
		}
		writeXML(w, out.RequestID, out)
	case "GetCallerIdentity":
		if e := onlyParams(f); e != nil {
			writeError(w, *e)
			return
		}
		out := getCallerIdentityResponse{Xmlns: Namespace, RequestID: awswire.UUID()}
		out.Result.Arn = c.sessionARN()
		out.Result.UserID = roleID(c.role) + ":" + c.session
		out.Result.Account = c.account
		writeXML(w, out.RequestID, out)
	default:
		writeError(w, apiError{http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, version)})
	}
}

// callerOf reads the gate's caller header.
func callerOf(h http.Header) (caller, bool) {
	v, err := url.ParseQuery(h.Get(iamgate.CallerHeader))
	if err != nil {
		return caller{}, false
	}
	c := caller{role: v.Get("role"), session: v.Get("session"), account: v.Get("account"), region: v.Get("region"), tls: v.Get("tls") == "true"}
	return c, c.role != "" && c.session != "" && c.account != ""
}

// issue makes a session of role for sessionName and remembers it.
func (s *Server) issue(role Role, sessionName string, d time.Duration, sessionPolicies []iampolicy.Policy) iamgate.Principal {
	now := s.now()
	p := iamgate.Principal{
		AccessKeyID:     "ASIA" + randomBase32(10)[:16],
		SecretAccessKey: base64.StdEncoding.EncodeToString(randomBytes(30)),
		SessionToken:    base64.StdEncoding.EncodeToString(randomBytes(96)),
		RoleARN:         role.ARN,
		SessionName:     sessionName,
		Policies:        role.Policies,
		SessionPolicies: sessionPolicies,
		Expires:         now.Add(d).Truncate(time.Second),
	}
	s.mu.Lock()
	for k, old := range s.sessions {
		if now.Sub(old.Expires) > forgetAfter {
			delete(s.sessions, k)
		}
	}
	s.sessions[p.AccessKeyID] = p
	s.mu.Unlock()
	s.log.Info("stsstandin: role assumed", "role", role.ARN, "session", sessionName, "expires", p.Expires)
	if s.onIssue != nil {
		s.onIssue(p)
	}
	return p
}

// roleID is the role's unique id as AWS shows it (AROA + 17 characters),
// derived from its ARN so that it is stable across restarts.
func roleID(arn string) string {
	sum := sha256.Sum256([]byte(arn))
	return "AROA" + base32.StdEncoding.EncodeToString(sum[:])[:17]
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func randomBase32(n int) string {
	return base32.StdEncoding.EncodeToString(randomBytes(n))
}

func writeXML(w http.ResponseWriter, id string, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		writeError(w, apiError{http.StatusInternalServerError, "InternalFailure", "could not encode the answer"})
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", id)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}
