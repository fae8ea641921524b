package operator

import (
	"embed"
	"net/http"
	"path"
)

// The console is three files, embedded: no build step, no framework.
// Everything it shows of a worker is set as text (textContent), never
// parsed as markup, and the page allows only its own script and style.
//
//go:embed console/index.html console/app.js console/app.css
var console embed.FS

// csp allows the page its own script, style and API calls, and nothing
// else: no inline script or style, no frames, no other origin.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

func (h *Handler) static(name string) http.HandlerFunc {
	b, err := console.ReadFile("console/" + name)
	if err != nil {
		panic("operator: console file " + name + " is not embedded")
	}
	ct := contentTypes[path.Ext(name)]
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	}
}
