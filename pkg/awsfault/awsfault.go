// Package awsfault wraps the DynamoDB and SQS clients with decorators that
// inject the failures a network and a managed service produce: throttling
// before a call, a timeout before a call, a response lost after the call
// really ran (the write happened, the caller cannot know), a call that runs
// late after its caller gave up, and a forced conditional-check failure.
// Faults come from a script (deterministic, consumed in call order) or from
// a seeded rate, and every injected fault and real call is counted, so a
// test can assert both the invariant and that the fault really fired.
//
// The decorators sit outside the SDK's own retries, as a lost response does
// from the caller's point of view. Transport sits below them, as the
// network does: its faults (500s and resets after the request was applied,
// throttling, transaction conflicts) reach the SDK's retryer, which sends
// an applied write again. HarshSQS, also below the SDK, gives a stand-in
// SQS the limits AWS's has (docs/aws-local.md lists them). Plan reads a
// whole plan of seeded rates, as the development binary's --inject-aws-faults
// gives it (galley-dev serve), and counts what it injected.
//
// It is part of the test bench: no product binary links it (cmd's
// dependency test).
package awsfault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/smithy-go"
)

// Fault is one kind of injected failure.
type Fault int

const (
	// None lets the call through; in a script it lets one matching call
	// pass.
	None Fault = iota
	// Throttle refuses the call before it reaches the service, with the
	// service's throttling error: nothing happened, definitely.
	Throttle
	// Timeout fails the call before it reaches the service with a timeout:
	// nothing happened, but the caller cannot know that.
	Timeout
	// LostResponse makes the real call, then drops its answer and reports
	// a timeout: the call happened (or failed) and the caller cannot know.
	LostResponse
	// Delayed reports a timeout at once and makes the real call later, in
	// the background (after the injector's delay): a request that was
	// still in flight when its caller gave up.
	Delayed
	// ConditionFailed refuses a conditional write before it reaches the
	// service, as if another writer had just made its condition fail
	// (DynamoDB only; other calls pass through untouched). As DynamoDB
	// does, a refusal returns the item as it stands when the write asks
	// for it (ALL_OLD); a write that asks and finds no item goes through,
	// since DynamoDB never refuses one naming no item unless absence
	// itself fails the condition, and then the real call answers so.
	ConditionFailed
	// ServerError (Transport only) forwards the request, then answers
	// HTTP 500 InternalServerError: the call happened, and the SDK's own
	// retryer sends it again.
	ServerError
	// Reset (Transport only) forwards the request, then fails as a
	// connection reset by the peer: the call happened, and the SDK's own
	// retryer sends it again.
	Reset
	// TxConflict (Transport only, DynamoDB's PutItem, UpdateItem and
	// DeleteItem) refuses a plain write with TransactionConflictException,
	// as DynamoDB does while a transaction holds the item.
	TxConflict
)

var faultNames = [...]string{None: "none", Throttle: "throttle", Timeout: "timeout", LostResponse: "lost-response", Delayed: "delayed", ConditionFailed: "condition-failed",
	ServerError: "server-error", Reset: "reset", TxConflict: "tx-conflict"}

// allFaults is the order in which a rate draw picks a fault.
var allFaults = []Fault{Throttle, Timeout, LostResponse, Delayed, ConditionFailed, ServerError, Reset, TxConflict}

func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// Step is one entry of a script: the next call of operation Op (any
// operation when Op is "") gets Fault.
type Step struct {
	Op    string // "UpdateItem", "TransactWriteItems", "ReceiveMessage", ...
	Fault Fault
}

// Injector decides which call gets which fault and counts them. One
// injector may serve several decorators. The zero value injects nothing;
// use New.
type Injector struct {
	mu       sync.Mutex
	script   []Step
	rng      *rand.Rand
	rates    map[Fault]float64
	rateOps  map[string]bool
	delay    time.Duration
	injected map[opFault]int
	owed     map[Fault]bool // drawn for a call it did not apply to, before it ever fired
	calls    map[string]int
	bg       sync.WaitGroup
}

type opFault struct {
	op string
	f  Fault
}

// New returns an injector with no faults planned.
func New() *Injector {
	return &Injector{injected: map[opFault]int{}, owed: map[Fault]bool{}, calls: map[string]int{}, delay: 50 * time.Millisecond}
}

// Script appends steps to the script. A call takes the first step if it
// matches the call's operation; a step that does not match waits for a
// call that does. Scripted faults take precedence over rates.
func (i *Injector) Script(steps ...Step) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.script = append(i.script, steps...)
}

// Pending reports how many scripted steps are still waiting for a call.
func (i *Injector) Pending() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.script)
}

