package localserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"

	"github.com/galley-run/galley/pkg/harness"
)

// confined reports at start how workers' agents are confined (e), and
// returns h. With no confinement it says so loudly (a WARN line and a line
// on stderr) and h's descriptor declares worker.launch_isolated "partial"
// rather than "supported": a worktree is then isolated only by convention,
// and kitchn counts only supported for a workflow requirement (partial
// keeps the descriptor readable). docs/security.md says what each mode
// covers.
func confined(log *slog.Logger, e harness.Enforcement, h http.Handler) http.Handler {
	switch e.Mode {
	case harness.ConfineUser:
		log.Info("agents are confined: each runs under a uid of its own", "confinement", string(e.Mode), "landlockABI", e.LandlockABI)
		return h
	case harness.ConfineLandlock:
		log.Info("agents are confined by Landlock", "confinement", string(e.Mode), "landlockABI", e.LandlockABI, "why", e.Why)
		return h
	}
	log.Warn("AGENTS ARE NOT CONFINED: every agent can read galley's data folder (kitchn's token, the worker secret, other workers' tokens) and other workspaces; worker.launch_isolated is declared partial",
		"confinement", string(e.Mode), "why", e.Why)
	fmt.Fprintf(os.Stderr, "galley: WARNING: agents are not confined (%s); run galley serve as root or on a kernel with Landlock\n", e.Why)
	return partialIsolation(h)
}

// partialIsolation rewrites the descriptor's worker.launch_isolated to
// partial.
func partialIsolation(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/descriptor" {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		var d map[string]json.RawMessage
		var caps map[string]string
		if rec.Code == http.StatusOK && json.Unmarshal(body, &d) == nil && json.Unmarshal(d["capabilities"], &caps) == nil {
			if _, ok := caps["worker.launch_isolated"]; ok {
				caps["worker.launch_isolated"] = "partial"
				d["capabilities"], _ = json.Marshal(caps)
				if b, err := json.Marshal(d); err == nil {
					body = b
				}
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		_, _ = bytes.NewReader(body).WriteTo(w)
	})
}
