package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// How an effect key is applied at most once (design invariants 1 to 4):
//
//  1. The request is checked in full before anything is written; a
//     refusal that depends on nothing stored needs no record at all.
//  2. One conditional write claims the key: it records the request's
//     fingerprint as in flight with a lease. A second copy finds the claim
//     and answers by it: the stored receipt when applied, an uncertain
//     InFlight error while the lease runs, a refusal for another
//     fingerprint. After the lease expires, a retry takes the claim over and
//     finds the plan its predecessor wrote before acting, so every side
//     effect converges (same worker handle, same branch base, same task).
//  3. Completion is a write conditional on the claim's version, which only
//     the lease holder knows: a holder whose lease was taken over cannot
//     complete.
//  4. A refusal after the claim, and every lookup that finds nothing
//     applied, store the promise "absent since T". A request that arrived at
//     or before T (plus the clock skew) can never claim the key afterwards,
//     so absent and not-applied stay true however late a copy arrives.

// claim is a held effect key.
type claim struct {
	rec     store.Effect
	version store.Version
	// resumed is set when the claim was taken over from an expired lease;
	// rec.Plan then holds the predecessor's plan.
	resumed bool
	// acted is set once the operation began changing anything outside the
	// claim; from then on no failure may be answered not-applied. A resumed
	// claim counts as acted when its predecessor may have: it had recorded
	// that acting began (rec.NotActed clear).
	acted bool
}

const claimAttempts = 16

