package gitserve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RefUpdate is one command of a push.
type RefUpdate struct{ Ref, Old, New string } // Old/New are hex ids; zero id = create/delete

// Delete reports whether the update deletes Ref.
func (u RefUpdate) Delete() bool { return zeroID(u.New) }

// Create reports whether the update creates Ref.
func (u RefUpdate) Create() bool { return zeroID(u.Old) }

// RefPolicy returns nil to allow an update, or an error whose message the
// pusher sees.
type RefPolicy func(RefUpdate) error

// OnlyBranch allows creating and updating (also non-fast-forward)
// refs/heads/<branch> and refuses deletions, tags and every other ref;
// branch "" refuses every push.
func OnlyBranch(branch string) RefPolicy {
	own := "refs/heads/" + branch
	return func(u RefUpdate) error {
		switch {
		case branch == "":
			return errors.New("galley: this worker has no branch and may push nothing")
		case strings.HasPrefix(u.Ref, "refs/tags/"):
			return fmt.Errorf("galley: tags may not be pushed; this worker may push only %s", own)
		case u.Ref != own:
			return fmt.Errorf("galley: this worker may push only %s", own)
		case u.Delete():
			return fmt.Errorf("galley: %s may not be deleted", own)
		}
		return nil
	}
}

// Bounds of a push's command section: git's own packet limit, and room for
// thousands of refs.
const (
	maxPacket   = 65520
	maxCommands = 4 << 20
)

// PushGate checks every receive-pack request's commands with policy before
// anything reaches next. A refused push gets git's own report-status
// (inside side-band-64k when the client asked for it) so `git push` prints
// "! [remote rejected] <ref> (<reason>)"; nothing reaches next. Fetches
// pass.
//
// A push is all or nothing: when one of its updates is refused, every
// other is refused too ("atomic push failure"), so the repository never
// holds half a push the agent did not mean. Push certificates and push
// options are refused (nothing here could check or honour them). A gzipped
// body is forwarded decompressed.
func PushGate(policy RefPolicy, next http.Handler, opts ...GateOption) http.Handler {
	return BudgetedPushGate(policy, nil, next, opts...)
}

// BudgetedPushGate is PushGate that also refuses a push whose pack does not
// fit in budget (nil: no budget), the way it refuses a ref: the pusher sees
// "! [remote rejected]" with the budget's figures, and nothing of the push
// reaches next. Pushes accepted before stay as they are. Each push reserves
// its room in the budget before its pack is read (Budget), and its pack is
// read to a temporary file, no larger than that room, before it is
// forwarded, so a refusal is decided before the house repository sees a
// byte and the disk the gate holds is at most what the budget has left.
//
// Whatever the budget, the gate serves at most a few requests and pushes
// at once, bounds the time a request's body takes to arrive and a fetch's
// body's size, and the time it writes an answer (GateOption; the defaults
// are DefaultPushesInFlight, DefaultRequestsInFlight, DefaultBodyTimeout,
// MaxFetchBody and DefaultRequestTimeout). A push beyond the pushes in
// flight, or whose pack does not arrive in time, is refused with git's
// report-status saying so; a request beyond the requests in flight is
// answered 429.
func BudgetedPushGate(policy RefPolicy, budget *Budget, next http.Handler, opts ...GateOption) http.Handler {
	lim := defaultGateLimits()
	for _, o := range opts {
		o(&lim)
	}
	lim.requests = max(lim.requests, lim.pushes)
	return &gate{
		policy: policy, budget: budget, next: next, lim: lim,
		requests: make(chan struct{}, lim.requests), pushes: make(chan struct{}, lim.pushes),
	}
}

