package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// index is a history parsed once for the checkers.
type index struct {
	ops []Op

	effects   []*effectOp            // effects and lookups, by call
	byKey     map[string][]*effectOp // the same, by key
	inventory []*inventoryOp
	observes  map[string][]*observeOp       // by worker handle
	created   map[string]bool               // every handle a receipt or inventory row named
	releases  map[protocol.Resource][]int64 // when each release of a resource was called, in order
	mail      map[string][]*mailOp          // by run: next, acknowledge, await, adopt
	posts     map[string][]*postOp          // by run
	runs      []string
}

// Effect answers as a client reads them.
const (
	ansApplied    = "applied"
	ansNotApplied = "not-applied"
	ansAbsent     = "absent"
	ansUnknown    = "unknown"   // lookup's unknown
	ansUncertain  = "uncertain" // anything else: no outcome
)

type effectOp struct {
	Op
	lookup      bool
	key         string
	fingerprint string
	effect      protocol.WorkerEffect
	effectOK    bool
	answer      string          // ans*
	receipt     json.RawMessage // raw receipt bytes of an applied answer
	parsed      protocol.Receipt
}

type inventoryOp struct {
	Op
	rows []protocol.InventoryRow
}

type observeOp struct {
	Op
	handle string
	obs    protocol.Observation
	ok     bool
}

// Mailbox answers.
const (
	mailEmpty    = "empty"
	mailFenced   = "fenced"
	mailDelivery = "delivery"
	mailAdopted  = "adopted" // adopt's {}
	mailFailed   = "failed"  // no 200 answer, or one that does not parse
)

type mailOp struct {
	Op
	run, coordinator, delivery string // delivery: the id an acknowledge names
	answer                     string // mail*
	batch                      string // the delivery's id in the answer
	raw                        json.RawMessage
	messages                   []protocol.MailMessage
}

type postOp struct {
	Op
	worker string
	row    workerapi.PostRequest
	id     string // the message id answered, "" when unknown
}

func newIndex(ops []Op) *index {
	ix := &index{ops: ops, byKey: map[string][]*effectOp{}, observes: map[string][]*observeOp{},
		created: map[string]bool{}, releases: map[protocol.Resource][]int64{}, mail: map[string][]*mailOp{}, posts: map[string][]*postOp{}}
	for _, op := range ops {
		switch op.Route {
		case Effect, Lookup:
			e := parseEffect(op)
			ix.effects = append(ix.effects, e)
			ix.byKey[e.key] = append(ix.byKey[e.key], e)
			if e.answer == ansApplied {
				for _, r := range append(append([]protocol.Resource{}, e.parsed.Created...), e.parsed.Touched...) {
					ix.created[r.Handle] = true
				}
			}
		case Inventory:
			if op.Answered() {
				var inv protocol.Inventory
				if json.Unmarshal(op.Answer, &inv) == nil {
					ix.inventory = append(ix.inventory, &inventoryOp{Op: op, rows: inv.Resources})
					for _, r := range inv.Resources {
						ix.created[r.Resource.Handle] = true
					}
				}
			}
		case Observe:
			o := &observeOp{Op: op}
			var call protocol.WorkerCall
			if json.Unmarshal(op.Body, &call) == nil {
				o.handle = call.Worker.Handle
			}
			o.ok = op.Answered() && json.Unmarshal(op.Answer, &o.obs) == nil
			ix.observes[o.handle] = append(ix.observes[o.handle], o)
		case Next, Acknowledge, Await, Adopt:
			m := parseMail(op)
			ix.mail[m.run] = append(ix.mail[m.run], m)
		case Post:
			p := &postOp{Op: op, worker: op.Client}
			_ = json.Unmarshal(op.Body, &p.row)
			if op.Answered() {
				var a workerapi.PostAnswer
				if json.Unmarshal(op.Answer, &a) == nil {
					p.id = a.ID
				}
			}
			ix.posts[op.Run] = append(ix.posts[op.Run], p)
		}
	}
	byCall := func(s []*effectOp) { sort.SliceStable(s, func(i, j int) bool { return s[i].Call < s[j].Call }) }
	byCall(ix.effects)
	for _, e := range ix.effects {
		if !e.lookup && e.effectOK && e.effect.Type == protocol.OpRelease && e.effect.Resource != nil {
			ix.releases[*e.effect.Resource] = append(ix.releases[*e.effect.Resource], e.Call)
		}
	}
	for _, s := range ix.byKey {
		byCall(s)
	}
	seen := map[string]bool{}
	for run, s := range ix.mail {
		sort.SliceStable(s, func(i, j int) bool { return s[i].Call < s[j].Call })
		if !seen[run] {
			seen[run] = true
			ix.runs = append(ix.runs, run)
		}
	}
	for run, s := range ix.posts {
		sort.SliceStable(s, func(i, j int) bool { return s[i].Call < s[j].Call })
		if !seen[run] {
			seen[run] = true
			ix.runs = append(ix.runs, run)
		}
	}
	sort.Strings(ix.runs)
	for _, s := range ix.observes {
		sort.SliceStable(s, func(i, j int) bool { return s[i].Call < s[j].Call })
	}
	sort.SliceStable(ix.inventory, func(i, j int) bool { return ix.inventory[i].Call < ix.inventory[j].Call })
	return ix
}

