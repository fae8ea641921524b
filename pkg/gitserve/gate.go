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
func PushGate(policy RefPolicy, next http.Handler) http.Handler {
	return BudgetedPushGate(policy, nil, next)
}

// BudgetedPushGate is PushGate that also refuses a push whose pack does not
// fit in budget (nil: no budget), the way it refuses a ref: the pusher sees
// "! [remote rejected]" with the budget's figures, and nothing of the push
// reaches next. Pushes accepted before stay as they are. The pack is read
// to a temporary file before it is forwarded, so a refusal is decided
// before the house repository sees a byte.
func BudgetedPushGate(policy RefPolicy, budget *Budget, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if endpoint(r.URL.Path) != receivePack {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		gzipped := false
		var body io.Reader = r.Body
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "the request body is not gzip", http.StatusBadRequest)
				return
			}
			defer zr.Close()
			body, gzipped = zr, true
		default:
			http.Error(w, "unsupported content encoding", http.StatusUnsupportedMediaType)
			return
		}
		body = &limited{r: body, n: maxBody}
		rest := bufio.NewReaderSize(body, maxPacket)
		var head bytes.Buffer // the command section as read, forwarded as is
		p, err := readCommands(io.TeeReader(rest, &head))
		switch {
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
			} else if err = policy(u); err == nil {
				continue
			}
			reasons[i], refused = reason(err), true
		}
		var pack io.Reader = rest
		if !refused && budget != nil {
			f, n, fits, err := spoolPack(rest, budget.room())
			switch {
			case err != nil:
				http.Error(w, "galley: cannot read the push", http.StatusInternalServerError)
				return
			case !fits || !budget.take(n):
				if f != nil {
					f.Close()
				}
				for i := range reasons {
					reasons[i] = budget.refusal()
				}
				refuse(w, p, reasons)
				return
			}
			defer f.Close()
			pack = f
		}
		if !refused {
			r = r.Clone(r.Context())
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(&head, pack), r.Body}
			if gzipped {
				r.Header.Del("Content-Encoding")
				r.ContentLength = -1
			}
			next.ServeHTTP(w, r)
			return
		}
		for i := range reasons {
			if reasons[i] == "" {
				reasons[i] = "atomic push failure: another ref of this push was refused"
			}
		}
		// Read the rest (the pack) so the client, still sending, is not cut
		// off before it reads the verdict.
		io.Copy(io.Discard, rest)
		refuse(w, p, reasons)
	})
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
// "shallow <id>" lines are not updates.
func readCommands(r io.Reader) (push, error) {
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
		if total += len(line) + 4; total > maxCommands {
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
