package egress

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/stripe/smokescreen/pkg/smokescreen/conntrack"
)

// Serve serves the proxy on ln until Shutdown or Close, under the
// connection bounds of Limits.Conns. A Proxy serves one listener.
func (p *Proxy) Serve(ln net.Listener) error {
	lim := p.o.limits
	limited := connlimit.Wrap(ln, lim.Conns, p.log)
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.BodyTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	limited.Install(srv)
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		ln.Close()
		return nil
	case p.srv != nil:
		p.mu.Unlock()
		return errors.New("egress: the proxy is already serving")
	}
	p.srv, p.limited = srv, limited
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		// smokescreen refuses a destination that is this proxy itself.
		p.general.cfg.Port, p.harnessOnly.cfg.Port = uint16(a.Port), uint16(a.Port)
	}
	p.mu.Unlock()
	err := srv.Serve(writeIdleListener{Listener: limited, idle: lim.IdleTimeout})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, waits for the requests in progress until ctx
// ends, and closes every tunnel.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	srv := p.srv
	p.closed = true
	p.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
	}
	p.closeTunnels()
	return err
}

// Close closes the listener, every connection and every tunnel at once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	srv := p.srv
	p.closed = true
	p.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Close()
	}
	p.closeTunnels()
	return err
}

// closeTunnels closes the destination side of each tunnel; goproxy then
// closes the client's side.
func (p *Proxy) closeTunnels() {
	p.tracker.Range(func(k, _ any) bool {
		if ic, ok := k.(*conntrack.InstrumentedConn); ok {
			ic.Close()
		}
		return true
	})
}

// writeIdleListener gives each connection a write deadline of idle from
// every write: a client that stops reading a plain-HTTP response cannot
// hold its connection for longer (tunnels have smokescreen's idle
// timeout, which bounds reads too).
type writeIdleListener struct {
	net.Listener
	idle time.Duration
}

func (l writeIdleListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeIdleConn{Conn: c, idle: l.idle}, nil
}

type writeIdleConn struct {
	net.Conn
	idle time.Duration
}

func (c *writeIdleConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// NetConn is the connection beneath, for connlimit.
func (c *writeIdleConn) NetConn() net.Conn { return c.Conn }