func parseEffect(op Op) *effectOp {
	e := &effectOp{Op: op, lookup: op.Route == Lookup, answer: ansUncertain}
	call, err := protocol.DecodeEffectCall(op.Body)
	if err == nil {
		e.key = call.Request.Key
		if fp, err := protocol.Fingerprint(call); err == nil {
			e.fingerprint = fp
		}
		if eff, err := protocol.DecodeWorkerEffect(call.Request.Effect.Effect); err == nil {
			e.effect, e.effectOK = eff, true
		}
	} else {
		// A body galley cannot read: key it by its bytes, so it is compared
		// only with itself.
		var loose struct {
			Request struct{ Key string }
		}
		_ = json.Unmarshal(op.Body, &loose)
		e.key = loose.Request.Key
	}
	if e.fingerprint == "" {
		h := sha256.Sum256(op.Body)
		e.fingerprint = "raw:" + hex.EncodeToString(h[:])
	}
	if !op.Answered() {
		return e
	}
	var a struct {
		Status  string          `json:"status"`
		Receipt json.RawMessage `json:"receipt"`
	}
	if json.Unmarshal(op.Answer, &a) != nil {
		return e
	}
	switch {
	case a.Status == protocol.StatusApplied && len(a.Receipt) > 0:
		e.answer, e.receipt = ansApplied, a.Receipt
		_ = json.Unmarshal(a.Receipt, &e.parsed)
	case a.Status == protocol.StatusNotApplied && !e.lookup:
		e.answer = ansNotApplied
	case a.Status == protocol.StatusAbsent && e.lookup:
		e.answer = ansAbsent
	case a.Status == protocol.StatusUnknown && e.lookup:
		e.answer = ansUnknown
	}
	return e
}

func parseMail(op Op) *mailOp {
	m := &mailOp{Op: op, answer: mailFailed}
	var call protocol.MailboxCall
	_ = json.Unmarshal(op.Body, &call)
	m.run, m.coordinator, m.delivery = call.Run, call.Coordinator, call.Delivery
	if !op.Answered() {
		return m
	}
	if op.Route == Adopt {
		switch string(compact(op.Answer)) {
		case `{}`:
			m.answer = mailAdopted
		case `{"status":"fenced"}`:
			m.answer = mailFenced
		}
		return m
	}
	var a struct {
		Status   string          `json:"status"`
		Delivery json.RawMessage `json:"delivery"`
	}
	if json.Unmarshal(op.Answer, &a) != nil {
		return m
	}
	switch a.Status {
	case protocol.MailEmpty:
		m.answer = mailEmpty
	case protocol.MailFenced:
		m.answer = mailFenced
	case protocol.MailDelivery:
		var d protocol.Delivery
		if json.Unmarshal(a.Delivery, &d) == nil && d.ID != "" {
			m.answer, m.batch, m.raw, m.messages = mailDelivery, d.ID, a.Delivery, d.Messages
		}
	}
	return m
}

func compact(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		switch c {
		case ' ', '\n', '\r', '\t':
		default:
			out = append(out, c)
		}
	}
	return out
}

// messageKey identifies a row across answers and posts when its id is not
// known to the poster: the worker and the row's content.
func messageKey(worker string, kind, subject, body string) string {
	return worker + "\x00" + kind + "\x00" + subject + "\x00" + body
}

func rowKey(m protocol.MailMessage) string {
	w := ""
	if m.Worker != nil {
		w = m.Worker.Handle
	}
	return messageKey(w, m.Kind, m.Subject, m.Body)
}

func (p *postOp) key() string {
	return messageKey(p.worker, p.row.Kind, p.row.Subject, p.row.Body)
}
