package modelproxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// modifyResponse is the reverse proxy's ModifyResponse: it drops the
// house's account headers and hands the answer to an answerBody, which
// reads a model call's usage on the way.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	for _, h := range accountHeaders {
		resp.Header.Del(h)
	}
	c := resp.Request.Context().Value(callKey{}).(*call)
	// The request is sent: a long answer must not meet its read deadline.
	_ = c.agent.SetReadDeadline(time.Time{})
	c.touch(p.idleTimeout)
	b := &answerBody{rc: resp.Body, c: c, p: p, ok: resp.StatusCode/100 == 2, left: resp.ContentLength}
	if c.route.billed {
		ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
		ct = strings.TrimSpace(strings.ToLower(ct))
		enc := resp.Header.Get("Content-Encoding")
		switch {
		case enc != "" && !strings.EqualFold(enc, "identity"):
			// Not readable here: the call is unmetered.
		case ct == "text/event-stream":
			b.u = &usage{}
			b.sink = newSSEReader(newFieldScanner(p.family.answerPaths(true)...), func(s *fieldScanner) {
				p.family.take(b.u, s, true)
			})
		default:
			b.u = &usage{}
			b.scan = newFieldScanner(p.family.answerPaths(false)...)
			b.sink = b.scan
		}
	}
	resp.Body = b
	return nil
}

// answerBody forwards an answer as it comes and, for a model call, reads
// its usage on the way; at its end (or when the agent stops reading: the
// rest is read, up to drainLimit) the call is counted once.
type answerBody struct {
	rc   io.ReadCloser
	c    *call
	p    *Proxy
	ok   bool // a 2xx answer
	u    *usage
	scan *fieldScanner // a JSON answer's
	sink io.Writer
	eof  bool
	// left is what remains of an answer of known length (-1 unknown): the
	// call is counted before its last bytes go to the agent, so that the
	// agent's next call finds it counted.
	left int64
	once sync.Once
}

func (b *answerBody) Read(buf []byte) (int, error) {
	n, err := b.rc.Read(buf)
	if n > 0 {
		b.c.touch(b.p.idleTimeout)
		if b.sink != nil {
			_, _ = b.sink.Write(buf[:n])
		}
	}
	if b.left >= 0 {
		b.left -= int64(n)
	}
	if err == io.EOF || b.left == 0 {
		b.eof = b.eof || err == io.EOF
		b.once.Do(b.count)
	}
	return n, err
}

func (b *answerBody) Close() error {
	if !b.eof && b.left != 0 && b.sink != nil {
		// The agent stopped reading (or went away): the provider bills the
		// call all the same, so its usage is still read.
		_, _ = io.Copy(io.Discard, io.LimitReader(readerFunc(b.Read), drainLimit))
	}
	err := b.rc.Close()
	b.once.Do(b.count)
	return err
}

func (b *answerBody) count() {
	if !b.c.route.billed {
		return
	}
	if b.scan != nil {
		b.p.family.take(b.u, b.scan, false)
	}
	if b.u == nil || !b.u.seen() {
		if b.ok {
			b.p.meter.unmetered()
			b.p.log.Warn("model proxy: a model call's answer carried no usage the proxy could read", "model", b.c.model)
		}
		return
	}
	model := b.c.model
	if b.u.model != nil {
		model = *b.u.model
	}
	b.p.meter.count(model, b.u.tokens())
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
