package gateway

import (
	"fmt"
	"sync"
	"time"
)

// Throttle is a stage's route throttle, as an HTTP API stage's
// DefaultRouteSettings or RouteSettings declare it: a token bucket that
// holds BurstLimit requests and refills at RateLimit a second. A request
// that finds it empty is answered 429 {"message":"Too Many Requests"},
// before its body is read and before any function is invoked.
type Throttle struct {
	RateLimit  float64
	BurstLimit int
}

// WithThrottle throttles the route whose key is routeKey ("POST
// /worker/v1/credential"). An empty key sets the stage's default, which
// every route without a throttle of its own gets, each route its own
// bucket: AWS does not document whether the default is one bucket for the
// stage, and a route of its own is what keeps one route's flood from
// spending another's budget either way.
func WithThrottle(routeKey string, t Throttle) Option {
	return func(g *Gateway) {
		if g.throttleSpec == nil {
			g.throttleSpec = map[string]Throttle{}
		}
		g.throttleSpec[routeKey] = t
	}
}

// buckets makes each route's bucket from the throttles given, checking
// that they name routes of the gateway.
func (g *Gateway) buckets() error {
	keys := map[string]bool{}
	for _, r := range g.routes {
		keys[r.Key()] = true
	}
	for k, t := range g.throttleSpec {
		if k != "" && !keys[k] {
			return fmt.Errorf("gateway: a throttle names route %q, which is not given", k)
		}
		if t.RateLimit < 0 || t.BurstLimit < 0 {
			return fmt.Errorf("gateway: the throttle of route %q is negative", k)
		}
	}
	g.throttles = map[string]*bucket{}
	for k := range keys {
		t, ok := g.throttleSpec[k]
		if !ok {
			t, ok = g.throttleSpec[""]
		}
		if ok {
			g.throttles[k] = &bucket{limit: t}
		}
	}
	return nil
}

// bucket is one route's token bucket.
type bucket struct {
	limit Throttle

	mu     sync.Mutex
	tokens float64
	last   time.Time
	primed bool
}

// take takes a token at now, if one is left.
func (b *bucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	burst := float64(b.limit.BurstLimit)
	if !b.primed {
		b.tokens, b.last, b.primed = burst, now, true
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*b.limit.RateLimit)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// admit reports whether a request on route may pass its throttle.
func (g *Gateway) admit(route string) bool {
	b := g.throttles[route]
	return b == nil || b.take(g.now())
}
