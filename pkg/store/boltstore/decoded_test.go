package boltstore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// These tests are inside the package: they set the cache's cap, look into
// it, and write the file behind the store's back, as a restore would.

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "galley.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testWorker(handle, task string) store.Resource {
	in := int64(100)
	return store.Resource{
		Kind:    protocol.KindWorker,
		Handle:  handle,
		Created: time.Date(2026, 11, 29, 18, 3, 22, 123456789, time.UTC),
		Worker: &store.Worker{
			Run:       "run-1",
			Task:      task,
			Brief:     "Brief for " + handle,
			Agent:     &protocol.AgentSelection{Agent: "claude", Model: "opus"},
			State:     protocol.StateReady,
			Questions: map[string]string{"task": task, "m-2": ""},
			Usage:     &protocol.UsageReport{Source: "agent", Tokens: &protocol.Tokens{Input: &in}, Cost: &protocol.Cost{Amount: 5, Basis: "list"}},
		},
	}
}

// same compares by encoding, the form the store keeps.
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func mustPut(t *testing.T, s *Store, r store.Resource, prev store.Version) store.Version {
	t.Helper()
	v, err := s.PutResource(t.Context(), r, prev)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustGet(t *testing.T, s *Store, handle string) (store.Resource, store.Version) {
	t.Helper()
	r, v, err := s.GetResource(t.Context(), protocol.KindWorker, handle)
	if err != nil {
		t.Fatal(err)
	}
	return r, v
}

func mustList(t *testing.T, s *Store) []store.Resource {
	t.Helper()
	all, err := s.ListResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func TestDecodedReadAfterUpdate(t *testing.T) {
	s := openTest(t)
	v := mustPut(t, s, testWorker("w", "first"), store.NoVersion)
	got, _ := mustGet(t, s, "w")
	same(t, "get", got, testWorker("w", "first"))
	same(t, "list", mustList(t, s), []store.Resource{testWorker("w", "first")})

	v2 := mustPut(t, s, testWorker("w", "second"), v)
	got, gv := mustGet(t, s, "w")
	same(t, "get after the update", got, testWorker("w", "second"))
	if gv != v2 {
		t.Errorf("get after the update: version %d, want %d", gv, v2)
	}
	same(t, "list after the update", mustList(t, s), []store.Resource{testWorker("w", "second")})
}

func TestDecodedAnswersAreCopies(t *testing.T) {
	s := openTest(t)
	mustPut(t, s, testWorker("w", "t"), store.NoVersion)
	// What the service's updateWorker does, and more.
	mutate := func(r *store.Resource) {
		r.Handle = "changed"
		r.Worker.State = protocol.StateSettled
		r.Worker.Questions["m-2"] = "answered"
		r.Worker.Questions["m-3"] = ""
		r.Worker.Agent.Model = "changed"
		*r.Worker.Usage.Tokens.Input = 999
		r.Worker.Usage.Cost.Amount = 999
	}
	for round := range 2 { // the first read decodes, the second hits
		got, _ := mustGet(t, s, "w")
		mutate(&got)
		got, _ = mustGet(t, s, "w")
		same(t, fmt.Sprint("get after changing a got record, round ", round), got, testWorker("w", "t"))
		list := mustList(t, s)
		mutate(&list[0])
		got, _ = mustGet(t, s, "w")
		same(t, fmt.Sprint("get after changing a listed record, round ", round), got, testWorker("w", "t"))
		same(t, fmt.Sprint("list, round ", round), mustList(t, s), []store.Resource{testWorker("w", "t")})
	}
}

// rawPut writes a record's stored bytes directly, as a restore of the file
// or a delete and re-create would, without the store's version check.
func rawPut(t *testing.T, s *Store, r store.Resource, v store.Version) {
	t.Helper()
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketResources)
		key := []byte(r.Kind + "\x00" + r.Handle)
		if err := b.Delete(key); err != nil {
			return err
		}
		return b.Put(key, append(u64(uint64(v)), body...))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDecodedAnswersTheStoredBytes(t *testing.T) {
	s := openTest(t)
	v := mustPut(t, s, testWorker("w", "original"), store.NoVersion)
	mustGet(t, s, "w")

	// An unchanged record is answered from the cache: a planted entry
	// shows through, to Get and to List.
	s.resources.mu.Lock()
	s.resources.m["worker\x00w"].res.Worker.Task = "from the cache"
	s.resources.mu.Unlock()
	if got, _ := mustGet(t, s, "w"); got.Worker.Task != "from the cache" {
		t.Fatalf("an unchanged record was decoded again (task %q); the cache is unused", got.Worker.Task)
	}
	if got := mustList(t, s); got[0].Worker.Task != "from the cache" {
		t.Fatalf("list decoded an unchanged record again (task %q)", got[0].Worker.Task)
	}

	// The same version with other content (deleted and re-created, or the
	// file restored) is other bytes, answered fresh.
	rawPut(t, s, testWorker("w", "re-created"), v)
	got, gv := mustGet(t, s, "w")
	same(t, "get of a re-created record", got, testWorker("w", "re-created"))
	if gv != v {
		t.Errorf("version %d, want %d", gv, v)
	}
	same(t, "list of a re-created record", mustList(t, s), []store.Resource{testWorker("w", "re-created")})

	// A corrupt record is an error, not an old answer.
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketResources).Put([]byte("worker\x00w"), append(u64(uint64(v)), "{not json"...))
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetResource(t.Context(), protocol.KindWorker, "w"); err == nil || galleyerr.Is(galleyerr.NotFound, err) {
		t.Errorf("get of a corrupt record: %v, want a corrupt-record error", err)
	}
	if _, err := s.ListResources(t.Context()); err == nil {
		t.Error("list with a corrupt record succeeded")
	}
}

func TestDecodedEvictionAtTheCap(t *testing.T) {
	const n, max = 10, 3
	s := openTest(t)
	s.resources = newDecodedResources(max)
	vers := make([]store.Version, n)
	tasks := make([]string, n)
	for i := range n {
		tasks[i] = "t0"
		vers[i] = mustPut(t, s, testWorker(fmt.Sprint("w-", i), "t0"), store.NoVersion)
	}
	check := func(what string) {
		t.Helper()
		if l := len(s.resources.m); l > max {
			t.Fatalf("%s: %d entries cached, cap %d", what, l, max)
		}
	}
	for round := range 4 {
		// Reads in an order that differs each round, so hits, misses and
		// evictions interleave.
		for j := range n {
			i := (j*7 + round*3) % n
			got, _ := mustGet(t, s, fmt.Sprint("w-", i))
			same(t, fmt.Sprint("round ", round, " get w-", i), got, testWorker(fmt.Sprint("w-", i), tasks[i]))
			check("after a get")
		}
		all := mustList(t, s)
		if len(all) != n {
			t.Fatalf("list: %d resources, want %d", len(all), n)
		}
		for i, r := range all {
			same(t, fmt.Sprint("round ", round, " list w-", i), r, testWorker(fmt.Sprint("w-", i), tasks[i]))
		}
		check("after a list")
		// Change two records, one of them likely cached, for the next round.
		for _, i := range []int{round % n, (round*5 + 1) % n} {
			tasks[i] = fmt.Sprint("t", round+1)
			vers[i] = mustPut(t, s, testWorker(fmt.Sprint("w-", i), tasks[i]), vers[i])
		}
	}
	if l := len(s.resources.m); l != max {
		t.Errorf("%d entries cached after reading %d records, want the cap %d", l, n, max)
	}
}

// Writers advance records while readers get and list them; every answer
// must be one whole record as some commit wrote it (its task is its
// version, its question repeats the task), and a reader never sees a record
// go back. Readers change what they get, which -race reports if an answer
// shares memory with the cache or another answer.
func TestDecodedConcurrent(t *testing.T) {
	for _, max := range []int{decodedCap, 2} {
		t.Run(fmt.Sprint("cap=", max), func(t *testing.T) {
			s := openTest(t)
			s.resources = newDecodedResources(max)
			ctx := t.Context()
			handles := []string{"w-0", "w-1", "w-2", "w-3"}
			for _, h := range handles {
				mustPut(t, s, testWorker(h, "1"), store.NoVersion)
			}
			const writers, updates, readers, reads = 2, 25, 4, 150
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for u := range updates {
						h := handles[(w+u)%len(handles)]
						for {
							cur, v, err := s.GetResource(ctx, protocol.KindWorker, h)
							if err != nil {
								t.Error(err)
								return
							}
							task := strconv.Itoa(int(v) + 1)
							cur.Worker.Task = task
							cur.Worker.Questions["task"] = task
							_, err = s.PutResource(ctx, cur, v)
							if err == nil {
								break
							}
							if !galleyerr.Is(galleyerr.Conflict, err) {
								t.Error(err)
								return
							}
						}
					}
				})
			}
			for r := range readers {
				wg.Go(func() {
					seen := map[string]int{}
					look := func(res store.Resource, v store.Version) bool {
						task, err := strconv.Atoi(res.Worker.Task)
						if err != nil || res.Worker.Questions["task"] != res.Worker.Task || (v != 0 && task != int(v)) {
							t.Errorf("torn answer for %s at version %d: %+v", res.Handle, v, *res.Worker)
							return false
						}
						if task < seen[res.Handle] {
							t.Errorf("%s went back from %d to %d", res.Handle, seen[res.Handle], task)
							return false
						}
						seen[res.Handle] = task
						res.Worker.Task = "mine"
						res.Worker.Questions["task"] = "mine"
						*res.Worker.Usage.Tokens.Input++
						return true
					}
					for i := range reads {
						if (i+r)%5 == 0 {
							all, err := s.ListResources(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							for _, res := range all {
								if !look(res, 0) {
									return
								}
							}
							continue
						}
						res, v, err := s.GetResource(ctx, protocol.KindWorker, handles[(i+r)%len(handles)])
						if err != nil {
							t.Error(err)
							return
						}
						if !look(res, v) {
							return
						}
					}
				})
			}
			wg.Wait()
			total := 0
			for _, h := range handles {
				_, v := mustGet(t, s, h)
				total += int(v) - 1
			}
			if total != writers*updates {
				t.Errorf("%d updates stored, want %d", total, writers*updates)
			}
			if l := len(s.resources.m); l > max {
				t.Errorf("%d entries cached, cap %d", l, max)
			}
		})
	}
}
