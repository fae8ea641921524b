// Package connlimit bounds the connections a server holds: at most PerPeer
// from one remote address and Total in all, so that one client (an agent
// opening thousands of idle connections) cannot take the process's file
// descriptors and, with them, every other client's calls.
//
// At a bound, the new connection evicts the oldest connection that is not
// serving a request (one that has sent no complete request header yet, or
// sits idle between requests), of the same peer when the peer's bound is
// hit; only when every connection is busy is the new one closed at once. A
// flood then churns through its own connections while a client that sends
// its request promptly still gets served, and the descriptors held stay
// bounded whatever the flood's size.
//
// Connections the server trusts (kitchn's, once a request on it proved
// kitchn's token: Trust) leave the counts, up to Reserved of them, and are
// never evicted: kitchn's kept-alive connections are capacity no agent can
// take.
//
// The limits hold only with an http.Server that reports its connections'
// states: Install sets its ConnState and ConnContext hooks.
package connlimit

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of Limits, and the share of the open-file limit Total may take
// (DefaultTotal is lowered to fit it).
const (
	DefaultPerPeer  = 1024
	DefaultTotal    = 4096
	DefaultReserved = 256
)

// Limits are a listener's bounds; zero values take the defaults.
type Limits struct {
	PerPeer  int // concurrent connections from one remote IP address
	Total    int // concurrent connections in all (trusted ones aside)
	Reserved int // trusted connections kept outside the counts
}

// WithDefaults fills in unset limits. Total is at most half the process's
// open-file limit, so that the descriptors the server needs for its files,
// its store and its children stay free.
func (l Limits) WithDefaults() Limits {
	if l.Total <= 0 {
		l.Total = DefaultTotal
		if soft, _, err := NoFile(); err == nil && soft > 0 && soft/2 < uint64(l.Total) {
			l.Total = max(int(soft/2), 16)
		}
	}
	if l.PerPeer <= 0 {
		l.PerPeer = min(DefaultPerPeer, l.Total)
	}
	if l.Reserved <= 0 {
		l.Reserved = DefaultReserved
	}
	return l
}

// Listener is a net.Listener under Limits.
type Listener struct {
	net.Listener
	lim Limits
	log *slog.Logger

	mu       sync.Mutex
	total    int
	trusted  int
	peers    map[string]*peer
	stats    Stats
	lastWarn time.Time
}

type peer struct {
	n    int
	idle list.List // *conn of this peer, oldest first
}

// Stats counts what a Listener did.
type Stats struct {
	Open, Trusted     int   // connections held now (trusted ones apart)
	MaxOpen           int   // the most untrusted connections held at once
	Accepted          int64 // connections accepted
	Evicted, Refused  int64 // closed to make room, closed at once
	PeakPeer, PeakAll int   // bounds in force (PerPeer, Total)
}

// Wrap returns ln under lim (defaults filled in). Refusals and evictions
// are logged to log (nil: not logged), at most once per 10 s.
func Wrap(ln net.Listener, lim Limits, log *slog.Logger) *Listener {
	return &Listener{Listener: ln, lim: lim.WithDefaults(), log: log, peers: map[string]*peer{}}
}

// Limits returns the bounds in force.
func (l *Listener) Limits() Limits { return l.lim }

// Stats returns the counts so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Open, s.Trusted, s.PeakPeer, s.PeakAll = l.total, l.trusted, l.lim.PerPeer, l.lim.Total
	return s
}

// Accept returns the next connection within the limits, evicting or
// refusing as the package comment says. It fails only when the wrapped
// listener does.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := peerKey(nc.LocalAddr(), nc.RemoteAddr())
		l.mu.Lock()
		p := l.peers[key]
		if p == nil {
			p = &peer{}
			l.peers[key] = p
		}
		var victim *conn
		full := false
		switch {
		case p.n >= l.lim.PerPeer:
			victim, full = oldest(&p.idle), true
		case l.total >= l.lim.Total:
			victim, full = l.oldestOfLargestLocked(), true
		}
		if full && victim == nil {
			l.stats.Refused++
			l.warnLocked("connection limit reached and every connection is busy: a new connection was closed", key)
			if p.n == 0 {
				delete(l.peers, key)
			}
			l.mu.Unlock()
			_ = nc.Close()
			continue
		}
		if victim != nil {
			l.stats.Evicted++
			l.warnLocked("connection limit reached: the oldest idle connection was closed for a new one", key)
			l.releaseLocked(victim)
		}
		c := &conn{Conn: nc, l: l, peer: key}
		p.n++
		l.total++
		l.stats.Accepted++
		l.stats.MaxOpen = max(l.stats.MaxOpen, l.total)
		l.makeIdleLocked(c)
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Conn.Close()
		}
		return c, nil
	}
}

