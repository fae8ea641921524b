package smstandin

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The awsJson1_1 protocol of Secrets Manager: every call is a POST to "/"
// naming its operation in X-Amz-Target.
const (
	TargetPrefix = "secretsmanager."
	ContentType  = "application/x-amz-json-1.1"
	// SigningName is the service in a SigV4 credential scope.
	SigningName = "secretsmanager"
)

// Operations the stand-in serves.
const (
	OpCreateSecret             = "CreateSecret"
	OpGetSecretValue           = "GetSecretValue"
	OpPutSecretValue           = "PutSecretValue"
	OpDescribeSecret           = "DescribeSecret"
	OpListSecrets              = "ListSecrets"
	OpUpdateSecretVersionStage = "UpdateSecretVersionStage"
	OpDeleteSecret             = "DeleteSecret"
	OpGetRandomPassword        = "GetRandomPassword"
)

// Defaults of the options.
const (
	DefaultRegion  = "us-east-1"
	DefaultAccount = "000000000000"
	// MaxSecretSize is AWS's limit on a SecretString or SecretBinary, in
	// bytes.
	MaxSecretSize = 65536
	// maxBody bounds a request body: a largest secret, base64 encoded or
	// JSON-escaped, with room for the other members.
	maxBody = 8*MaxSecretSize + 64<<10
	// DefaultBodyTimeout is how long a request's body may take to arrive
	// once its headers have; AWS documents no figure.
	DefaultBodyTimeout = 15 * time.Second
)

// Server is the stand-in; it is an http.Handler. Create it with New.
type Server struct {
	region  string
	account string
	log     *slog.Logger
	now     func() time.Time
	// bodyTimeout bounds the arrival of a body (see readBody).
	bodyTimeout time.Duration

	mu       sync.Mutex
	secrets  map[string]*secret // by name
	requests []Request
	faults   []*Fault
}

// Request is one request the stand-in received. It holds no body: a body
// may carry a secret value.
type Request struct {
	Op string // from X-Amz-Target, without the prefix
	// SecretID is SecretId, or Name for CreateSecret, as sent; empty for
	// other operations. Log lines name the ARN it resolves to instead.
	SecretID string
	// AccessKeyID is the caller's, from the Authorization header's
	// credential; empty when the header has none.
	AccessKeyID string
	Status      int    // the status it was answered with
	Code        string // the error code, if it failed
	Time        time.Time
}

// Option configures a Server.
type Option func(*Server)

// WithRegion and WithAccount set what the ARNs name and which credential
// scope is accepted.
func WithRegion(region string) Option   { return func(s *Server) { s.region = region } }
func WithAccount(account string) Option { return func(s *Server) { s.account = account } }

// WithLogger sets the logger; the default discards. Lines name operations
// and secrets, never values.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithClock sets the clock, for tests of recovery windows; the default is
// time.Now.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithBodyTimeout sets how long a request's body may take to arrive once
// its headers have (default DefaultBodyTimeout); a slower one is refused
// and its connection closed.
func WithBodyTimeout(d time.Duration) Option { return func(s *Server) { s.bodyTimeout = d } }

