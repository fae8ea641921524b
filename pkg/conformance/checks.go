package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// allChecks is every check, in run order: kitchn's effect and worker checks,
// its mailbox checks, then galley's own additions.
var allChecks = []check{
	{"descriptor-house", "the descriptor names the bound backend and house, declares every capability supported, and has workerSelection", false, (*suite).descriptorHouse},
	{"unknown-key-not-applied", "lookup of a key never sent answers absent or unknown, never applied", false, (*suite).unknownKeyNotApplied},
	{"probe-receipt", "a launch on a fresh key (scripted brief, fresh branch) answers applied with a strictly valid receipt naming one worker", true, (*suite).probeReceipt},
	{"lookup-matches-receipt", "lookup of the launch's key answers applied with the byte-identical receipt", true, (*suite).lookupMatchesReceipt},
	{"idempotent-resubmission", "resubmitting the launch's key answers the identical receipt, and the inventory still holds one worker for it", true, (*suite).idempotentResubmission},
	{"launch-receipt", "the launch's receipt lists exactly one branch, in created, named as requested, plus the worker", true, (*suite).launchReceipt},
	{"launch-observable", "observe right after the launch answers starting, ready, awaiting-reply or user-takeover", true, (*suite).launchObservable},
	{"inventory-lists-launch", "the inventory lists the launched worker live, owned by the launch's key", true, (*suite).inventoryListsLaunch},
	{"message-recovery", "a message to the just-launched worker is applied, and lookup of its key answers the same receipt", true, (*suite).messageRecovery},
	{"cancel-observed", "after a cancel, the next observe answers settled cancelled, and it stays so", true, (*suite).cancelObserved},
	{"release-keeps-branch", "releasing the worker names no branch, and a branch the inventory listed before is still listed after", true, (*suite).releaseKeepsBranch},
	{"deliveries-declared", "the descriptor declares worker.deliveries and run.transfer supported, and a fresh run's mailbox answers empty", false, (*suite).deliveriesDeclared},
	{"delivery-replayed", "a scripted worker's batch is replayed identically by next until acknowledged", true, (*suite).deliveryReplayed},
	{"adoption-replays", "a new coordinator adopts with {} and reads the same unacknowledged messages; the old one is fenced on next, acknowledge, await and adopt", true, (*suite).adoptionReplays},
	{"duplicate-acknowledgement", "acknowledging a batch twice consumes nothing the second time and answers the current batch or empty", true, (*suite).duplicateAcknowledgement},
	{"delivery-order", "a scripted worker's messages arrive once each, in the order it sent them, each naming the worker", true, (*suite).deliveryOrder},
	{"bad-token", "a wrong or missing token is refused with 401 or 403 on a read and on an effect, and the effect is not applied", false, (*suite).badToken},
	{"await-holds", "await with waitMs 1500 on a run nobody wrote to answers empty, not before about 1 s", false, (*suite).awaitHolds},
	{"await-wakes", "a question a scripted worker posts while an await waits is returned before waitMs", true, (*suite).awaitWakes},
}

// requiredCapabilities are the capabilities kitchn declares for an HTTP
// backend and a house's workflows use; each must be supported.
var requiredCapabilities = []string{
	"worker.launch_isolated", "worker.launch_readiness", "worker.status_and_outcome", "worker.messaging",
	"worker.cancel", "worker.deliveries", "run.transfer", "resource.inventory", "resource.release",
	"usage.attribution", "effect.lookup", "effect.idempotent_requests",
}

