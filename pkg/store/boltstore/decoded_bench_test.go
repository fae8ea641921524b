package boltstore_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
)

// benchWorker is a worker record of a realistic size: a brief of a few
// hundred bytes, a few questions, an agent and a usage report.
func benchWorker(i int) store.Resource {
	n := func(v int64) *int64 { return &v }
	at := time.Date(2026, 11, 29, 18, 3, 22, 123456789, time.UTC)
	return store.Resource{
		Kind:    protocol.KindWorker,
		Handle:  fmt.Sprint("w-", i),
		Owner:   fmt.Sprint("key-", i),
		Created: at,
		Worker: &store.Worker{
			Run:      "run-1",
			Task:     fmt.Sprint("task-", i),
			Role:     "implementer",
			Branch:   fmt.Sprint("galley/w-", i),
			Worktree: fmt.Sprint("wt-", i),
			Brief:    strings.Repeat("Implement the parser; keep the tests green and say what changed. ", 6),
			Agent:    &protocol.AgentSelection{Agent: "claude", Model: "opus", Effort: "high"},
			State:    protocol.StateAwaitingReply,
			Questions: map[string]string{
				"m-1": "Yes, keep the old flag.",
				"m-2": "Use the fixture in testdata.",
				"m-3": "",
			},
			Usage: &protocol.UsageReport{
				Source: "agent", Agent: "claude", Model: "opus",
				Tokens: &protocol.Tokens{Input: n(120000), Output: n(8000), CacheRead: n(90000)},
				Cost:   &protocol.Cost{Amount: 420000, Basis: "list"},
			},
			CredentialClaim: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			Updated:         at,
		},
	}
}

// seeded opens a store holding n benchWorker resources.
func seeded(b *testing.B, n int) *boltstore.Store {
	s := open(b, filepath.Join(b.TempDir(), "galley.db"))
	for i := range n {
		if _, err := s.PutResource(b.Context(), benchWorker(i), store.NoVersion); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

var resourceCounts = []int{10, 500}

// BenchmarkGetWorker is observe's read: one worker record, cycling over all
// n so that every record is read. Run with -cpu 1,2 for the parallel case.
func BenchmarkGetWorker(b *testing.B) {
	for _, n := range resourceCounts {
		s := seeded(b, n)
		handles := make([]string, n)
		for i := range handles {
			handles[i] = fmt.Sprint("w-", i)
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			ctx := b.Context()
			for i := 0; b.Loop(); i++ {
				if _, _, err := s.GetResource(ctx, protocol.KindWorker, handles[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("parallel/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			ctx := b.Context()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if _, _, err := s.GetResource(ctx, protocol.KindWorker, handles[i%n]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkListResources is the inventory's read: every resource record.
func BenchmarkListResources(b *testing.B) {
	for _, n := range resourceCounts {
		s := seeded(b, n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			ctx := b.Context()
			for b.Loop() {
				if all, err := s.ListResources(ctx); err != nil || len(all) != n {
					b.Fatal(len(all), err)
				}
			}
		})
		b.Run(fmt.Sprintf("parallel/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			ctx := b.Context()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if all, err := s.ListResources(ctx); err != nil || len(all) != n {
						b.Error(len(all), err)
						return
					}
				}
			})
		})
	}
}
