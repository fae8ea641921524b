package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Invoker invokes one function synchronously with a payload and returns
// its result: what Lambda's Invoke API returns for RequestResponse.
type Invoker interface {
	Invoke(ctx context.Context, payload []byte) ([]byte, error)
}

// ErrorKind classifies a failed invocation the way API Gateway tells them
// apart.
type ErrorKind int

const (
	// FunctionError: the function ran and failed (an error returned, a
	// panic, an exit, Lambda's own timeout "Task timed out").
	FunctionError ErrorKind = iota + 1
	// Unreachable: the invoke never reached a function (the emulator is
	// down, or Lambda refused the payload).
	Unreachable
	// TooLarge: Lambda refused the request or the response payload size.
	TooLarge
	// Throttled: Lambda refused the invoke (TooManyRequestsException) because
	// the function already runs its reserved concurrency; API Gateway
	// answers it 500 {"message":"Internal Server Error"}.
	Throttled
)

// InvokeError is a failed invocation.
type InvokeError struct {
	Kind    ErrorKind
	Type    string // the function error's errorType, when it gave one
	Message string
}

func (e *InvokeError) Error() string {
	if e.Type != "" {
		return e.Type + ": " + e.Message
	}
	return e.Message
}

// Lambda's payload limits for synchronous invocations.
const (
	MaxInvokePayload   = 6 << 20
	MaxResponsePayload = 6 << 20
)

// InvocationsPath is the emulator's (and Lambda's) invoke path.
const InvocationsPath = "/2015-03-31/functions/function/invocations"

// Emulator invokes a function running under the Lambda Runtime Interface
// Emulator at URL (http://host:port). The emulator serves one invocation at
// a time (two at once crash it): Emulator serializes its own, and Pool
// spreads a function's invocations over several.
type Emulator struct {
	URL    string
	Client *http.Client
	// MaxDuration bounds one invocation from the emulator's side, past the
	// function's own timeout (the emulator answers "Task timed out" then).
	MaxDuration time.Duration

	mu sync.Mutex
}

// Invoke sends payload and waits for the result. When ctx ends first, it
// returns ctx's error at once, but the emulator stays busy (and the lock
// held) until the function finishes: a second invoke must not reach it
// before then.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	if len(payload) > MaxInvokePayload {
		return nil, &InvokeError{Kind: TooLarge, Type: "RequestEntityTooLargeException",
			Message: fmt.Sprintf("request payload of %d bytes exceeds %d", len(payload), MaxInvokePayload)}
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if ctx.Err() != nil { // the caller gave up while waiting for the lock
			done <- result{nil, ctx.Err()}
			return
		}
		b, err := e.invoke(payload)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *Emulator) invoke(payload []byte) ([]byte, error) {
	max := e.MaxDuration
	if max <= 0 {
		max = 15 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(e.URL, "/")+InvocationsPath, bytes.NewReader(payload))
	if err != nil {
		return nil, &InvokeError{Kind: Unreachable, Message: err.Error()}
	}
	client := e.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, &InvokeError{Kind: Unreachable, Message: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponsePayload+1))
	if err != nil {
		return nil, &InvokeError{Kind: Unreachable, Message: "reading the result: " + err.Error()}
	}
	return classify(resp.StatusCode, resp.Header, body)
}

// classify turns the emulator's answer into a result or an error. Real
// Lambda marks a function error with X-Amz-Function-Error; the emulator
// answers a panic or a runtime exit with 502, a returned error as an
// errorMessage/errorType object, and its timeout as plain text.
func classify(status int, h http.Header, body []byte) ([]byte, error) {
	if len(body) > MaxResponsePayload {
		return nil, &InvokeError{Kind: TooLarge, Message: "response payload exceeds the invocation limit"}
	}
	trimmed := bytes.TrimSpace(body)
	if bytes.HasPrefix(trimmed, []byte("Task timed out after")) {
		return nil, &InvokeError{Kind: FunctionError, Type: "Sandbox.Timedout", Message: string(trimmed)}
	}
	var fe struct {
		ErrorMessage *string `json:"errorMessage"`
		ErrorType    string  `json:"errorType"`
		StatusCode   *int    `json:"statusCode"`
	}
	isErr := json.Unmarshal(trimmed, &fe) == nil && fe.ErrorMessage != nil && fe.StatusCode == nil
	if h.Get("X-Amz-Function-Error") != "" || status == http.StatusBadGateway || isErr {
		msg := strings.TrimSpace(string(trimmed))
		if fe.ErrorMessage != nil {
			msg = *fe.ErrorMessage
		}
		return nil, &InvokeError{Kind: FunctionError, Type: fe.ErrorType, Message: msg}
	}
	if status != http.StatusOK {
		return nil, &InvokeError{Kind: Unreachable, Message: fmt.Sprintf("the emulator answered %d: %.200s", status, trimmed)}
	}
	return body, nil
}

