package modelproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/modelproxy"
)

// BenchmarkLatency measures, in one run, the latency of a Messages call
// made directly to the provider stand-in and through the proxy in front
// of it: a whole non-streaming call, and the first byte of a streamed
// one. Each iteration makes the four calls in turn (so both paths share
// the machine's conditions), on kept-alive connections; the metrics are
// each path's p50 and p99 in microseconds and the proxied/direct ratios.
func BenchmarkLatency(b *testing.B) {
	prov := providerstandin.New(houseKey, nil)
	defer prov.Close()
	p, err := modelproxy.New(modelproxy.Anthropic, houseKey, workerToken, modelproxy.WithUpstream(prov.URL))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	// call times one call: to its last byte, or (firstByte) to its first.
	call := func(base, token string, stream, firstByte bool) time.Duration {
		req := request(modelproxy.Anthropic, base, token, claudeModel, stream)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var d time.Duration
		if firstByte {
			one := make([]byte, 1)
			if _, err := io.ReadFull(resp.Body, one); err != nil {
				b.Fatal(err)
			}
			d = time.Since(start)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if !firstByte {
			d = time.Since(start)
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return d
	}
	kinds := []struct {
		name              string
		base, token       string
		stream, firstByte bool
	}{
		{"direct-call", prov.URL, houseKey, false, false},
		{"proxy-call", srv.URL, workerToken, false, false},
		{"direct-first-byte", prov.URL, houseKey, true, true},
		{"proxy-first-byte", srv.URL, workerToken, true, true},
	}
	for _, k := range kinds { // warm the connections
		call(k.base, k.token, k.stream, k.firstByte)
	}
	times := make([][]time.Duration, len(kinds))
	b.ResetTimer()
	for range b.N {
		for i, k := range kinds {
			times[i] = append(times[i], call(k.base, k.token, k.stream, k.firstByte))
		}
	}
	b.StopTimer()
	pct := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(q*float64(len(s))))].Nanoseconds()) / 1e3
	}
	for i, k := range kinds {
		b.ReportMetric(pct(times[i], 0.50), k.name+"-p50-µs")
		b.ReportMetric(pct(times[i], 0.99), k.name+"-p99-µs")
	}
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		name := strings.TrimPrefix(kinds[pair[1]].name, "proxy-")
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			b.ReportMetric(pct(times[pair[1]], q.q)/pct(times[pair[0]], q.q), name+"-"+q.name+"-ratio")
		}
	}
	if tot := p.Totals(); tot.Calls != int64(2*b.N+2) {
		b.Errorf("the proxy counted %d calls, want %d", tot.Calls, 2*b.N+2)
	}
}