// claim claims key for the request with fingerprint fp, or answers by what
// is stored: a receipt when applied, or an error.
func (s *Service) claim(ctx context.Context, key, fp, operation string, arrived time.Time) (*claim, json.RawMessage, error) {
	// tried is the claim the last write answered Conflict would have made.
	// Its lease is new and random, so finding it stored means that write
	// was applied (a store whose resent write failed its own condition):
	// the claim is this copy's, never another copy's in flight.
	var tried *claim
	for range claimAttempts {
		rec, ver, err := s.store.GetEffect(ctx, key)
		if err == nil && tried != nil && rec.State == store.EffectInFlight && rec.Lease == tried.rec.Lease {
			tried.version = ver
			return tried, nil, nil
		}
		now := s.clock.Now()
		resumed := false
		switch {
		case galleyerr.Is(galleyerr.NotFound, err):
			rec, ver = store.Effect{Key: key, Fingerprint: fp, Operation: operation}, store.NoVersion
		case err != nil:
			return nil, nil, err
		case rec.Fingerprint != fp:
			return nil, nil, galleyerr.Errorf(galleyerr.Invalid, "key %s was already used for another request", quoteShort(key))
		case rec.State == store.EffectApplied:
			return nil, rec.Receipt, nil
		case rec.State == store.EffectInFlight && now.Before(rec.LeaseExpires) && !s.orphaned(rec.Lease):
			return nil, nil, galleyerr.Errorf(galleyerr.InFlight, "another copy of this request is being applied")
		case rec.State == store.EffectInFlight:
			resumed = true
		case rec.State == store.EffectAbsent && !arrived.After(rec.AbsentSince.Add(s.cfg.ClockSkew)):
			// A lookup or refusal promised absence after this copy arrived:
			// this copy must never apply. 429 tells the client so, and its
			// retry, arriving later, may.
			return nil, nil, &galleyerr.Error{Kind: galleyerr.RateLimited, RetryAfterSeconds: 1,
				Msg: "absence of this key was promised after the request arrived; retry"}
		}
		if !resumed {
			// Nothing was done under this key (an absent key never acted):
			// a holder records when it begins, and a takeover reads it.
			rec.NotActed, rec.Plan = true, nil
		}
		rec.State = store.EffectInFlight
		rec.Lease = s.newLease()
		rec.LeaseExpires = now.Add(s.cfg.Lease)
		rec.Updated = now
		c := &claim{rec: rec, resumed: resumed, acted: resumed && !rec.NotActed}
		nv, err := s.store.PutEffect(ctx, rec, ver)
		if galleyerr.Is(galleyerr.Conflict, err) {
			tried = c
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		c.version = nv
		return c, nil, nil
	}
	return nil, nil, galleyerr.Errorf(galleyerr.InFlight, "the key is contended")
}

// savePlan records the holder's plan before it acts, and with it that
// acting begins.
func (s *Service) savePlan(ctx context.Context, c *claim, plan any) error {
	b, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	return s.saveClaim(ctx, c, b)
}

// act records in the claim, before the holder's first side effect, that
// acting begins: a holder that takes the claim over must then count the
// effect as perhaps done. Until then a refusal, even after a takeover, is
// definite. Nothing is written when the claim already says so.
func (s *Service) act(ctx context.Context, c *claim) error {
	if c.rec.NotActed {
		if err := s.saveClaim(ctx, c, c.rec.Plan); err != nil {
			return err
		}
	}
	c.acted = true
	return nil
}

// saveClaim writes the held claim with plan, acting begun.
func (s *Service) saveClaim(ctx context.Context, c *claim, plan json.RawMessage) error {
	rec := c.rec
	rec.Plan, rec.NotActed = plan, false
	rec.Updated = s.clock.Now()
	nv, err := s.store.PutEffect(ctx, rec, c.version)
	if galleyerr.Is(galleyerr.Conflict, err) {
		return galleyerr.E(galleyerr.InFlight, "the claim was taken over", err)
	}
	if err != nil {
		return err
	}
	c.rec, c.version = rec, nv
	return nil
}

// completeAttempts bounds the writes of a receipt whose outcome was unknown.
const completeAttempts = 3

// complete records the receipt; only the current lease holder can. A write
// that failed without a definite answer (a timeout may hide a write that
// happened) is settled by reading the record: applied with this request's
// fingerprint means done; still in flight under this holder's lease means
// the write did not happen, and it is tried again. If it cannot be
// recorded, the lease is ended, so a retry takes over at once and
// converges instead of waiting the lease out.
func (s *Service) complete(ctx context.Context, c *claim, receipt json.RawMessage) (json.RawMessage, error) {
	rec := c.rec
	rec.State = store.EffectApplied
	rec.Receipt = receipt
	rec.Lease, rec.LeaseExpires = "", time.Time{}
	rec.Updated = s.clock.Now()
	ver := c.version
	var err error
	for range completeAttempts {
		if _, err = s.store.PutEffect(ctx, rec, ver); err == nil {
			return receipt, nil
		}
		cur, cver, gerr := s.store.GetEffect(ctx, rec.Key)
		switch {
		case gerr != nil:
			continue
		case cur.State == store.EffectApplied && cur.Fingerprint == rec.Fingerprint:
			// Written by this holder (its answer was lost) or by one that
			// took over and converged on the same resources.
			return cur.Receipt, nil
		case cur.State == store.EffectInFlight && cur.Lease == c.rec.Lease:
			ver = cver
			continue
		}
		// Taken over by a holder that has not finished: not ours to tell.
		return nil, galleyerr.E(galleyerr.InFlight, "the claim was taken over before completion", err)
	}
	c.version = ver
	s.abandon(ctx, c)
	return nil, galleyerr.E(galleyerr.Unavailable, "the effect was applied but its receipt could not be recorded; a retry converges", err)
}

// refuse turns a held claim into the promise that the key is absent, then
// returns cause, the refusal. If the claim was lost the refusal cannot be
// promised, and the answer becomes uncertain.
func (s *Service) refuse(ctx context.Context, c *claim, cause error) error {
	rec := c.rec
	now := s.clock.Now()
	rec.State = store.EffectAbsent
	rec.AbsentSince = now
	rec.Lease, rec.LeaseExpires, rec.Plan = "", time.Time{}, nil
	rec.Updated = now
	if _, err := s.store.PutEffect(ctx, rec, c.version); err != nil {
		return galleyerr.E(galleyerr.InFlight, "could not record the refusal", err)
	}
	return cause
}

// abandon ends the lease early after a failure, so a retry can take over at
// once instead of waiting for it to expire. Best effort: the lease expires
// anyway.
func (s *Service) abandon(ctx context.Context, c *claim) {
	rec := c.rec
	rec.LeaseExpires = s.clock.Now()
	if _, err := s.store.PutEffect(context.WithoutCancel(ctx), rec, c.version); err != nil {
		s.log.Warn("abandon claim", "key", rec.Key, "err", err)
	}
}

// Lookup answers POST /v1/effects/lookup without performing anything.
func (s *Service) Lookup(ctx context.Context, call protocol.EffectCall) (protocol.LookupAnswer, json.RawMessage, error) {
	key := call.Request.Key
	fp, err := protocol.Fingerprint(call)
	if err != nil {
		// A body this service could never apply was never applied; but it
		// cannot be fingerprinted, so nothing can be promised about its key.
		return protocol.LookupAnswer{Status: protocol.StatusUnknown}, nil, nil
	}
	for range claimAttempts {
		rec, ver, err := s.store.GetEffect(ctx, key)
		now := s.clock.Now()
		switch {
		case galleyerr.Is(galleyerr.NotFound, err):
			rec, ver = store.Effect{Key: key, Fingerprint: fp, Operation: "lookup"}, store.NoVersion
		case err != nil:
			return protocol.LookupAnswer{}, nil, err
		case rec.Fingerprint != fp:
			// The key belongs to another request: nothing true can be said
			// about this one.
			return protocol.LookupAnswer{Status: protocol.StatusUnknown}, nil, nil
		case rec.State == store.EffectApplied:
			return protocol.LookupAnswer{Status: protocol.StatusApplied}, rec.Receipt, nil
		case rec.State == store.EffectInFlight:
			return protocol.LookupAnswer{Status: protocol.StatusUnknown}, nil, nil
		}
		// Nothing applied: promise absence from now on, in the same write
		// that any later claim must condition on.
		rec.State = store.EffectAbsent
		rec.AbsentSince = now
		rec.Updated = now
		if _, err := s.store.PutEffect(ctx, rec, ver); err != nil {
			if galleyerr.Is(galleyerr.Conflict, err) {
				continue
			}
			return protocol.LookupAnswer{}, nil, err
		}
		return protocol.LookupAnswer{Status: protocol.StatusAbsent}, nil, nil
	}
	return protocol.LookupAnswer{Status: protocol.StatusUnknown}, nil, nil
}

// derive returns a handle-safe name derived from the key, so that every
// attempt at an effect names the same worker, worktree and task.
func (s *Service) derive(prefix, key string) string {
	h := sha256.Sum256([]byte(s.cfg.House + "\x00" + key))
	return prefix + hex.EncodeToString(h[:10])
}

// newLease names a claim: this Service's incarnation, then random bytes.
func (s *Service) newLease() string { return s.incarnation + "." + randomHex(12) }

// orphaned reports whether a claim's holder is certainly dead: with an
// exclusive store, every lease not of this incarnation was taken by a
// process that has ended (a killed server restarted), and nothing else
// can still act on it.
func (s *Service) orphaned(lease string) bool {
	return s.cfg.ExclusiveStore && !strings.HasPrefix(lease, s.incarnation+".")
}
