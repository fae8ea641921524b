package localserver

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
)

// TestConfinedDescriptor: unconfined, the descriptor declares
// worker.launch_isolated partial and keeps everything else; confined, it
// is left alone.
func TestConfinedDescriptor(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"backend":"galley","house":"h","capabilities":{"worker.launch_isolated":"supported","worker.cancel":"supported"}}`)
	})
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		mode harness.Confinement
		want string
	}{{harness.ConfineNone, "partial"}, {harness.ConfineUser, "supported"}, {harness.ConfineLandlock, "supported"}} {
		rec := httptest.NewRecorder()
		confined(log, harness.Enforcement{Mode: tc.mode}, harness.NetworkEnforcement{Mode: harness.NetNamespace}, api).ServeHTTP(rec, httptest.NewRequest(contract.RouteDescriptor.Method, contract.PathDescriptor, nil))
		var d struct {
			Backend      string
			Capabilities map[string]string
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil || rec.Code != 200 {
			t.Fatalf("%s: %d %v %s", tc.mode, rec.Code, err, rec.Body)
		}
		if _, err := protocol.ParseDescriptor(rec.Body.Bytes()); err != nil {
			t.Errorf("%s: the client cannot read the descriptor %s: %v", tc.mode, rec.Body, err)
		}
		if d.Capabilities["worker.launch_isolated"] != tc.want || d.Capabilities["worker.cancel"] != "supported" || d.Backend != "galley" {
			t.Errorf("%s: descriptor %+v", tc.mode, d)
		}
	}
}
