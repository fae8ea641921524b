//go:build unix

package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/runtime/localproc"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// BenchmarkInventory measures the inventory with its real neighbours, the
// local-process runtime (each worker a sleeping process) and a git
// repository on disk, at 5 and at 500 rows: a third live workers, a third
// existing branches, a third worktrees. The store is the memory one, so
// that what grows with the rows is what the runtime and git cost.
func BenchmarkInventory(b *testing.B) {
	for _, n := range []int{5, 500} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			svc := inventoryFixture(b, n)
			ctx := context.Background()
			b.Run("serial", func(b *testing.B) {
				for b.Loop() {
					inventoryOf(b, svc, ctx, n)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						inventoryOf(b, svc, ctx, n)
					}
				})
			})
		})
	}
}

func inventoryOf(b *testing.B, svc *service.Service, ctx context.Context, n int) {
	inv, err := svc.Inventory(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(inv.Resources) != n {
		b.Fatalf("%d rows, want %d", len(inv.Resources), n)
	}
	for _, r := range inv.Resources {
		if r.Liveness != protocol.LivenessLive {
			b.Fatalf("row %s %s is %s, want live", r.Resource.Kind, r.Resource.Handle, r.Liveness)
		}
	}
}

// inventoryFixture builds a service whose store lists n rows, each backed
// by a live worker process, an existing branch or a worktree.
func inventoryFixture(b *testing.B, n int) *service.Service {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	harness := filepath.Join(dir, "harness")
	if err := os.WriteFile(harness, []byte("#!/bin/sh\nexec sleep 600\n"), 0o700); err != nil {
		b.Fatal(err)
	}
	rt, err := localproc.New(localproc.WithDir(filepath.Join(dir, "data")), localproc.WithHarness(harness),
		localproc.WithEndpoint("http://127.0.0.1:9/"), localproc.WithGrace(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	repoPath, err := githost.InitBare(ctx, filepath.Join(dir, "house.git"))
	if err != nil {
		b.Fatal(err)
	}
	git, err := githost.Open(ctx, repoPath)
	if err != nil {
		b.Fatal(err)
	}
	head, err := git.DefaultHead(ctx)
	if err != nil {
		b.Fatal(err)
	}
	st := memstore.New()
	var workers []string
	b.Cleanup(func() {
		for _, h := range workers {
			_ = rt.Stop(context.Background(), h)
		}
		_ = rt.Close()
	})
	now := time.Now()
	for i := range n {
		res := store.Resource{Owner: fmt.Sprintf("k-%d", i), Created: now}
		switch i % 3 {
		case 0:
			res.Kind, res.Handle = protocol.KindWorker, fmt.Sprintf("w-%d", i)
			res.Worker = &store.Worker{Run: "run-b", Task: "t", Role: "commis", State: protocol.StateReady}
			spec := service.WorkerSpec{Handle: res.Handle, Token: "tok", Branch: "main",
				WorkspacePath: filepath.Join(rt.WorkspacesDir(), res.Handle)}
			if err := rt.Start(ctx, spec); err != nil {
				b.Fatal(err)
			}
			workers = append(workers, res.Handle)
		case 1:
			res.Kind, res.Handle = protocol.KindBranch, fmt.Sprintf("kitchen/b-%d", i)
			if err := git.CreateBranch(ctx, res.Handle, head); err != nil {
				b.Fatal(err)
			}
		case 2:
			res.Kind, res.Handle = protocol.KindWorktree, fmt.Sprintf("wt-%d", i)
		}
		if _, err := st.PutResource(ctx, res, store.NoVersion); err != nil {
			b.Fatal(err)
		}
	}
	cfg := servicetest.Config(b)
	svc, err := service.New(cfg, service.WithStore(st), service.WithRuntime(rt), service.WithGitHost(git),
		service.WithDoorbell(localbell.New()))
	if err != nil {
		b.Fatal(err)
	}
	return svc
}
