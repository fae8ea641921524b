package localserver

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Binding is the kitchn backend binding for this server, to paste into the
// house policy.
func (s *Server) Binding() string { return Binding(s.opts.Backend, s.opts.Credential, s.Endpoint) }

// Binding is the kitchn backend binding of an endpoint.
func Binding(backend, credential, endpoint string) string {
	b, _ := json.MarshalIndent(map[string]any{"backend": map[string]string{
		"kind": "http", "backend": backend, "credential": credential, "endpoint": endpoint,
	}}, "", "  ")
	return string(b)
}

// PrintReady tells the operator where galley serves, where the token lives
// and what to paste into the house policy.
func PrintReady(w io.Writer, o Options, endpoint, tokenFile string) {
	fmt.Fprintf(w, "galley serving house %s (backend %s) at %s\n", o.House, o.Backend, endpoint)
	fmt.Fprintf(w, "bearer token: %s (mode 600; copy it to <registry>/private/%s/credentials/%s)\n",
		tokenFile, o.House, o.Credential)
	fmt.Fprintf(w, "kitchn binding for the house policy:\n%s\n", Binding(o.Backend, o.Credential, endpoint))
	if o.OperatorTokenFile != "" {
		fmt.Fprintf(w, "operator console: %s/operator/console (operator token: %s; bin/galley workers, events, cancel, revoke)\n", endpoint, o.OperatorTokenFile)
	}
}

// Ready is what PrintReady's lines say, as a program that started galley
// serve reads them (the benchmark scripts): the format is spelled here
// once, beside PrintReady.
type Ready struct {
	House, Backend, Endpoint, TokenFile, OperatorTokenFile string
}

// ParseLine adds what one line of PrintReady says to r.
func (r *Ready) ParseLine(line string) {
	if rest, ok := strings.CutPrefix(line, "galley serving house "); ok {
		var h, b, u string
		if _, err := fmt.Sscanf(rest, "%s (backend %s at %s", &h, &b, &u); err == nil {
			r.House, r.Backend, r.Endpoint = h, strings.TrimSuffix(b, ")"), u
		}
	}
	if rest, ok := strings.CutPrefix(line, "bearer token: "); ok {
		r.TokenFile, _, _ = strings.Cut(rest, " ")
	}
	if _, rest, ok := strings.Cut(line, "(operator token: "); ok {
		r.OperatorTokenFile, _, _ = strings.Cut(rest, ";")
	}
}