// oldestOfLargestLocked is the oldest idle connection of the peer that
// holds the most: at the total bound the peer flooding pays, not one that
// just arrived with a single call.
func (l *Listener) oldestOfLargestLocked() *conn {
	var big *peer
	for _, p := range l.peers {
		if p.idle.Len() > 0 && (big == nil || p.n > big.n) {
			big = p
		}
	}
	if big == nil {
		return nil
	}
	return oldest(&big.idle)
}

func oldest(q *list.List) *conn {
	if e := q.Front(); e != nil {
		return e.Value.(*conn)
	}
	return nil
}

func (l *Listener) warnLocked(msg, peer string) {
	if l.log == nil || time.Since(l.lastWarn) < 10*time.Second {
		return
	}
	l.lastWarn = time.Now()
	l.log.Warn(msg, "peer", peer, "perPeer", l.lim.PerPeer, "total", l.lim.Total,
		"evicted", l.stats.Evicted, "refused", l.stats.Refused)
}

// conn is one accepted connection. Its fields are guarded by l.mu.
type conn struct {
	net.Conn
	l        *Listener
	peer     string
	idle     *list.Element // in its peer's idle list while evictable
	trusted  bool
	released bool
	once     sync.Once
	// tried is set once Trust has run for this connection, so that every
	// later call on it costs one atomic load.
	tried atomic.Bool
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.releaseLocked(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *Listener) makeIdleLocked(c *conn) {
	if c.released || c.trusted || c.idle != nil {
		return
	}
	c.idle = l.peers[c.peer].idle.PushBack(c)
}

func (l *Listener) makeBusyLocked(c *conn) {
	if c.idle == nil {
		return
	}
	l.peers[c.peer].idle.Remove(c.idle)
	c.idle = nil
}

// releaseLocked takes c out of every count, once.
func (l *Listener) releaseLocked(c *conn) {
	if c.released {
		return
	}
	l.makeBusyLocked(c)
	c.released = true
	if c.trusted {
		l.trusted--
		return
	}
	l.total--
	if p := l.peers[c.peer]; p != nil {
		if p.n--; p.n <= 0 {
			delete(l.peers, c.peer)
		}
	}
}

// Install sets srv's ConnState and ConnContext hooks (keeping any already
// set) so that a connection serving a request is never evicted and a
// handler can Trust its connection.
func (l *Listener) Install(srv *http.Server) {
	prevState, prevCtx := srv.ConnState, srv.ConnContext
	srv.ConnState = func(nc net.Conn, s http.ConnState) {
		if c := l.own(nc); c != nil {
			l.mu.Lock()
			switch s {
			case http.StateNew, http.StateIdle:
				l.makeIdleLocked(c)
			case http.StateActive, http.StateHijacked:
				// A hijacked connection is the handler's now: never evict it.
				l.makeBusyLocked(c)
			}
			l.mu.Unlock()
		}
		if prevState != nil {
			prevState(nc, s)
		}
	}
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, nc)
		}
		if c := l.own(nc); c != nil {
			ctx = context.WithValue(ctx, connKey{}, c)
		}
		return ctx
	}
}

// own finds this listener's conn under nc (a TLS connection wraps it).
func (l *Listener) own(nc net.Conn) *conn {
	for nc != nil {
		if c, ok := nc.(*conn); ok && c.l == l {
			return c
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = u.NetConn()
	}
	return nil
}

type connKey struct{}

// Trust takes the connection of the request whose context is ctx out of the
// counts, if there is room among Reserved: it is never evicted and is not
// counted against its peer or the total. A server calls it once a request
// on the connection proved a trusted client (kitchn's token).
func Trust(ctx context.Context) {
	c, _ := ctx.Value(connKey{}).(*conn)
	if c == nil || c.tried.Swap(true) {
		return
	}
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.trusted || c.released || l.trusted >= l.lim.Reserved {
		return
	}
	l.makeBusyLocked(c)
	l.total--
	if p := l.peers[c.peer]; p != nil {
		if p.n--; p.n <= 0 {
			delete(l.peers, c.peer)
		}
	}
	c.trusted = true
	l.trusted++
}

// peerKey is the remote address's IP (the port varies per connection),
// and on loopback the uid that owns the other end (peeruid_linux.go).
func peerKey(local, a net.Addr) string {
	if a == nil {
		return ""
	}
	if t, ok := a.(*net.TCPAddr); ok {
		if l, ok := local.(*net.TCPAddr); ok && t.IP.IsLoopback() {
			if uid, ok := loopbackUID(l, t); ok {
				return t.IP.String() + " uid " + strconv.FormatUint(uint64(uid), 10)
			}
		}
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// NoFile returns the process's open-file limits.
func NoFile() (soft, hard uint64, err error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0, err
	}
	return uint64(r.Cur), uint64(r.Max), nil
}

// RaiseNoFile raises the open-file soft limit to the hard limit and returns
// the limit in force. (Go's runtime does the same at start on Linux; this
// makes it explicit, and true where it does not.)
func RaiseNoFile() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		raised := syscall.Rlimit{Cur: r.Max, Max: r.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(r.Cur), err
		}
		r = raised
	}
	return uint64(r.Cur), nil
}