// SetRates injects each fault with its probability (their sum at most 1)
// into calls of ops (every operation when ops is empty), drawn from a
// generator seeded with seed: the same calls in the same order get the
// same faults. Nil rates turn rate injection off.
//
// A kind drawn for a call it does not apply to (a condition-failed for a
// read) is owed, until it has fired once, to the next call it applies to:
// so a short run injects every kind it plans, however few calls a kind
// applies to. After its first, a kind fires at its rate alone.
func (i *Injector) SetRates(seed uint64, rates map[Fault]float64, ops ...string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	i.rates = rates
	i.rateOps = nil
	if len(ops) > 0 {
		i.rateOps = map[string]bool{}
		for _, op := range ops {
			i.rateOps[op] = true
		}
	}
}

// SetDelay sets how long a Delayed call waits before it runs (default 50ms).
func (i *Injector) SetDelay(d time.Duration) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.delay = d
}

// Injected counts the faults f injected into op ("" for every operation).
func (i *Injector) Injected(op string, f Fault) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if op != "" {
		return i.injected[opFault{op, f}]
	}
	n := 0
	for k, c := range i.injected {
		if k.f == f {
			n += c
		}
	}
	return n
}

// Calls counts the calls of op that reached the real client ("" for all),
// Delayed ones included once they ran.
func (i *Injector) Calls(op string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if op != "" {
		return i.calls[op]
	}
	n := 0
	for _, c := range i.calls {
		n += c
	}
	return n
}

// Wait waits until every Delayed call has run.
func (i *Injector) Wait() { i.bg.Wait() }

// decide picks the fault for one call of op; a fault that does not apply
// to the call (applies false) lets it pass.
func (i *Injector) decide(op string, applies func(Fault) bool) Fault {
	if i == nil {
		return None
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	f := None
	if len(i.script) > 0 && (i.script[0].Op == "" || i.script[0].Op == op) {
		f = i.script[0].Fault
		i.script = i.script[1:]
	} else if i.rng != nil && len(i.rates) > 0 && (i.rateOps == nil || i.rateOps[op]) {
		x := i.rng.Float64()
		for _, cand := range allFaults {
			if p := i.rates[cand]; x < p {
				f = cand
				break
			} else {
				x -= p
			}
		}
		if f != None && !applies(f) {
			i.oweLocked(f)
			f = None
		}
		for _, k := range allFaults {
			if f == None && i.owed[k] && applies(k) {
				f = k
				delete(i.owed, k)
			}
		}
	}
	if f != None && !applies(f) {
		f = None
	}
	if f != None {
		i.injected[opFault{op, f}]++
	}
	return f
}

// withdraw takes back a fault decide counted and call could not inject.
func (i *Injector) withdraw(op string, f Fault) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.injected[opFault{op, f}]--
	if i.rng != nil {
		i.oweLocked(f)
	}
}

// oweLocked owes f to a later call if it has never fired.
func (i *Injector) oweLocked(f Fault) {
	for k, n := range i.injected {
		if k.f == f && n > 0 {
			return
		}
	}
	i.owed[f] = true
}

func (i *Injector) countCall(op string) {
	if i == nil {
		return
	}
	i.mu.Lock()
	i.calls[op]++
	i.mu.Unlock()
}

// TimeoutError is the error of an injected Timeout, LostResponse or
// Delayed: what a client sees when no answer came.
type TimeoutError struct {
	Op    string
	Fault Fault
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("awsfault: %s: no response (%s injected)", e.Op, e.Fault)
}

// Timeout marks the error as a timeout, as net.Error does.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary marks the error as transient.
func (e *TimeoutError) Temporary() bool { return true }

// condFault is how an injected ConditionFailed answers one call: the
// failure to return, or nil when no failure could faithfully be returned
// now, and the call goes through as if nothing had been injected. A nil
// condFault marks a call that has no condition to fail.
type condFault func(context.Context) error

// call runs one call of op through the injector: throttled, timed out,
// refused by condition, made with its answer dropped, made late, or made.
func call[O any](i *Injector, ctx context.Context, service, op string, conditional condFault, throttle error, real func(context.Context) (*O, error)) (*O, error) {
	f := i.decide(op, func(f Fault) bool {
		switch f {
		case Throttle, Timeout, LostResponse, Delayed:
			return true
		case ConditionFailed:
			return conditional != nil
		}
		return false // a wire fault: Transport's
	})
	wrap := func(err error) error {
		return &smithy.OperationError{ServiceID: service, OperationName: op, Err: err}
	}
	switch f {
	case Throttle:
		return nil, wrap(throttle)
	case Timeout:
		return nil, wrap(&TimeoutError{Op: op, Fault: f})
	case ConditionFailed:
		if err := conditional(ctx); err != nil {
			return nil, wrap(err)
		}
		i.withdraw(op, f)
	case LostResponse:
		i.countCall(op)
		real(ctx)
		return nil, wrap(&TimeoutError{Op: op, Fault: f})
	case Delayed:
		i.mu.Lock()
		d := i.delay
		i.mu.Unlock()
		bg := context.WithoutCancel(ctx)
		i.bg.Add(1)
		go func() {
			defer i.bg.Done()
			time.Sleep(d)
			i.countCall(op)
			real(bg)
		}()
		return nil, wrap(&TimeoutError{Op: op, Fault: f})
	}
	i.countCall(op)
	return real(ctx)
}