type gate struct {
	policy RefPolicy
	budget *Budget
	next   http.Handler
	lim    gateLimits
	// requests and pushes hold a token for each request, and each push,
	// in flight.
	requests, pushes chan struct{}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case g.requests <- struct{}{}:
		defer func() { <-g.requests }()
	default:
		tooMany(w, fmt.Sprintf("galley: the push gate serves at most %d requests of this worker at once; try again when one has ended", g.lim.requests))
		return
	}
	// The deadline stays after the answer: the next request on the
	// connection sets its own, and a client that stops reading the end of
	// this one's holds the connection no longer.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(g.lim.requestTime))
	body := timeBody(w, r, g.lim.bodyTime)
	if endpoint(r.URL.Path) != receivePack {
		if r.Method == http.MethodPost {
			r.Body = struct {
				io.Reader
				io.Closer
			}{&limited{r: body, n: MaxFetchBody}, body}
		}
		g.next.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	gzipped := false
	var in io.Reader = body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "the request body is not gzip", http.StatusBadRequest)
			return
		}
		defer zr.Close()
		in, gzipped = zr, true
	default:
		http.Error(w, "unsupported content encoding", http.StatusUnsupportedMediaType)
		return
	}
	in = &limited{r: in, n: maxBody}
	select {
	case g.pushes <- struct{}{}:
		defer func() { <-g.pushes }()
	default:
		g.refuseBusy(w, in, body)
		return
	}
	rest := bufio.NewReaderSize(in, maxPacket)
	var head bytes.Buffer // the command section as read, forwarded as is
	p, err := readCommands(io.TeeReader(rest, &head), maxCommands)
	switch {
	case body.expired:
		g.timedOut(w)
		return
	case errors.Is(err, errTooLarge):
		http.Error(w, "the push's command list is too large", http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "malformed push: "+err.Error(), http.StatusBadRequest)
		return
	case p.cert:
		io.Copy(io.Discard, rest)
		http.Error(w, "galley: signed pushes (push certificates) are not accepted here", http.StatusForbidden)
		return
	}

	reasons := make([]string, len(p.updates))
	refused := false
	for i, u := range p.updates {
		var err error
		if p.features["push-options"] {
			err = errors.New("galley: push options are not accepted here")
		} else if err = g.policy(u); err == nil {
			continue
		}
		reasons[i], refused = reason(err), true
	}
	if refused {
		for i := range reasons {
			if reasons[i] == "" {
				reasons[i] = "atomic push failure: another ref of this push was refused"
			}
		}
		// Read the rest (the pack) so the client, still sending, is not cut
		// off before it reads the verdict.
		io.Copy(io.Discard, rest)
		refuse(w, p, reasons)
		return
	}

	r = r.Clone(r.Context())
	if g.budget == nil {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(&head, rest), r.Body}
		if gzipped {
			r.Header.Del("Content-Encoding")
			r.ContentLength = -1
		}
		g.next.ServeHTTP(w, r)
		return
	}
	room := g.budget.reserve()
	if room == 0 {
		io.Copy(io.Discard, rest)
		refuse(w, p, same(len(p.updates), g.budget.refusal()))
		return
	}
	f, n, fits, err := spoolPack(rest, room, g.lim.spoolDir)
	switch {
	case body.expired:
		g.budget.settle(room, 0)
		refuse(w, p, same(len(p.updates), g.timeoutReason()))
		return
	case errors.Is(err, io.ErrUnexpectedEOF):
		g.budget.settle(room, 0)
		http.Error(w, "galley: the push ended before its declared length", http.StatusBadRequest)
		return
	case err != nil:
		g.budget.settle(room, 0)
		http.Error(w, "galley: cannot read the push", http.StatusInternalServerError)
		return
	case !fits:
		g.budget.settle(room, 0)
		reason := g.budget.refusal()
		io.Copy(io.Discard, rest) // so the pusher, still sending, reads the verdict
		refuse(w, p, same(len(p.updates), reason))
		return
	}
	g.budget.settle(room, n)
	defer f.Close()
	// The whole body now has a length, so next need not spool it again.
	r.ContentLength, r.TransferEncoding = int64(head.Len())+n, nil
	r.Header.Del("Content-Encoding")
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(&head, f), r.Body}
	g.next.ServeHTTP(w, r)
}

// refuseBusy refuses a push beyond the pushes in flight with git's
// report-status, from the first line of its commands (all it reads into
// memory), or with a 429 when that line is not a command.
func (g *gate) refuseBusy(w http.ResponseWriter, in io.Reader, body *timedBody) {
	msg := fmt.Sprintf("galley: this worker has %d pushes in flight, the most its push gate takes at once; push again when they have ended", g.lim.pushes)
	p, err := readCommands(in, maxPacket)
	if body.expired {
		g.timedOut(w)
		return
	}
	if len(p.updates) == 0 || (err != nil && !errors.Is(err, errTooLarge)) {
		tooMany(w, msg)
		return
	}
	io.Copy(io.Discard, in)
	refuse(w, p, same(len(p.updates), msg))
}

func (g *gate) timeoutReason() string {
	return fmt.Sprintf("galley: the push did not arrive within %s, the push gate's limit; its pack was dropped", g.lim.bodyTime)
}

// timedOut answers a request whose body did not arrive in time, before its
// commands were read.
func (g *gate) timedOut(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	http.Error(w, g.timeoutReason(), http.StatusRequestTimeout)
}

// same is n copies of reason.
func same(n int, reason string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = reason
	}
	return out
}

