package fakeapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// call posts body to path with token and answers the status.
func call(t *testing.T, f *fakeapi.Server, token, path string, body any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestParkAsGalley: the fake takes a parking as galley does: in turn,
// with a state that is a JSON object within its bound, the same report
// again alike and another under its number refused; a resume voids the
// parked harness's credential, and the resumed harness, ready, awaits the
// reply to the question it parked in.
func TestParkAsGalley(t *testing.T) {
	f := fakeapi.New(workerapi.Self{Handle: "w-1"}, "tok-1")
	t.Cleanup(f.Close)
	state := json.RawMessage(`{"v":1}`)
	if s := call(t, f, "tok-1", workerapi.PathPost, workerapi.PostRequest{Kind: protocol.MsgQuestion, Body: "v1 or v2?"}); s != 200 {
		t.Fatalf("question: %d", s)
	}
	for name, c := range map[string]struct {
		req  workerapi.ParkRequest
		want int
	}{
		"out of turn":   {workerapi.ParkRequest{Parking: 2, State: state}, 400},
		"number zero":   {workerapi.ParkRequest{Parking: 0, State: state}, 400},
		"not an object": {workerapi.ParkRequest{Parking: 1, State: json.RawMessage(`[1]`)}, 400},
		"too large":     {workerapi.ParkRequest{Parking: 1, State: json.RawMessage(`{"s":"` + strings.Repeat("x", workerapi.MaxParkState) + `"}`)}, 400},
	} {
		if s := call(t, f, "tok-1", workerapi.PathPark, c.req); s != c.want {
			t.Errorf("parking %s: %d, want %d", name, s, c.want)
		}
	}
	if f.Snapshot().Count(workerapi.PathPark) != 0 {
		t.Fatal("a refused parking was taken")
	}
	if s := call(t, f, "tok-1", workerapi.PathPark, workerapi.ParkRequest{Parking: 1, Read: 0, State: state}); s != 200 {
		t.Fatalf("parking 1: %d", s)
	}
	if s := call(t, f, "tok-1", workerapi.PathPark, workerapi.ParkRequest{Parking: 1, Read: 0, State: json.RawMessage(`{ "v": 1 }`)}); s != 200 {
		t.Fatalf("parking 1 again: %d", s)
	}
	if s := call(t, f, "tok-1", workerapi.PathPark, workerapi.ParkRequest{Parking: 1, Read: 3, State: state}); s != 400 {
		t.Fatalf("parking 1 with another cursor: %d, want 400", s)
	}
	if snap := f.Snapshot(); snap.Count(workerapi.PathPark) != 1 || snap.State != protocol.StateAwaitingReply {
		t.Fatalf("after the parking: %d parkings taken, state %s", snap.Count(workerapi.PathPark), snap.State)
	}

	f.Message("still there?")
	if err := f.Resume("tok-2"); err != nil {
		t.Fatal(err)
	}
	if err := f.Resume("tok-3"); err == nil {
		t.Fatal("a worker not parked was resumed")
	}
	if s := call(t, f, "tok-1", workerapi.PathSelf, workerapi.SelfRequest{}); s != http.StatusUnauthorized {
		t.Fatalf("the parked harness's credential after the resume: %d, want 401", s)
	}
	if s := call(t, f, "tok-2", workerapi.PathReady, workerapi.ReadyRequest{Evidence: "started"}); s != 200 {
		t.Fatalf("ready with the resumed credential: %d", s)
	}
	if st := f.Snapshot().State; st != protocol.StateAwaitingReply {
		t.Fatalf("resumed in its ask, ready: state %s, want awaiting-reply", st)
	}
	if s := call(t, f, "tok-2", workerapi.PathPark, workerapi.ParkRequest{Parking: 2, Read: 1, State: state}); s != 200 {
		t.Fatalf("the second parking: %d", s)
	}
}
