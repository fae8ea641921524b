package localserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/logbuf"
)

// BenchmarkHandler measures the server's own work per read route, without
// the socket: the handler as `galley serve` builds it (the request log a
// buffered JSON line to a file, the bolt store), called with an in-memory
// request. Run it with GOGC=400, the server's setting.
// "bare" does the JSON work a minimal net/http handler would (bearer check,
// decode of the body, encode of the answer), so the difference is what
// galley adds. CPU per call, not throughput: compare ns/op and allocs/op.
func BenchmarkHandler(b *testing.B) {
	data := b.TempDir()
	logFile, err := os.Create(filepath.Join(data, "serve.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	logw := logbuf.New(logFile, 0)
	defer logw.Close()
	srv, err := Start(context.Background(), Options{Listen: "127.0.0.1:0", House: "bench", Data: data,
		WorkerBin: "/bin/true", Logger: logbuf.NewJSONLogger(logw, nil)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	tok, err := os.ReadFile(filepath.Join(data, "private", "token"))
	if err != nil {
		b.Fatal(err)
	}
	auth := "Bearer " + strings.TrimSpace(string(tok))
	h := srv.http.Handler
	serve := func(b *testing.B, h http.Handler, method, path, body string) []byte {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	launch := `{"run":"run-b","request":{"house":"bench","backend":"galley","credential":"galley-token","task":"t","attempt":1,"key":"k-seed","effect":{"executor":"worker","effect":{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"idle"}}}}`
	var ans struct {
		Receipt struct{ Created []struct{ Handle string } }
	}
	if err := json.Unmarshal(serve(b, h, "POST", "/v1/effects", launch), &ans); err != nil || len(ans.Receipt.Created) == 0 {
		b.Fatalf("launch: %v %+v", err, ans)
	}
	observe := fmt.Sprintf(`{"worker":{"kind":"worker","backend":"galley","handle":%q}}`, ans.Receipt.Created[0].Handle)
	routes := []struct{ name, method, path, body string }{
		{"descriptor", "GET", "/v1/descriptor", ""},
		{"observe", "POST", "/v1/workers/observe", observe},
		{"inventory", "GET", "/v1/inventory", ""},
		{"next", "POST", "/v1/deliveries/next", `{"run":"run-empty","coordinator":"c1"}`},
	}
	for _, rt := range routes {
		answer := serve(b, h, rt.method, rt.path, rt.body)
		b.Run(rt.name+"/galley", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				serve(b, h, rt.method, rt.path, rt.body)
			}
		})
		b.Run(rt.name+"/bare", func(b *testing.B) {
			bare := bareHandler(auth, answer)
			b.ReportAllocs()
			for b.Loop() {
				serve(b, bare, rt.method, rt.path, rt.body)
			}
		})
	}
}

// bareHandler checks the bearer, decodes the body, and encodes answer from
// a decoded value: the JSON work of the route without galley.
func bareHandler(auth string, answer []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != auth {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		var in, out map[string]any
		if r.Method == "POST" {
			_ = json.NewDecoder(r.Body).Decode(&in)
		}
		_ = json.Unmarshal(answer, &out)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
