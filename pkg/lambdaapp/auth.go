package lambdaapp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/galleyerr"
)

// SecretsAPI is the part of Secrets Manager galley calls;
// *secretsmanager.Client implements it.
type SecretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// TokenSource returns the bearer tokens valid now: during a rotation, the
// current one and the previous one.
type TokenSource func(ctx context.Context) ([][]byte, error)

// SecretTokens reads the token secret arn from Secrets Manager: its
// AWSCURRENT version and, while a rotation is under way, its AWSPREVIOUS
// one, so kitchn's old token keeps working until its operator switches.
func SecretTokens(client SecretsAPI, arn string) TokenSource {
	return func(ctx context.Context) ([][]byte, error) {
		cur, err := secretVersion(ctx, client, arn, "AWSCURRENT")
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return nil, galleyerr.Errorf(galleyerr.Unavailable, "the bearer token secret has no current version")
		}
		tokens := [][]byte{cur}
		prev, err := secretVersion(ctx, client, arn, "AWSPREVIOUS")
		if err != nil {
			return nil, err
		}
		if prev != nil {
			tokens = append(tokens, prev)
		}
		return tokens, nil
	}
}

// secretVersion returns one version's value, or nil when the secret has no
// version with that stage (AWSPREVIOUS before the first rotation). Errors
// name the stage and the API's error code, never the value.
func secretVersion(ctx context.Context, client SecretsAPI, arn, stage string) ([]byte, error) {
	out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{
		SecretId: aws.String(arn), VersionStage: aws.String(stage),
	})
	var nf *smtypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		if stage == "AWSCURRENT" {
			return nil, galleyerr.E(galleyerr.Unavailable, "secret not found", err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, galleyerr.E(galleyerr.Unavailable, "read secret version "+stage, err)
	}
	var v []byte
	switch {
	case out.SecretString != nil:
		v = []byte(strings.TrimSpace(*out.SecretString))
	default:
		v = []byte(strings.TrimSpace(string(out.SecretBinary)))
	}
	if len(v) == 0 {
		return nil, nil
	}
	return v, nil
}

// FileTokens reads the token from a file of mode 600, as the local server
// does: the aws-local stack's stand-in for Secrets Manager. Replacing the
// file is a rotation; the previous token is not kept.
func FileTokens(path string) TokenSource {
	return func(context.Context) ([][]byte, error) {
		b, err := readSecretFile(path)
		if err != nil {
			return nil, err
		}
		return [][]byte{b}, nil
	}
}

// readSecretFile reads a secret from a file only its owner may read. Errors
// name the file, never its content.
func readSecretFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, galleyerr.E(galleyerr.Unavailable, "secret file", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "%s is readable by others (mode %v)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, galleyerr.E(galleyerr.Unavailable, "secret file", err)
	}
	v := []byte(strings.TrimSpace(string(b)))
	if len(v) == 0 {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "%s is empty", path)
	}
	return v, nil
}

// CachedAuthenticator checks kitchn's bearer token against the tokens of a
// TokenSource, cached for a bounded age so that a rotation takes effect
// within MaxAge without a Secrets Manager call per request:
//
//   - tokens older than MaxAge are fetched again before a check, so a token
//     that stopped being current or previous is refused at most MaxAge after;
//   - a token that matches nothing triggers one early fetch when the cache
//     is at least MinRefresh old, so a freshly rotated token works within
//     MinRefresh, while a flood of bad tokens costs at most one fetch per
//     MinRefresh;
//   - when a fetch fails, the last tokens stay good for Grace past MaxAge
//     (Secrets Manager's brief outage does not refuse kitchn), and fetches
//     are retried at most once per second; past that, every token is refused.
//
// Comparisons are constant-time; no token is ever logged.
type CachedAuthenticator struct {
	src        TokenSource
	maxAge     time.Duration
	minRefresh time.Duration
	grace      time.Duration
	now        func() time.Time
	log        *slog.Logger

	mu      sync.Mutex
	tokens  [][]byte
	fetched time.Time // when tokens were fetched; zero: never
	tried   time.Time // the last fetch attempt
}

