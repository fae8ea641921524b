package dynamostore_test

import (
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// A session whose UpdateItem DynamoDB applied and then answered 500 (or
// whose connection reset) is resent by the SDK: the resend fails its
// condition on the item the first try made, which must read as this
// login, not another's session (the login would answer 503). A second put
// of the id is still refused.
func TestSessionResentAfterAppliedWrite(t *testing.T) {
	for _, f := range []awsfault.Fault{awsfault.ServerError, awsfault.Reset} {
		t.Run(f.String(), func(t *testing.T) {
			inj := awsfault.New()
			s := wired(t, inj)
			ctx := t.Context()
			se := store.Session{IDHash: "h-1", TokenFingerprint: "fp", Created: time.Now(), Expires: time.Now().Add(time.Hour)}
			inj.Script(awsfault.Step{Op: "UpdateItem", Fault: f})
			mustOK(t, "put, applied then "+f.String(), s.PutSession(ctx, se))
			if inj.Injected("UpdateItem", f) != 1 || inj.Calls("UpdateItem") != 2 {
				t.Fatalf("injected %d, calls %d: the SDK did not resend", inj.Injected("UpdateItem", f), inj.Calls("UpdateItem"))
			}
			if _, err := s.GetSession(ctx, "h-1"); err != nil {
				t.Fatalf("get: %v", err)
			}
			if err := s.PutSession(ctx, se); galleyerr.KindOf(err) != galleyerr.Conflict {
				t.Errorf("a second put of a live session: %v, want Conflict", err)
			}
		})
	}
}

// A tally's add refused by a condition failure (as if the item had just
// expired) turns to the restart, whose own condition holds the truth: on
// an absent tally the restart counts 1, on a live one it fails and the
// add counts on. Either way the count is the attempts made.
func TestTallyUnderInjectedConditionFailure(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()
	live := time.Now().Add(time.Minute)
	for want := int64(1); want <= 2; want++ {
		inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.ConditionFailed})
		n, err := s.AddTally(ctx, "login#a", live)
		mustOK(t, "add under a condition failure", err)
		if n != want {
			t.Fatalf("add %d under a condition failure answered %d", want, n)
		}
	}
	if n := inj.Injected("UpdateItem", awsfault.ConditionFailed); n != 2 {
		t.Errorf("injected %d condition failures, want 2", n)
	}
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.Throttle})
	if _, err := s.AddTally(ctx, "login#a", live); galleyerr.KindOf(err) != galleyerr.Unavailable {
		t.Errorf("a throttled add: %v, want Unavailable", err)
	}
}
