package drive

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// connClient is one kept-alive HTTP/1.1 connection driven by one goroutine:
// it writes a request, reads the answer, and reconnects when the server
// closes. It exists because net/http's Transport spends more CPU per call
// (two goroutines per connection and channel hand-offs) than the servers
// being measured, and the load generator shares their two cores: what it
// saves goes to the server, as with wrk. Both galley and the bare baseline
// are driven by the same client, so their ratio is unchanged by it.
type connClient struct {
	host string // host:port
	conn net.Conn
	br   *bufio.Reader
	req  bytes.Buffer
}

func newConnClient(base string) (*connClient, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("connClient speaks plain http, not %q", u.Scheme)
	}
	return &connClient{host: u.Host}, nil
}

// callTimeout bounds one call, so a server that stalls cannot hold a
// client (and the phase that waits for it) for ever.
const callTimeout = 10 * time.Second

// do sends one request and answers the status and body. A call that fails
// on a kept-alive connection (the server may have closed it) is tried once
// more on a new connection: the reads it drives are idempotent.
func (c *connClient) do(method, path, token string, body []byte) (int, []byte, error) {
	fresh := c.conn == nil
	st, b, err := c.try(method, path, token, body)
	if err != nil && !fresh {
		c.close()
		return c.try(method, path, token, body)
	}
	return st, b, err
}

func (c *connClient) try(method, path, token string, body []byte) (int, []byte, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.host, callTimeout)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 16<<10)
	}
	c.req.Reset()
	c.req.WriteString(method)
	c.req.WriteByte(' ')
	c.req.WriteString(path)
	c.req.WriteString(" HTTP/1.1\r\nHost: ")
	c.req.WriteString(c.host)
	c.req.WriteString("\r\nAuthorization: Bearer ")
	c.req.WriteString(token)
	c.req.WriteString("\r\nAccept: application/json\r\n")
	if body != nil {
		c.req.WriteString("Content-Type: application/json\r\nContent-Length: ")
		c.req.WriteString(strconv.Itoa(len(body)))
		c.req.WriteString("\r\n")
	}
	c.req.WriteString("\r\n")
	c.req.Write(body)
	if err := c.conn.SetDeadline(time.Now().Add(callTimeout)); err != nil {
		c.close()
		return 0, nil, err
	}
	if _, err := c.conn.Write(c.req.Bytes()); err != nil {
		c.close()
		return 0, nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.close()
		return 0, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil || resp.Close {
		c.close()
	}
	return resp.StatusCode, b, err
}

func (c *connClient) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}
