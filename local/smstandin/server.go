package smstandin

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/local/awswire"
)

// The awsJson1_1 protocol of Secrets Manager: every call is a POST to "/"
// naming its operation in X-Amz-Target.
const (
	TargetPrefix = "secretsmanager."
	ContentType  = awswire.ContentTypeJSON11
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
	// bodyTimeout bounds the arrival of a body (awswire.Service.BodyTimeout).
	bodyTimeout time.Duration

	api      *awswire.Service
	requests awswire.Recorder[Request]
	faults   awswire.Faults

	mu      sync.Mutex
	secrets map[string]*secret // by name
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
	s.api = s.newAPI()
	return s, nil
}

// ServeHTTP serves the Secrets Manager API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.api.ServeHTTP(w, r) }

// newAPI is the stand-in's awsJson service: its checks, in Secrets
// Manager's order, its operations, its faults and its request record.
func (s *Server) newAPI() *awswire.Service {
	return &awswire.Service{
		Name: "Secrets Manager", TargetPrefix: TargetPrefix, ContentType: ContentType,
		MaxBody: maxBody, BodyTimeout: s.bodyTimeout, Now: s.now,
		Admit: func(r *http.Request) (string, *awswire.Error) {
			akid, authErr := s.checkAuth(r.Header)
			switch {
			case r.Method != http.MethodPost || r.URL.Path != "/":
				return akid, awswire.Errorf(404, "UnknownOperationException", "Secrets Manager takes POST to / only")
			case authErr != nil:
				return akid, (*awswire.Error)(authErr)
			case !strings.HasPrefix(r.Header.Get("Content-Type"), ContentType):
				return akid, awswire.Errorf(400, "SerializationException", "Content-Type must be %s", ContentType)
			}
			return akid, nil
		},
		Ops: map[string]awswire.Handler{
			OpCreateSecret:             op(s.createSecret),
			OpGetSecretValue:           op(s.getSecretValue),
			OpPutSecretValue:           op(s.putSecretValue),
			OpDescribeSecret:           op(s.describeSecret),
			OpListSecrets:              op(s.listSecrets),
			OpUpdateSecretVersionStage: op(s.updateSecretVersionStage),
			OpDeleteSecret:             op(s.deleteSecret),
			OpGetRandomPassword:        op(s.getRandomPassword),
		},
		Faults: &s.faults,
		Record: s.record,
	}
}

// op is the handler of an operation served by f, whose errors are the Go
// API's.
func op[In, Out any](f func(*In) (Out, *Error)) awswire.Handler {
	return awswire.Op(func(in *In) (Out, *awswire.Error) {
		out, e := f(in)
		return out, (*awswire.Error)(e)
	})
}

// record keeps what a request was and how it was answered, never its
// body (which may carry a secret value), and logs it.
func (s *Server) record(x awswire.Exchange) {
	rec := Request{Op: x.Op, SecretID: secretIDOf(x.Body), AccessKeyID: x.Caller, Status: x.Status, Code: x.Code, Time: x.Time}
	if rec.Code != "" {
		s.log.Info("secretsmanager call refused", "op", rec.Op, "secret", s.logID(rec.SecretID), "code", rec.Code)
	} else {
		s.log.Debug("secretsmanager call", "op", rec.Op, "secret", s.logID(rec.SecretID))
	}
	s.requests.Add(rec)
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
type Error awswire.Error

func (e *Error) Error() string { return "secretsmanager: " + e.Code + ": " + e.Message }

func errf(status int, code, format string, args ...any) *Error {
	return (*Error)(awswire.Errorf(status, code, format, args...))
}

// Requests returns every request received so far, in order; with ops,
// only those of these operations.
func (s *Server) Requests(ops ...string) []Request {
	return s.requests.All(func(r Request) bool { return len(ops) == 0 || slices.Contains(ops, r.Op) })
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
	s.faults.Inject(awswire.Fault{Op: f.Op, Times: f.Times, Err: &awswire.Error{Status: f.Status, Code: f.Code, Message: f.Message}})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() { s.faults.Clear() }
