package operator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/store"
)

// Attempts at the operator token (a login, or a request whose bearer
// token is wrong) are counted per client address and in all, per minute
// of the clock, in the house's store, so every process serving the
// operator (many Lambda instances on AWS) counts them together. Past a
// limit an attempt is answered 429 with Retry-After, its token unread,
// until the minute ends. docs/security.md gives the numbers.
const (
	LoginsPerAddress = 10 // attempts a minute from one client address
	LoginsInAll      = 60 // attempts a minute from everywhere
	LoginWindow      = time.Minute
)

// overCap bounds the tallies a handler remembers at their limit (so that
// it refuses their attempts without a store write each).
const overCap = 4096

// limiter counts attempts at the operator token in the store's tallies.
type limiter struct {
	tallies store.Tallies
	now     func() time.Time

	mu sync.Mutex
	// over holds the tallies this process saw reach their limit, each
	// with the end of its window: until then their attempts are refused
	// without a write (a tally only grows within its window).
	over map[string]time.Time
}

// refusal is a throttled attempt's answer.
type refusal struct {
	retryAfter time.Duration
	msg        string
}

func (r *refusal) write(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(seconds(r.retryAfter)))
	writeJSON(w, http.StatusTooManyRequests, errorJSON{r.msg})
}

// window is the tally keys of an attempt from addr at now, and the end of
// their window.
func window(addr string, now time.Time) (mine, all string, end time.Time) {
	start := now.Truncate(LoginWindow)
	w := strconv.FormatInt(start.Unix(), 10)
	return "operator-login#addr#" + addr + "#" + w, "operator-login#all#" + w, start.Add(LoginWindow)
}

// known answers the refusal this process already knows an attempt from
// addr gets now, without a store call; nil when it knows none.
func (l *limiter) known(addr string) *refusal {
	now := l.now()
	mine, all, end := window(addr, now)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case now.Before(l.over[all]):
		return refuseAll(end.Sub(now))
	case now.Before(l.over[mine]):
		return refuseMine(end.Sub(now))
	}
	return nil
}

// count counts an attempt from addr (one atomic write to its address's
// tally, then one to the house's) and answers its refusal when it is
// past a limit. The house's tally counts only the attempts the address's
// allowed, so that one address cannot spend everyone's.
func (l *limiter) count(ctx context.Context, addr string) (*refusal, error) {
	if r := l.known(addr); r != nil {
		return r, nil
	}
	now := l.now()
	mine, all, end := window(addr, now)
	// A tally outlives its window by one, so that a clock a little behind
	// another process's still finds it.
	n, err := l.tallies.AddTally(ctx, mine, end.Add(LoginWindow))
	if err != nil {
		return nil, err
	}
	// The attempt that reaches a limit is the last one let through here:
	// the next is refused before its token is read (a bearer token is
	// read before its attempt is counted, and a right one is not counted).
	if n >= LoginsPerAddress {
		l.remember(mine, end, now)
	}
	if n > LoginsPerAddress {
		return refuseMine(end.Sub(now)), nil
	}
	if n, err = l.tallies.AddTally(ctx, all, end.Add(LoginWindow)); err != nil {
		return nil, err
	}
	if n >= LoginsInAll {
		l.remember(all, end, now)
	}
	if n > LoginsInAll {
		return refuseAll(end.Sub(now)), nil
	}
	return nil, nil
}

func (l *limiter) remember(key string, end, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.over == nil {
		l.over = map[string]time.Time{}
	}
	if len(l.over) >= overCap {
		for k, e := range l.over {
			if !now.Before(e) {
				delete(l.over, k)
			}
		}
		if len(l.over) >= overCap {
			return // the store still refuses, a write each
		}
	}
	l.over[key] = end
}

func refuseMine(wait time.Duration) *refusal {
	return &refusal{wait, fmt.Sprintf("too many attempts at the operator token from this address: at most %d a minute; try again in %d s",
		LoginsPerAddress, seconds(wait))}
}

func refuseAll(wait time.Duration) *refusal {
	return &refusal{wait, fmt.Sprintf("too many attempts at the operator token at this server: at most %d a minute in all; try again in %d s",
		LoginsInAll, seconds(wait))}
}

// seconds is d in whole seconds, rounded up: at least 1.
func seconds(d time.Duration) int { return max(1, int((d+time.Second-1)/time.Second)) }

// clientAddr is the address an attempt comes from, as the connection
// says: the peer's IP on the local server; behind API Gateway and Lambda
// the request context's sourceIp, which the adapter
// (aws-lambda-go-api-proxy's httpadapter.NewV2) puts in RemoteAddr.
// Never a header the client wrote (X-Forwarded-For). An IPv6 address
// counts by its /64, which one client usually holds whole.
func clientAddr(r *http.Request) string {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		if host == "" {
			return "unknown"
		}
		return host
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