// New returns a stand-in holding no secret.
func New(opts ...Option) (*Server, error) {
	s := &Server{
		region: DefaultRegion, account: DefaultAccount,
		log: slog.New(slog.DiscardHandler), now: time.Now, bodyTimeout: DefaultBodyTimeout,
		secrets: map[string]*secret{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.region == "" || s.account == "" || s.log == nil || s.now == nil {
		return nil, fmt.Errorf("smstandin: the region, account, logger and clock must be set")
	}
	if s.bodyTimeout <= 0 {
		return nil, fmt.Errorf("smstandin: the body timeout must be positive")
	}
	if len(s.account) != 12 || strings.Trim(s.account, "0123456789") != "" {
		return nil, fmt.Errorf("smstandin: account %q is not 12 digits", s.account)
	}
	return s, nil
}

// ServeHTTP serves the Secrets Manager API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Amzn-Requestid", newUUID())
	target := r.Header.Get("X-Amz-Target")
	op, _ := strings.CutPrefix(target, TargetPrefix)
	body, err := s.readBody(w, r)
	akid, authErr := s.checkAuth(r.Header)
	rec := Request{Op: op, SecretID: secretIDOf(body), AccessKeyID: akid, Time: s.now()}
	answer := func(status int, v any) {
		rec.Status = status
		s.mu.Lock()
		s.requests = append(s.requests, rec)
		s.mu.Unlock()
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", ContentType)
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}
	fail := func(e *Error) {
		rec.Code = e.Code
		w.Header().Set("X-Amzn-Errortype", e.Code)
		s.log.Info("secretsmanager call refused", "op", op, "secret", s.logID(rec.SecretID), "code", e.Code)
		answer(e.status(), map[string]string{"__type": e.Code, "message": e.Message})
	}
	switch {
	case err != nil:
		fail(errf(400, "SerializationException", "cannot read the body"))
		return
	case len(body) > maxBody:
		fail(errf(413, "SerializationException", "the body is larger than %d bytes", maxBody))
		return
	case r.Method != http.MethodPost || r.URL.Path != "/":
		fail(errf(404, "UnknownOperationException", "Secrets Manager takes POST to / only"))
		return
	case authErr != nil:
		fail(authErr)
		return
	case !strings.HasPrefix(r.Header.Get("Content-Type"), ContentType):
		fail(errf(400, "SerializationException", "Content-Type must be %s", ContentType))
		return
	case !strings.HasPrefix(target, TargetPrefix):
		fail(errf(400, "UnknownOperationException", "no Secrets Manager operation named in X-Amz-Target"))
		return
	}
	if f := s.fault(op); f != nil {
		status := f.Status
		if status == 0 {
			status = 400
		}
		fail(&Error{Status: status, Code: f.Code, Message: f.Message})
		return
	}
	out, aerr := s.dispatch(op, body)
	if aerr != nil {
		fail(aerr)
		return
	}
	s.log.Debug("secretsmanager call", "op", op, "secret", s.logID(rec.SecretID))
	answer(200, out)
}

// readBody reads at most maxBody+1 bytes of r's body, which must arrive
// within the body timeout: a client that sends headers and then trickles
// its body, or never sends it, is cut off rather than waited for. The
// deadline is left in place: net/http lifts it when it has read a body to
// its end, and a body cut short must stay cut off (net/http reads what
// remains of a small one before answering). A body behind a handler that
// cannot set deadlines (a wrapper without Unwrap) is bounded by its
// server's limits only.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
	return io.ReadAll(io.LimitReader(r.Body, maxBody+1))
}

// dispatch decodes the operation's input and serves it.
func (s *Server) dispatch(op string, body []byte) (any, *Error) {
	switch op {
	case OpCreateSecret:
		return serve(body, s.createSecret)
	case OpGetSecretValue:
		return serve(body, s.getSecretValue)
	case OpPutSecretValue:
		return serve(body, s.putSecretValue)
	case OpDescribeSecret:
		return serve(body, s.describeSecret)
	case OpListSecrets:
		return serve(body, s.listSecrets)
	case OpUpdateSecretVersionStage:
		return serve(body, s.updateSecretVersionStage)
	case OpDeleteSecret:
		return serve(body, s.deleteSecret)
	case OpGetRandomPassword:
		return serve(body, s.getRandomPassword)
	}
	return nil, errf(400, "UnknownOperationException", "the stand-in does not serve %s", op)
}

func serve[In, Out any](body []byte, f func(*In) (Out, *Error)) (any, *Error) {
	in := new(In)
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, in); err != nil {
		// The decoder's message may quote the body: say only where.
		return nil, errf(400, "SerializationException", "the body is not the operation's JSON: %s", where(err))
	}
	out, aerr := f(in)
	if aerr != nil {
		return nil, aerr
	}
	return out, nil
}