// AuthOption configures a CachedAuthenticator.
type AuthOption func(*CachedAuthenticator)

// WithMaxAge bounds the cache's age (default DefaultTokenCache). Zero
// fetches on every check.
func WithMaxAge(d time.Duration) AuthOption { return func(a *CachedAuthenticator) { a.maxAge = d } }

// WithMinRefresh sets the least age at which a refused token triggers an
// early fetch (default 30 s).
func WithMinRefresh(d time.Duration) AuthOption {
	return func(a *CachedAuthenticator) { a.minRefresh = d }
}

// WithGrace sets how long past MaxAge the last tokens serve while fetches
// fail (default 1 min).
func WithGrace(d time.Duration) AuthOption { return func(a *CachedAuthenticator) { a.grace = d } }

// WithAuthClock sets the clock (tests use a fake).
func WithAuthClock(now func() time.Time) AuthOption {
	return func(a *CachedAuthenticator) { a.now = now }
}

// WithAuthLogger sets where fetch failures are logged.
func WithAuthLogger(l *slog.Logger) AuthOption { return func(a *CachedAuthenticator) { a.log = l } }

// NewCachedAuthenticator returns an authenticator over src.
func NewCachedAuthenticator(src TokenSource, opts ...AuthOption) *CachedAuthenticator {
	a := &CachedAuthenticator{src: src, maxAge: DefaultTokenCache, minRefresh: 30 * time.Second,
		grace: time.Minute, now: time.Now, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(a)
	}
	return a
}

var _ api.Authenticator = (*CachedAuthenticator)(nil)

// Authenticate reports whether token is a valid bearer token now.
func (a *CachedAuthenticator) Authenticate(ctx context.Context, token string) bool {
	if token == "" {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if a.fetched.IsZero() || now.Sub(a.fetched) >= a.maxAge {
		a.refresh(ctx, now)
	}
	if a.usable(now) && match(a.tokens, token) {
		return true
	}
	if !a.fetched.IsZero() && now.Sub(a.fetched) < a.minRefresh {
		return false
	}
	if a.refresh(ctx, now) {
		return match(a.tokens, token)
	}
	return false
}

// Prefetch fetches the tokens now (a function does during its init, which
// Lambda runs before the first request); a failure is retried on use.
func (a *CachedAuthenticator) Prefetch(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh(ctx, a.now())
}

// refresh fetches the tokens; it reports whether it got them. Failed
// attempts are spaced a second apart.
func (a *CachedAuthenticator) refresh(ctx context.Context, now time.Time) bool {
	if !a.tried.IsZero() && now.Sub(a.tried) < time.Second && a.tried.After(a.fetched) {
		return false
	}
	a.tried = now
	tokens, err := a.src(ctx)
	if err != nil {
		// The error names the secret's stage and the API's code, never a
		// value.
		a.log.Warn("bearer token refresh failed", "err", err.Error())
		return false
	}
	a.tokens, a.fetched = tokens, now
	return true
}

// usable reports whether the cached tokens may still be used.
func (a *CachedAuthenticator) usable(now time.Time) bool {
	return !a.fetched.IsZero() && now.Sub(a.fetched) < a.maxAge+a.grace
}

// match compares token with each candidate in constant time, and checks
// all of them, so timing tells nothing about which matched.
func match(candidates [][]byte, token string) bool {
	t := []byte(token)
	ok := 0
	for _, c := range candidates {
		ok |= subtle.ConstantTimeCompare(c, t)
	}
	return ok == 1
}

// ReadSecret reads the current value of a Secrets Manager secret (the
// worker-credential secret, read once at a cold start).
func ReadSecret(ctx context.Context, client SecretsAPI, arn string) ([]byte, error) {
	v, err := secretVersion(ctx, client, arn, "AWSCURRENT")
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "secret %s has an empty current value", redactArn(arn))
	}
	return v, nil
}

// redactArn keeps an ARN's name for messages; ARNs are not secret, but a
// misconfigured variable might hold a value instead of a name.
func redactArn(arn string) string {
	if strings.HasPrefix(arn, "arn:") {
		return arn
	}
	return fmt.Sprintf("(a value of %d bytes that is not an ARN)", len(arn))
}
