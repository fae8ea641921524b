package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// Times with nanoseconds and a non-UTC zone: a store must keep the instant
// to the nanosecond (not necessarily the zone).
var (
	t1 = time.Date(2026, 11, 29, 18, 3, 22, 123456789, time.UTC)
	t2 = time.Date(2026, 11, 29, 23, 33, 22, 987654321, time.FixedZone("IST", 5*3600+1800))
	t3 = time.Date(2027, 1, 2, 3, 4, 5, 6, time.UTC)
)

// receipt is stored and replayed byte for byte: the odd spacing, the
// escapes, the HTML characters and the key order must all survive, which a
// store that re-encodes JSON would lose.
const receipt = "{\"reference\":\"ref-1\",  \"created\":[{\"kind\":\"worker\",\"backend\":\"b\",\"handle\":\"w-1\"}],\n\t\"touched\":[ ],\"note\":\"<a&b> \\u00e9 é \\\"q\\\"\"}"

func i64(n int64) *int64 { return &n }

func fullEffect(key string) store.Effect {
	return store.Effect{
		Key:          key,
		Fingerprint:  "sha256:0123456789abcdef",
		Operation:    protocol.OpLaunch,
		State:        store.EffectApplied,
		AbsentSince:  t1,
		Lease:        "lease-1",
		LeaseExpires: t2,
		Plan:         json.RawMessage(`{"worker": "w-1",   "base":"abc123"}`),
		NotActed:     true,
		Receipt:      json.RawMessage(receipt),
		Updated:      t3,
	}
}

func fullResource(kind, handle string) store.Resource {
	return store.Resource{
		Kind:     kind,
		Handle:   handle,
		Owner:    "key-" + handle,
		Created:  t1,
		Released: true,
		Path:     "/var/galley/worktrees/" + handle,
		Cleanup:  store.CleanupWorkspace,
		Worker: &store.Worker{
			Run:      "run-1",
			Task:     "task-1",
			Role:     "implementer",
			Branch:   "galley/" + handle,
			Worktree: "wt-" + handle,
			Brief:    "Do the thing.\nThen the other thing: é ✓ <b>",
			Agent:    &protocol.AgentSelection{Agent: "claude", Model: "opus", Effort: "high"},
			State:    protocol.StateAwaitingReply,
			Outcome:  protocol.OutcomeSucceeded,
			// An unanswered question maps to "": the entry must survive.
			CredentialClaim: "sha256:fedcba9876543210",
			CredentialJKT:   "jkt-0123456789abcdef",
			Questions:       map[string]string{"q-1": "", "q-2": "yes"},
			Usage: &protocol.UsageReport{
				Source: "agent",
				Agent:  "claude",
				Model:  "opus",
				// A known zero differs from an unknown (nil) count.
				Tokens: &protocol.Tokens{Input: i64(1200), Output: i64(340), CacheRead: i64(5), CacheWrite: i64(0)},
				Cost:   &protocol.Cost{Amount: 123456, Basis: "list"},
			},
			Pending: []store.PendingRow{
				{ID: "msg-1", Kind: protocol.MsgStatus, Seq: 7, Bytes: 12, At: t2},
				{ID: "msg-2", Kind: protocol.MsgQuestion, Seq: 9, Bytes: 3, At: t2.Add(time.Second)},
			},
			CredentialNonce:  "n-0123456789abcdef",
			FinalReportUntil: t2.Add(2 * time.Minute),
			AgentUID:         1<<29 + 42,
			Exited:           true,
			TaskARN:          "arn:aws:ecs:us-east-1:000000000000:task/galley/0123456789abcdef",
			Parks:            2,
			Park: &store.Park{Gen: 2, Since: t2, Read: 17, State: json.RawMessage(`{"v":1,"agent":"line 4","wait":"ask"}`),
				Resume: t2.Add(time.Hour), Started: true},
			Updated: t2,
		},
	}
}

