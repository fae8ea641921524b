// Package storetest is the conformance suite every store.Store
// implementation passes: memstore, boltstore, dynamostore and decorators such
// as faultstore. It checks the whole contract of package store: conditional
// create and update, NotFound, increasing versions, creation order, gap-free
// sequences under concurrency, messages appended once per id, counters
// that never answer one value twice, nonces used once, sessions and
// tallies that expire, races that
// only a condition inside the write can win, exact round trips of every
// field, and (RunDurable) that what was acknowledged survives a close or a
// kill.
//
// The suite is sized to run against DynamoDB Local too (about 1 ms a call):
// it makes a few thousand calls in all.
package storetest

import (
	"testing"

	"github.com/galley-run/galley/pkg/store"
)

// Run runs the suite. open must return a fresh, empty store for each subtest
// and arrange its Close (t.Cleanup); the suite never closes it.
//
// Beyond package store's comments, the suite fixes two details: ListMessages
// with limit <= 0 returns every message after the given sequence, and an
// empty row id is never deduplicated.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("Effects", func(t *testing.T) { testRecords(t, open, effectCase) })
	t.Run("Resources", func(t *testing.T) {
		testRecords(t, open, resourceCase)
		testResources(t, open)
	})
	t.Run("Mailboxes", func(t *testing.T) {
		testRecords(t, open, mailboxCase)
		testMailboxes(t, open)
	})
	t.Run("Messages", func(t *testing.T) {
		testMessages(t, open)
		testRepeatedIDs(t, open)
	})
	t.Run("Inboxes", func(t *testing.T) { testInboxes(t, open) })
	t.Run("Counters", func(t *testing.T) { testCounters(t, open) })
	t.Run("Nonces", func(t *testing.T) { testNonces(t, open) })
	t.Run("Sessions", func(t *testing.T) { testSessions(t, open) })
	t.Run("Tallies", func(t *testing.T) { testTallies(t, open) })
	t.Run("Aliasing", func(t *testing.T) { testAliasing(t, open) })
	t.Run("LargeValues", func(t *testing.T) { testLargeValues(t, open) })
	t.Run("LargestWorker", func(t *testing.T) { testLargestWorker(t, open) })
	t.Run("FixturesSetEveryField", testFixtures)
}

// Abandoner is implemented by a store that can let go of its resources the
// way a killed process would, with no orderly shutdown (releasing a file lock,
// say, so that the same process can open the file again). RunDurable uses it
// to simulate a kill; a store without it is simply never closed.
type Abandoner interface {
	Abandon()
}
