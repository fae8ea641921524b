package boltstore_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// stores runs bench once per implementation, so one run compares them.
func stores(b *testing.B, bench func(b *testing.B, s store.Store)) {
	b.Run("mem", func(b *testing.B) { bench(b, memstore.New()) })
	b.Run("bolt", func(b *testing.B) { bench(b, open(b, filepath.Join(b.TempDir(), "galley.db"))) })
}

// BenchmarkPutEffect measures claiming a new key: a conditional create.
func BenchmarkPutEffect(b *testing.B) {
	stores(b, func(b *testing.B, s store.Store) {
		ctx := b.Context()
		e := store.Effect{Fingerprint: "sha256:0123", Operation: protocol.OpLaunch, State: store.EffectInFlight, Lease: "l"}
		for i := 0; b.Loop(); i++ {
			e.Key = fmt.Sprint("key-", i)
			if _, err := s.PutEffect(ctx, e, store.NoVersion); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAppendMessage(b *testing.B) {
	stores(b, func(b *testing.B, s store.Store) {
		ctx := b.Context()
		m := store.Message{Row: protocol.MailMessage{Kind: protocol.MsgStatus, Body: "working on it"}}
		for i := 0; b.Loop(); i++ {
			m.Row.ID = fmt.Sprint("m-", i) // a repeated id would append nothing
			if _, _, err := s.AppendMessage(ctx, "run", m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGetResource(b *testing.B) {
	stores(b, func(b *testing.B, s store.Store) {
		ctx := b.Context()
		r := store.Resource{Kind: protocol.KindWorker, Handle: "w-1", Worker: &store.Worker{Run: "run", Brief: "brief", State: protocol.StateReady}}
		if _, err := s.PutResource(ctx, r, store.NoVersion); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, err := s.GetResource(ctx, protocol.KindWorker, "w-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