func (s *suite) descriptorHouse(ctx context.Context) error {
	d, err := s.descriptor(ctx)
	if err != nil {
		return err
	}
	var problems []string
	if d.Backend != s.cfg.Backend {
		problems = append(problems, fmt.Sprintf("backend is %q, the binding says %q", d.Backend, s.cfg.Backend))
	}
	if d.House != s.cfg.House {
		problems = append(problems, fmt.Sprintf("house is %q, the binding says %q", d.House, s.cfg.House))
	}
	var missing, partial []string
	for _, c := range requiredCapabilities {
		if _, ok := d.Capabilities[c]; !ok {
			missing = append(missing, c)
		}
	}
	for c, v := range d.Capabilities {
		if v != protocol.SupportSupported {
			partial = append(partial, c)
		}
	}
	slices.Sort(partial)
	if len(missing) > 0 {
		problems = append(problems, "missing "+strings.Join(missing, ", "))
	}
	if len(partial) > 0 {
		problems = append(problems, "not supported: "+strings.Join(partial, ", "))
	}
	if d.WorkerSelection == nil {
		problems = append(problems, "no workerSelection, so kitchn refuses every launch that names an agent")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (s *suite) unknownKeyNotApplied(ctx context.Context) error {
	brief := "never sent"
	call := s.call(s.name("unknown"), s.name("never-sent"), protocol.WorkerEffect{
		Type: protocol.OpLaunch, Role: "station-cook", Workspace: &protocol.Workspace{Type: "isolated"}, Brief: &brief,
	})
	a, _, err := s.c.Lookup(ctx, call)
	if err != nil {
		return err
	}
	if a.Status != protocol.StatusAbsent && a.Status != protocol.StatusUnknown {
		return fmt.Errorf("lookup of a key never sent answers %s, want absent or unknown", a.Status)
	}
	return nil
}

// probeReceipt uses the shared launch as the probe. kitchn's effect suite
// needs one effect that applies on a fresh key, and for the worker
// executor that is a launch: every other operation needs a worker first.
// The strictness is in the parse: the receipt has all three fields and no
// other, at most 16 resources, all in the bound backend.
func (s *suite) probeReceipt(ctx context.Context) error {
	_, err := s.mainWorker(ctx)
	return err
}

func (s *suite) lookupMatchesReceipt(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	a, raw, err := s.c.Lookup(ctx, l.call)
	if err != nil {
		return err
	}
	if a.Status != protocol.StatusApplied || a.Receipt == nil {
		return fmt.Errorf("lookup of the applied launch's key answers %s", a.Status)
	}
	return sameReceipt("lookup", applied{receipt: *a.Receipt, raw: raw}, l.applied)
}

// sameReceipt requires got to be the very receipt want is, byte for byte.
func sameReceipt(what string, got, want applied) error {
	if bytes.Equal(got.raw, want.raw) {
		return nil
	}
	if reflect.DeepEqual(got.receipt, want.receipt) {
		return fmt.Errorf("%s answers the same receipt but not byte for byte: %s, first %s", what, got.raw, want.raw)
	}
	return fmt.Errorf("%s answers receipt %s, the original is %s", what, got.raw, want.raw)
}

func (s *suite) idempotentResubmission(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	a, err := s.effect(ctx, l.call)
	if err != nil {
		return fmt.Errorf("resubmission: %w", err)
	}
	if err := sameReceipt("resubmission", a, l.applied); err != nil {
		return err
	}
	inv, err := s.c.Inventory(ctx)
	if err != nil {
		return err
	}
	var owned []protocol.Resource
	for _, row := range inv.Resources {
		if row.Resource.Kind == protocol.KindWorker && row.Owner != nil && *row.Owner == l.call.Request.Key {
			owned = append(owned, row.Resource)
		}
	}
	if len(owned) != 1 || owned[0] != l.worker {
		return fmt.Errorf("after resubmission the inventory lists %d workers owned by the key (%v), want exactly %s", len(owned), owned, l.worker.Handle)
	}
	return nil
}

func (s *suite) launchReceipt(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	var created, touched []protocol.Resource
	for _, r := range l.applied.receipt.Created {
		if r.Kind == protocol.KindBranch {
			created = append(created, r)
		}
	}
	for _, r := range l.applied.receipt.Touched {
		if r.Kind == protocol.KindBranch {
			touched = append(touched, r)
		}
	}
	switch {
	case len(created)+len(touched) != 1 || len(created) != 1:
		return fmt.Errorf("receipt lists %d branches in created and %d in touched, want exactly one in created: %s", len(created), len(touched), l.applied.raw)
	case created[0].Handle != l.branch:
		return fmt.Errorf("receipt's branch is %q, the launch asked for %q", created[0].Handle, l.branch)
	}
	return nil
}

// startedStates are what observe may answer right after a launch.
var startedStates = []string{protocol.StateStarting, protocol.StateReady, protocol.StateAwaitingReply, protocol.StateUserTakeover}

func (s *suite) launchObservable(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	o, err := s.c.Observe(ctx, l.worker)
	if err != nil {
		return err
	}
	if !slices.Contains(startedStates, o.State) {
		return fmt.Errorf("observe right after the launch answers %s, want one of %s", describeObservation(o), strings.Join(startedStates, ", "))
	}
	return nil
}

func describeObservation(o protocol.Observation) string {
	if o.Outcome != "" {
		return o.State + " " + o.Outcome
	}
	return o.State
}

func (s *suite) inventoryListsLaunch(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	inv, err := s.c.Inventory(ctx)
	if err != nil {
		return err
	}
	for _, row := range inv.Resources {
		if row.Resource != l.worker {
			continue
		}
		switch {
		case row.Owner == nil:
			return fmt.Errorf("worker %s is listed with owner null, want the launch's key", l.worker.Handle)
		case *row.Owner != l.call.Request.Key:
			return fmt.Errorf("worker %s is listed with owner %q, want the launch's key %q", l.worker.Handle, *row.Owner, l.call.Request.Key)
		case row.Liveness != protocol.LivenessLive:
			return fmt.Errorf("worker %s is listed %s right after its launch, want live", l.worker.Handle, row.Liveness)
		}
		return nil
	}
	return fmt.Errorf("the inventory (%d rows) does not list worker %s", len(inv.Resources), l.worker.Handle)
}

func (s *suite) messageRecovery(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	w := l.worker
	body := "galley conformance: a message to a worker that may still be starting"
	call := s.call(l.run, s.name("message"), protocol.WorkerEffect{Type: protocol.OpMessage, Worker: &w, Body: &body})
	a, err := s.effect(ctx, call)
	if err != nil {
		return fmt.Errorf("message: %w", err)
	}
	lk, raw, err := s.c.Lookup(ctx, call)
	if err != nil {
		return err
	}
	if lk.Status != protocol.StatusApplied || lk.Receipt == nil {
		return fmt.Errorf("lookup of the applied message's key answers %s", lk.Status)
	}
	return sameReceipt("lookup of the message", applied{receipt: *lk.Receipt, raw: raw}, a)
}

func (s *suite) cancelObserved(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	if _, err := s.cancel(ctx, l); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	// The first observe must already be settled; later ones must not move.
	for i := range 4 {
		if i > 0 {
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return err
			}
		}
		o, err := s.c.Observe(ctx, l.worker)
		if err != nil {
			return err
		}
		if o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeCancelled {
			when := "the first observe after the cancel"
			if i > 0 {
				when = fmt.Sprintf("observe %d after the cancel", i+1)
			}
			return fmt.Errorf("%s answers %s, want settled cancelled", when, describeObservation(o))
		}
	}
	return nil
}

func (s *suite) releaseKeepsBranch(ctx context.Context) error {
	l, err := s.mainWorker(ctx)
	if err != nil {
		return err
	}
	if !l.settled {
		// Run alone, this check still releases a stopped worker, as kitchn
		// does after a task settles.
		if _, err := s.cancel(ctx, l); err != nil {
			return fmt.Errorf("cancel before the release: %w", err)
		}
	}
	branch := protocol.Resource{Kind: protocol.KindBranch, Backend: s.cfg.Backend, Handle: l.branch}
	before, err := s.c.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("inventory before the release: %w", err)
	}
	w := l.worker
	a, err := s.effect(ctx, s.call(l.run, s.name("release"), protocol.WorkerEffect{Type: protocol.OpRelease, Resource: &w}))
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	for _, r := range slices.Concat(a.receipt.Created, a.receipt.Touched) {
		if r.Kind == protocol.KindBranch {
			return fmt.Errorf("the release's receipt names branch %q: %s", r.Handle, a.raw)
		}
	}
	after, err := s.c.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("inventory after the release: %w", err)
	}
	if lists(before, branch) && !lists(after, branch) {
		return fmt.Errorf("branch %q was listed before the release and is gone after it", l.branch)
	}
	return nil
}

