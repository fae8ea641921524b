package localserver

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
)

// confined reports at start how workers' agents are confined (e), and
// returns h. With no confinement it says so loudly (a WARN line and a line
// on stderr) and h's descriptor declares worker.launch_isolated "partial"
// rather than "supported": a worktree is then isolated only by convention,
// and kitchn counts only supported for a workflow requirement (partial
// keeps the descriptor readable). docs/security.md says what each mode
// covers.
func confined(log *slog.Logger, e harness.Enforcement, n harness.NetworkEnforcement, h http.Handler) http.Handler {
	networkConfined(log, n)
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

// networkConfined reports at start how agents' network is confined (n):
// a namespace of its own each, Landlock's TCP rules, or, loudly, nothing.
func networkConfined(log *slog.Logger, n harness.NetworkEnforcement) {
	switch n.Mode {
	case harness.NetNamespace:
		log.Info("agents' network is confined: each runs in a network namespace of its own and reaches only its harness's MCP server, push gate, model proxy and egress proxy",
			"network", string(n.Mode))
		return
	case harness.NetLandlock:
		log.Info("agents' network is confined by Landlock: TCP connections only to their harness's ports (UDP and name resolution stay open)",
			"network", string(n.Mode), "why", n.Why)
		return
	}
	log.Warn("AGENTS' NETWORK IS OPEN: every agent can connect to any host and port this machine reaches, galley's own port included, and send what it holds",
		"network", string(n.Mode), "why", n.Why)
	fmt.Fprintf(os.Stderr, "galley: WARNING: agents' network is open: each agent can connect to any host this machine reaches (%s); run galley serve as root, or on a kernel with Landlock ABI 4 or later\n", n.Why)
}

// partialIsolation rewrites the descriptor's worker.launch_isolated to
// partial.
func partialIsolation(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != contract.RouteDescriptor.Method || r.URL.Path != contract.PathDescriptor {
			h.ServeHTTP(w, r)
			return
		}
		rec := &heldResponse{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		if rec.code == http.StatusOK {
			if d, err := protocol.ParseDescriptor(body); err == nil && d.Capabilities[protocol.CapLaunchIsolated] != "" {
				d.Capabilities[protocol.CapLaunchIsolated] = protocol.SupportPartial
				if b, err := protocol.EncodeDescriptor(d); err == nil {
					body = b
				}
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.code)
		_, _ = bytes.NewReader(body).WriteTo(w)
	})
}

// heldResponse holds a response whole, to be rewritten before it is sent
// (the product links no test kit: not httptest's recorder).
type heldResponse struct {
	header      http.Header
	code        int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *heldResponse) Header() http.Header { return r.header }

func (r *heldResponse) WriteHeader(code int) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = code, true
	}
}

func (r *heldResponse) Write(p []byte) (int, error) {
	r.wroteHeader = true
	return r.body.Write(p)
}
