package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/store"
)

// text returns about n bytes of varied, deterministic UTF-8 text (ASCII,
// accents, CJK, emoji, newlines, JSON-special characters).
func text(n int, seed uint32) string {
	alphabet := []rune("abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 \n\t\"\\<>&{}[] éüß 漢字 ✓ 🚀")
	var b strings.Builder
	x := seed | 1
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteRune(alphabet[x%uint32(len(alphabet))])
	}
	return b.String()
}

func testLargeValues(t *testing.T, open func(*testing.T) store.Store) {
	s, ctx := open(t), t.Context()

	r := fullResource("worker", "big")
	r.Worker.Brief = text(64<<10, 1)
	_, err := s.PutResource(ctx, r, store.NoVersion)
	mustOK(t, "put a resource with a 64 KiB brief", err)
	got, _, err := s.GetResource(ctx, "worker", "big")
	mustOK(t, "get", err)
	if got.Worker == nil || got.Worker.Brief != r.Worker.Brief {
		t.Errorf("the 64 KiB brief did not come back intact")
	}
	checkSame(t, "resource", got, r)

	e := fullEffect("big")
	rec, err := json.Marshal(map[string]string{"reference": "ref", "blob": text(32<<10, 2)})
	mustOK(t, "marshal", err)
	e.Receipt = append(json.RawMessage(" "), rec...) // leading space: bytes, not JSON, are kept
	_, err = s.PutEffect(ctx, e, store.NoVersion)
	mustOK(t, "put an effect with a 32 KiB receipt", err)
	gotE, _, err := s.GetEffect(ctx, "big")
	mustOK(t, "get", err)
	if string(gotE.Receipt) != string(e.Receipt) {
		t.Errorf("the 32 KiB receipt did not come back byte for byte")
	}

	m := fullMessage("big")
	m.Row.Body = text(16<<10, 3)
	_, _, err = s.AppendMessage(ctx, "run", m)
	mustOK(t, "append a 16 KiB message", err)
	it := fullInboxItem("big")
	it.Body = text(16<<10, 4)
	_, err = s.AppendInbox(ctx, "w", it)
	mustOK(t, "append a 16 KiB inbox item", err)
	ms, err := s.ListMessages(ctx, "run", 0, 10)
	mustOK(t, "list messages", err)
	items, err := s.ListInbox(ctx, "w", 0, 0)
	mustOK(t, "list inbox", err)
	if len(ms) != 1 || ms[0].Row.Body != m.Row.Body {
		t.Errorf("the 16 KiB message did not come back intact")
	}
	if len(items) != 1 || items[0].Body != it.Body {
		t.Errorf("the 16 KiB inbox item did not come back intact")
	}
}

// testLargestWorker stores the largest worker record the service's bounds
// allow (store.MaxQuestions answered questions, a full pending list, a
// 64 KiB brief that does not compress), and its update: the bounds keep a
// worker far below DynamoDB's item limit, so that cancel and the exit
// report can always write it.
func testLargestWorker(t *testing.T, open func(*testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	r := fullResource("worker", "largest")
	w := r.Worker
	w.Brief = text(64<<10, 7)
	w.Questions = map[string]string{}
	for i := range store.MaxQuestions {
		w.Questions[fmt.Sprintf("msg-%020x", i)] = store.AnswerDigest(text(64, uint32(i))) // a digest is as long for any reply
	}
	w.Pending = nil
	for i := range store.MaxPendingNoise + store.MaxPendingAttention {
		w.Pending = append(w.Pending, store.PendingRow{ID: fmt.Sprintf("msg-%020x", i), Kind: "status",
			Seq: int64(1e12 + i), Bytes: 64 << 10, At: w.Updated})
	}
	// A parked worker's harness state at its bound.
	w.Parks = 1
	w.Park = &store.Park{Gen: 1, Since: w.Updated, Read: 1 << 40,
		State: json.RawMessage(`{"s":"` + strings.Repeat(`\u003c`, (store.MaxParkState-8)/6) + `"}`)}
	raw, err := json.Marshal(r)
	mustOK(t, "marshal", err)
	if len(raw) > 200<<10 {
		t.Errorf("the largest worker record is %d bytes of JSON, over 200 KiB", len(raw))
	}
	v, err := s.PutResource(ctx, r, store.NoVersion)
	mustOK(t, "put the largest worker record", err)
	got, _, err := s.GetResource(ctx, "worker", "largest")
	mustOK(t, "get", err)
	checkSame(t, "largest worker", got, r)
	got.Worker.State = "settled"
	_, err = s.PutResource(ctx, got, v)
	mustOK(t, "settle the largest worker record", err)
}