// push is the parsed command section of a receive-pack request.
type push struct {
	updates  []RefUpdate
	features map[string]bool
	cert     bool
}

// readCommands reads pkt-lines up to the flush-pkt that ends the command
// list, the way git receive-pack does: a trailing newline is dropped, and
// capabilities follow a NUL (on the first command, though any is honoured);
// "shallow <id>" lines are not updates. Past limit bytes it stops with
// errTooLarge, returning the commands read so far.
func readCommands(r io.Reader, limit int) (push, error) {
	p := push{features: map[string]bool{}}
	total := 0
	for {
		line, flush, err := readPacket(r)
		if err != nil {
			return p, err
		}
		if flush {
			return p, nil
		}
		if total += len(line) + 4; total > limit {
			return p, errTooLarge
		}
		line = strings.TrimSuffix(line, "\n")
		line, caps, hasCaps := strings.Cut(line, "\x00")
		if hasCaps {
			for _, c := range strings.Fields(caps) {
				name, _, _ := strings.Cut(c, "=")
				p.features[name] = true
			}
		}
		if strings.HasPrefix(line, "shallow ") {
			continue
		}
		if line == "push-cert" {
			p.cert = true
			return p, nil
		}
		old, rest, ok1 := strings.Cut(line, " ")
		nw, ref, ok2 := strings.Cut(rest, " ")
		if !ok1 || !ok2 || !objectID(old) || len(nw) != len(old) || !objectID(nw) || ref == "" {
			return p, errors.New("expected <old> <new> <ref>")
		}
		p.updates = append(p.updates, RefUpdate{Ref: ref, Old: old, New: nw})
	}
}

// readPacket reads one pkt-line: its payload, or flush for a flush-pkt.
func readPacket(r io.Reader) (string, bool, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", false, fmt.Errorf("truncated command list: %w", unwrapLimit(err))
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	switch {
	case err != nil:
		return "", false, errors.New("bad pkt-line length")
	case n == 0:
		return "", true, nil
	case n < 5 || n > maxPacket: // 1-3 are special packets, 4 empty: none belongs here
		return "", false, errors.New("bad pkt-line length")
	}
	buf := make([]byte, n-4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", false, fmt.Errorf("truncated command list: %w", unwrapLimit(err))
	}
	return string(buf), false, nil
}

// refuse answers the push with git's report-status: every update refused
// with its reason, after a "remote:" line saying why.
func refuse(w http.ResponseWriter, p push, reasons []string) {
	if !p.features["report-status"] && !p.features["report-status-v2"] {
		// The client asked for no report, so it could show none.
		http.Error(w, "galley: push refused: "+reasons[0], http.StatusForbidden)
		return
	}
	var report bytes.Buffer
	report.WriteString(pkt("unpack ok\n"))
	var msg strings.Builder
	for i, u := range p.updates {
		report.WriteString(pkt("ng " + u.Ref + " " + reasons[i] + "\n"))
		if !strings.HasPrefix(reasons[i], "atomic push failure") {
			fmt.Fprintf(&msg, "push of %s refused: %s\n", u.Ref, reasons[i])
		}
	}
	report.WriteString("0000")

	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	chunk := 0
	switch {
	case p.features["side-band-64k"]:
		chunk = maxPacket - 5
	case p.features["side-band"]:
		chunk = 1000 - 5
	}
	if chunk == 0 {
		w.Write(report.Bytes())
		return
	}
	var out bytes.Buffer
	band(&out, 2, []byte(msg.String()), chunk) // progress: git prints it as "remote: ..."
	band(&out, 1, report.Bytes(), chunk)
	out.WriteString("0000")
	w.Write(out.Bytes())
}

// band writes data to out as side-band packets of channel ch.
func band(out *bytes.Buffer, ch byte, data []byte, chunk int) {
	for len(data) > 0 {
		n := min(len(data), chunk)
		out.WriteString(pkt(string(ch) + string(data[:n])))
		data = data[n:]
	}
}

// pkt frames s as a pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// reason is err's message fit for one report-status line.
func reason(err error) string {
	s := strings.Join(strings.FieldsFunc(err.Error(), func(r rune) bool { return r < 0x20 || r == 0x7f }), " ")
	if s == "" {
		s = "refused"
	}
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

func objectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func zeroID(s string) bool { return s != "" && strings.Trim(s, "0") == "" }

// limited reads at most n bytes of r and fails with errTooLarge past them.
type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func unwrapLimit(err error) error {
	if errors.Is(err, errTooLarge) {
		return errTooLarge
	}
	return err
}
