package awslocal

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/connlimit"
)

// principals are the roles' sessions: one access key each, as Lambda and
// ECS hand a role's temporary credentials to what runs with it.
type principals struct {
	mu     sync.Mutex
	byKey  map[string]iamgate.Principal
	byRole map[string]iamgate.Principal
}

func newPrincipals() *principals {
	return &principals{byKey: map[string]iamgate.Principal{}, byRole: map[string]iamgate.Principal{}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (p *principals) add(r *role) {
	pr := iamgate.Principal{
		AccessKeyID:     "ASIA" + strings.ToUpper(randomHex(8)),
		SecretAccessKey: randomHex(20), SessionToken: randomHex(32),
		RoleARN: r.Arn, SessionName: r.Name, Policies: r.Policies,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byKey[pr.AccessKeyID] = pr
	p.byRole[r.Arn] = pr
}

// Lookup implements iamgate.Principals.
func (p *principals) Lookup(key string) (iamgate.Principal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.byKey[key]
	return pr, ok
}

func (p *principals) role(arn string) (iamgate.Principal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.byRole[arn]
	return pr, ok
}

// clientOptions are an SDK client's options for a role's session, trusting
// the stack's CA.
func (s *Stack) clientOptions(p iamgate.Principal, caPEM []byte) secretsmanager.Options {
	return secretsmanager.Options{Region: localRegion,
		Credentials: credentials.NewStaticCredentialsProvider(p.AccessKeyID, p.SecretAccessKey, p.SessionToken),
		HTTPClient:  tlsClient(caPEM)}
}

func tlsClient(caPEM []byte) *http.Client {
	pool, _ := x509Pool(caPEM)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// serveTLS serves h on ln over TLS.
func (s *Stack) serveTLS(ln net.Listener, h http.Handler, cfg *tls.Config) {
	// No write deadline: SQS's ReceiveMessage holds up to 20 s. A body
	// must arrive within the read deadline (cleared once it is read).
	srv := &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	s.servers = append(s.servers, srv)
	lim := connlimit.Wrap(ln, connlimit.Limits{}, s.cfg.Options.Logger)
	lim.Install(srv)
	go srv.Serve(tls.NewListener(lim, cfg))
}

// handlerClient is an HTTP client that serves every request with h in
// process: the deployment's own calls to a stand-in.
func handlerClient(h http.Handler) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result(), nil
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