// Pool invokes a function on one of several emulators, one invocation per
// emulator at a time, starting another (a cold start) when all are busy,
// up to Max, as Lambda scales a function's instances with concurrent
// requests.
type Pool struct {
	spawn func(ctx context.Context) (Invoker, error)
	max   int
	// reserved: max is the function's reserved concurrency, and an invoke
	// that finds every instance busy is refused at once, as Lambda refuses
	// it, rather than queued.
	reserved bool

	free chan Invoker
	slot chan struct{} // a place freed by an emulator that ended
	mu   sync.Mutex
	n    int // emulators started or starting
	all  []Invoker

	stats poolStats
}

// NewPool returns a pool that starts emulators with spawn, at most max.
func NewPool(max int, spawn func(ctx context.Context) (Invoker, error)) *Pool {
	if max < 1 {
		max = 1
	}
	return &Pool{spawn: spawn, max: max, free: make(chan Invoker, max), slot: make(chan struct{}, 1)}
}

// NewReservedPool returns a pool for a function with reserved concurrency
// n (ReservedConcurrentExecutions): at most n invocations at once, and one
// beyond them fails at once with Throttled, as Lambda answers
// TooManyRequestsException (reason
// ReservedFunctionConcurrentInvocationLimitExceeded) to a synchronous
// invoke. A reserved concurrency of 0 throttles every invoke.
func NewReservedPool(n int, spawn func(ctx context.Context) (Invoker, error)) *Pool {
	p := NewPool(max(n, 1), spawn)
	p.max, p.reserved = n, true
	return p
}

// Size is how many emulators the pool started.
func (p *Pool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.all)
}

// Invoke runs payload on a free emulator.
func (p *Pool) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	p.stats.begin()
	inv, err := p.acquire(ctx)
	if err != nil {
		p.stats.end(false, 0, false)
		return nil, err
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The emulator returns to the pool only when its invocation ended,
		// even if the caller stopped waiting.
		start := time.Now()
		b, err := inv.Invoke(context.WithoutCancel(ctx), payload)
		p.stats.end(true, time.Since(start), err != nil)
		p.release(inv)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// exited reports whether inv is an emulator whose process has ended.
func exited(inv Invoker) bool {
	d, ok := inv.(interface{ Done() <-chan struct{} })
	if !ok {
		return false
	}
	select {
	case <-d.Done():
		return true
	default:
		return false
	}
}

// release returns inv to the pool, or forgets it if its process ended, so
// that the next request starts a fresh one instead of failing on it.
func (p *Pool) release(inv Invoker) {
	if !exited(inv) {
		p.free <- inv
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n--
	for i, x := range p.all {
		if x == inv {
			p.all = append(p.all[:i], p.all[i+1:]...)
			break
		}
	}
	select {
	case p.slot <- struct{}{}:
	default:
	}
}

func (p *Pool) acquire(ctx context.Context) (Invoker, error) {
	for {
		select {
		case inv := <-p.free:
			return inv, nil
		default:
		}
		p.mu.Lock()
		if p.n < p.max {
			p.n++
			p.mu.Unlock()
			inv, err := p.spawn(ctx)
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				p.n--
				return nil, &InvokeError{Kind: Unreachable, Message: "starting an emulator: " + err.Error()}
			}
			p.all = append(p.all, inv)
			return inv, nil
		}
		p.mu.Unlock()
		if p.reserved {
			return nil, &InvokeError{Kind: Throttled, Type: "TooManyRequestsException", Message: "Rate Exceeded."}
		}
		select {
		case inv := <-p.free:
			return inv, nil
		case <-p.slot:
			// An emulator ended: start another.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// errAs is errors.As for an *InvokeError.
func errAs(err error) (*InvokeError, bool) {
	var ie *InvokeError
	ok := errors.As(err, &ie)
	return ie, ok
}
