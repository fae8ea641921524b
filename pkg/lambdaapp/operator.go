package lambdaapp

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/operator"
)

// OperatorHandler is the operator function's handler: the operator API
// and console (package operator) under /operator/, opened by the operator
// token alone (kitchn's token and the workers' credentials open nothing
// here). The token is its own secret (GALLEY_OPERATOR_TOKEN_SECRET_ARN),
// read at most once per Config.TokenCache, so a put-secret-value takes
// effect within it. API Gateway in front of Lambda cannot stream, so the
// events are followed by long poll only (operator.WithPollOnly), woken by
// the SQS doorbell's ring on each append.
func (a *App) OperatorHandler() (http.Handler, error) {
	if a.Config.Function != Operator {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the %s function serves no operator API", a.Config.Function)
	}
	events, ok := a.Store.(operator.Events)
	if !ok {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the store keeps no worker event log")
	}
	var src TokenSource
	if arn := a.Config.OperatorTokenSecretArn; arn != "" {
		sm, err := a.secrets()
		if err != nil {
			return nil, err
		}
		src = SecretTokens(sm, arn)
	} else {
		src = FileTokens(a.Config.OperatorTokenFile)
	}
	t := &operatorTokens{src: src, maxAge: a.Config.TokenCache, now: a.clock.Now,
		build: func(token []byte) http.Handler {
			return operator.New(token, a.Service, events, a.Store, a.Doorbell, a.Log, operator.WithPollOnly())
		}}
	return a.flushing(Bounded(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !operator.Owns(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		h, err := t.handler(r.Context())
		if err != nil {
			a.Log.Error("cannot read the operator token", "err", err.Error())
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"the operator token cannot be read now"}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	}))), nil
}

// operatorTokens keeps the operator handler of the token's current value:
// a new value (a rotation) makes a new handler, whose token fingerprint
// differs from the one the sessions in the store were issued under, so a
// rotation ends the sessions.
type operatorTokens struct {
	src    TokenSource
	maxAge time.Duration
	now    func() time.Time
	build  func(token []byte) http.Handler

	mu      sync.Mutex
	token   []byte
	h       http.Handler
	fetched time.Time
}

func (t *operatorTokens) handler(ctx context.Context) (http.Handler, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h != nil && t.now().Sub(t.fetched) < t.maxAge {
		return t.h, nil
	}
	tokens, err := t.src(ctx)
	if err == nil && len(tokens) == 0 {
		err = galleyerr.Errorf(galleyerr.Unavailable, "the operator token is empty")
	}
	if err != nil {
		if t.h != nil {
			return t.h, nil // the last value, until the secret can be read again
		}
		return nil, err
	}
	// Only the current value: the operator holds one token, and the
	// previous one should stop opening the API once replaced.
	if cur := tokens[0]; t.h == nil || !bytes.Equal(cur, t.token) {
		t.token, t.h = cur, t.build(cur)
	}
	t.fetched = t.now()
	return t.h, nil
}