func fullMailbox(run string) store.Mailbox {
	return store.Mailbox{
		Run:        run,
		Reader:     "coord-2",
		Epoch:      3,
		Seen:       []string{"coord-1", "coord-0"},
		Superseded: []string{"coord-1"},
		Acked:      7,
		Batch:      &store.Batch{ID: "batch-3", From: 8, To: 12},
		Batches:    3,
	}
}

func fullMessage(id string) store.Message {
	return store.Message{
		Seq: 99, // the store assigns the sequence and must overwrite this
		Row: protocol.MailMessage{
			ID:      id,
			Kind:    protocol.MsgWorkerDone,
			Worker:  &protocol.Resource{Kind: protocol.KindWorker, Backend: "galley", Handle: "w-1"},
			Outcome: protocol.OutcomeFailed,
			Subject: "done",
			Body:    "body of " + id + " é\n<end>",
		},
		At: t2,
	}
}

func fullInboxItem(key string) store.InboxItem {
	return store.InboxItem{
		Seq:      99, // assigned by the store
		Key:      key,
		Kind:     "reply",
		Question: "q-1",
		Body:     "answer for " + key + " é",
		At:       t2,
	}
}

// testFixtures fails when a record gains a field that the fixtures leave
// unset, so that the round trips keep covering every field.
func testFixtures(t *testing.T) {
	for name, v := range map[string]any{
		"Effect":    fullEffect("k"),
		"Resource":  fullResource("worker", "w"),
		"Mailbox":   fullMailbox("r"),
		"Message":   fullMessage("m"),
		"InboxItem": fullInboxItem("k"),
	} {
		var missing []string
		unsetFields(reflect.ValueOf(v), name, &missing)
		if len(missing) > 0 {
			t.Errorf("fixture leaves fields unset: %s", strings.Join(missing, ", "))
		}
	}
}

var timeType = reflect.TypeFor[time.Time]()

func unsetFields(v reflect.Value, path string, out *[]string) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			*out = append(*out, path)
		} else if v.Elem().Kind() == reflect.Struct {
			unsetFields(v.Elem(), path, out)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			if v.Interface().(time.Time).IsZero() {
				*out = append(*out, path)
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.IsExported() {
				unsetFields(v.Field(i), path+"."+f.Name, out)
			}
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			*out = append(*out, path)
		} else if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct {
			for i := 0; i < v.Len(); i++ {
				unsetFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
			}
		}
	default:
		if v.IsZero() {
			*out = append(*out, path)
		}
	}
}

// normalize returns a deep copy of v in which what a store need not keep is
// made canonical: times are in UTC without a monotonic reading, and empty
// slices and maps are nil. Everything else, raw JSON bytes included, must
// come back exactly.
func normalize(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type().Elem())
		out.Elem().Set(normalize(v.Elem()))
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return reflect.Zero(v.Type())
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := 0; i < v.Len(); i++ {
			out.Index(i).Set(normalize(v.Index(i)))
		}
		return out
	case reflect.Map:
		if v.Len() == 0 {
			return reflect.Zero(v.Type())
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), normalize(it.Value()))
		}
		return out
	case reflect.Struct:
		if v.Type() == timeType {
			return reflect.ValueOf(v.Interface().(time.Time).UTC())
		}
		out := reflect.New(v.Type()).Elem()
		out.Set(v)
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				out.Field(i).Set(normalize(v.Field(i)))
			}
		}
		return out
	}
	return v
}

func same(got, want any) bool {
	return reflect.DeepEqual(normalize(reflect.ValueOf(got)).Interface(), normalize(reflect.ValueOf(want)).Interface())
}

// checkSame fails t when got and want differ beyond what normalize allows.
func checkSame(t *testing.T, what string, got, want any) {
	t.Helper()
	if !same(got, want) {
		t.Errorf("%s differs:\n got: %s\nwant: %s", what, show(got), show(want))
	}
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

// wantKind fails t unless err has kind k.
func wantKind(t *testing.T, what string, err error, k galleyerr.Kind) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, k)
		return
	}
	if got := galleyerr.KindOf(err); got != k {
		t.Errorf("%s: error %q has kind %v, want %v", what, err, got, k)
	}
}

// mustOK stops the test on an unexpected error.
func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