// where describes a JSON decoding error without quoting the input.
func where(err error) string {
	switch e := err.(type) {
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("member %s is not a %s", e.Field, e.Type)
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at offset %d", e.Offset)
	}
	return "malformed"
}

// secretIDOf reads the secret a request names, for its record.
func secretIDOf(body []byte) string {
	var ids struct{ SecretId, Name string }
	if json.Unmarshal(body, &ids) != nil {
		return ""
	}
	if ids.SecretId != "" {
		return ids.SecretId
	}
	return ids.Name
}

// logID is how a log line names the secret a request named: its ARN when
// it resolves, else only the id's length, since a misconfigured caller may
// send a value where an id belongs.
func (s *Server) logID(id string) string {
	if id == "" {
		return ""
	}
	if arn, ok := s.Resolve(id); ok {
		return arn
	}
	return fmt.Sprintf("(an unknown secret id of %d bytes)", len(id))
}

// checkAuth refuses a request that carries no SigV4 Authorization header,
// or one not scoped to this region and service, as AWS does, and returns
// the caller's access key id. Verifying the signature is the IAM gate's
// work.
func (s *Server) checkAuth(h http.Header) (string, *Error) {
	auth := h.Get("Authorization")
	if auth == "" {
		return "", errf(400, "MissingAuthenticationTokenException", "Request is missing Authentication Token")
	}
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", errf(400, "IncompleteSignature", "Authorization header is not of the AWS4-HMAC-SHA256 scheme")
	}
	params := map[string]string{}
	for _, p := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		params[k] = v
	}
	var missing []string
	for _, k := range []string{"Credential", "Signature", "SignedHeaders"} {
		if params[k] == "" {
			missing = append(missing, fmt.Sprintf("Authorization header requires '%s' parameter.", k))
		}
	}
	if h.Get("X-Amz-Date") == "" && h.Get("Date") == "" {
		missing = append(missing, "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
	}
	if len(missing) > 0 {
		return "", errf(400, "IncompleteSignature", "%s", strings.Join(missing, " "))
	}
	scope := strings.Split(params["Credential"], "/")
	if len(scope) != 5 || scope[0] == "" || scope[4] != "aws4_request" {
		return "", errf(400, "IncompleteSignature", "Credential should be scoped to a valid region.")
	}
	if scope[2] != s.region {
		return scope[0], errf(400, "InvalidSignatureException", "Credential should be scoped to a valid region.")
	}
	if scope[3] != SigningName {
		return scope[0], errf(400, "InvalidSignatureException", "Credential should be scoped to correct service: '%s'.", SigningName)
	}
	return scope[0], nil
}

// Error is an error answer: an AWS error code and message, sent as HTTP 400
// (unless Status says otherwise) with {"__type", "message"}. The Go API
// returns the same errors. Messages never hold a secret value.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return "secretsmanager: " + e.Code + ": " + e.Message }

func (e *Error) status() int {
	if e.Status == 0 {
		return 400
	}
	return e.Status
}

func errf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Requests returns every request received so far, in order; with ops,
// only those of these operations.
func (s *Server) Requests(ops ...string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if len(ops) == 0 || contains(ops, r.Op) {
			out = append(out, r)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// Fault is an answer the stand-in gives instead of serving a call.
type Fault struct {
	// Op is the operation it answers, such as "GetSecretValue"; empty: any.
	Op string
	// The call fails with error Code (such as "ThrottlingException" or
	// "InternalServiceError") and Message, with HTTP Status (400 if 0).
	Code, Message string
	Status        int
	// Times is how many calls it answers; 0 means every call until
	// ClearFaults.
	Times int
}

// Inject adds a fault; faults answer in the order injected.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// fault returns the fault that answers a call of op, if any, counting it.
func (s *Server) fault(op string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Op != "" && f.Op != op {
			continue
		}
		answer := *f
		if f.Times > 0 {
			if f.Times--; f.Times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return &answer
	}
	return nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
