package memstore_test

import (
	"testing"

	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestEvents(t *testing.T) {
	storetest.RunEvents(t, func(t *testing.T) storetest.EventStore {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}