func lists(inv protocol.Inventory, r protocol.Resource) bool {
	for _, row := range inv.Resources {
		if row.Resource == r {
			return true
		}
	}
	return false
}

func (s *suite) badToken(ctx context.Context) error {
	refused := func(r client.Answer) bool {
		return r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden
	}
	// A made-up token, never the real one, so no failure line can hold it.
	wrong := s.c.WithToken("galley-conformance-wrong-token-" + s.id)
	for _, tc := range []struct {
		what string
		c    *client.Client
	}{{"a wrong token", wrong}, {"no token", s.c.WithToken("")}} {
		r, err := tc.c.Call(ctx, contract.RouteDescriptor, nil, "", 0)
		if err != nil {
			return fmt.Errorf("descriptor with %s: %w", tc.what, err)
		}
		if !refused(r) {
			return fmt.Errorf("descriptor with %s answers status %d, want 401 or 403", tc.what, r.Status)
		}
	}
	// The effect names a worker that does not exist: should a service act
	// on it despite the token, it still cancels nothing.
	w := protocol.Resource{Kind: protocol.KindWorker, Backend: s.cfg.Backend, Handle: "galley-conformance-no-such-worker-" + s.id}
	call := s.call(s.name("bad-token"), s.name("bad-token"), protocol.WorkerEffect{Type: protocol.OpCancel, Worker: &w})
	r, err := wrong.Effect(ctx, call)
	if err != nil {
		return fmt.Errorf("effect with a wrong token: %w", err)
	}
	if !refused(r) {
		return fmt.Errorf("effect with a wrong token answers status %d, want 401 or 403", r.Status)
	}
	a, _, err := s.c.Lookup(ctx, call)
	if err != nil {
		return fmt.Errorf("lookup of the refused effect: %w", err)
	}
	if a.Status == protocol.StatusApplied {
		return fmt.Errorf("an effect refused for its token was applied")
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
