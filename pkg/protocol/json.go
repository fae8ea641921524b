package protocol

import (
	"strconv"
	"unicode/utf8"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// This file holds a small JSON reader (jsonwrite.go its writer).
// encoding/json cannot tell a present field from an absent one, matches
// keys case-insensitively, and silently turns invalid UTF-8 into U+FFFD;
// the protocol needs all three told apart, so the decoders read a tree of
// values from this reader instead. It accepts exactly the documents
// json.Valid accepts (the fuzz tests hold it to that) and decodes strings
// the way encoding/json does, flagging the ones encoding/json would have
// repaired.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

var jkindNames = [...]string{jNull: "null", jBool: "a boolean", jNumber: "a number", jString: "a string", jArray: "an array", jObject: "an object"}

// jvalue is one JSON value. For a string, s is the decoded text and bad says
// it held invalid UTF-8 or an unpaired surrogate escape (replaced by U+FFFD
// in s, as encoding/json does). For a number, s is the literal. kids holds an
// array's elements (with empty keys) or an object's members, in input order;
// an object keeps duplicate keys, and the last one wins.
type jvalue struct {
	kind       jkind
	bad        bool
	b          bool
	start, end int // the value's span in the input
	s          string
	kids       []jmember
}

type jmember struct {
	key    string
	keyBad bool
	val    jvalue
}

// get returns the last member named key: duplicate keys are tolerated and
// the last one wins, as with encoding/json. Keys match exactly.
func (v *jvalue) get(key string) (*jvalue, bool) {
	for i := len(v.kids) - 1; i >= 0; i-- {
		if v.kids[i].key == key && !v.kids[i].keyBad {
			return &v.kids[i].val, true
		}
	}
	return nil, false
}

// maxDepth matches encoding/json's nesting limit, so that both accept the
// same documents.
const maxDepth = 10000

type jparser struct {
	data  []byte
	pos   int
	depth int
	// stack collects the members of the objects and arrays being read; each
	// one gets an exact-size copy when it closes, one allocation apiece.
	stack []jmember
}

// parseJSON reads exactly one JSON value, with only whitespace around it.
// Its errors are all of kind Malformed and name a byte offset, never content.
func parseJSON(data []byte) (jvalue, error) {
	p := jparser{data: data, stack: make([]jmember, 0, 16)}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return jvalue{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return jvalue{}, p.fail("data after the JSON value")
	}
	return v, nil
}

func (p *jparser) fail(what string) error {
	return galleyerr.E(galleyerr.Malformed, "not JSON: "+what+" at byte "+strconv.Itoa(p.pos))
}

func (p *jparser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jparser) value() (jvalue, error) {
	if p.pos >= len(p.data) {
		return jvalue{}, p.fail("unexpected end")
	}
	start := p.pos
	var v jvalue
	var err error
	switch c := p.data[p.pos]; {
	case c == '{':
		v, err = p.composite(jObject, '}')
	case c == '[':
		v, err = p.composite(jArray, ']')
	case c == '"':
		v.kind = jString
		v.s, v.bad, err = p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		v.kind = jNumber
		if err = p.number(); err == nil {
			v.s = string(p.data[start:p.pos])
		}
	case c == 't':
		v.kind, v.b = jBool, true
		err = p.literal("true")
	case c == 'f':
		v.kind = jBool
		err = p.literal("false")
	case c == 'n':
		v.kind = jNull
		err = p.literal("null")
	default:
		err = p.fail("unexpected character")
	}
	if err != nil {
		return jvalue{}, err
	}
	v.start, v.end = start, p.pos
	return v, nil
}

func (p *jparser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.fail("bad literal")
	}
	p.pos += len(word)
	return nil
}

// composite reads an object or an array, whose opening byte is at p.pos.
func (p *jparser) composite(kind jkind, closer byte) (jvalue, error) {
	p.depth++
	if p.depth > maxDepth {
		return jvalue{}, p.fail("nesting too deep")
	}
	p.pos++
	base := len(p.stack)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == closer {
		p.pos++
		p.depth--
		return jvalue{kind: kind}, nil
	}
	for {
		var m jmember
		if kind == jObject {
			if p.pos >= len(p.data) || p.data[p.pos] != '"' {
				return jvalue{}, p.fail("expected a field name")
			}
			var err error
			if m.key, m.keyBad, err = p.str(); err != nil {
				return jvalue{}, err
			}
			p.skipSpace()
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return jvalue{}, p.fail("expected ':'")
			}
			p.pos++
			p.skipSpace()
		}
		val, err := p.value()
		if err != nil {
			return jvalue{}, err
		}
		m.val = val
		p.stack = append(p.stack, m)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return jvalue{}, p.fail("unexpected end")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case closer:
			p.pos++
			p.depth--
			kids := make([]jmember, len(p.stack)-base)
			copy(kids, p.stack[base:])
			clear(p.stack[base:]) // drop references for the collector
			p.stack = p.stack[:base]
			return jvalue{kind: kind, kids: kids}, nil
		default:
			return jvalue{}, p.fail("expected ',' or a closing bracket")
		}
	}
}

func (p *jparser) number() error {
	d := p.data
	i := p.pos
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		p.pos = i
		return p.fail("bad number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return p.fail("bad number")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return p.fail("bad number")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	p.pos = i
	return nil
}

// str reads a string literal at p.pos (which holds '"').
func (p *jparser) str() (string, bool, error) {
	d := p.data
	start := p.pos + 1
	i := start
	// Fast path: plain ASCII without escapes, the common case.
	for i < len(d) {
		c := d[i]
		if c == '"' {
			p.pos = i + 1
			if i-start <= maxInterned {
				if s, ok := interned[string(d[start:i])]; ok {
					return s, false, nil
				}
			}
			return string(d[start:i]), false, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		i++
	}
	buf := make([]byte, 0, i-start+16)
	buf = append(buf, d[start:i]...)
	bad := false
	for {
		if i >= len(d) {
			p.pos = i
			return "", false, p.fail("unterminated string")
		}
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return string(buf), bad, nil
		case c < 0x20:
			p.pos = i
			return "", false, p.fail("control character in a string")
		case c < utf8.RuneSelf && c != '\\':
			buf = append(buf, c)
			i++
		case c == '\\':
			if i+1 >= len(d) {
				p.pos = i
				return "", false, p.fail("unterminated string")
			}
			switch e := d[i+1]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
				i += 2
			case 'b':
				buf = append(buf, '\b')
				i += 2
			case 'f':
				buf = append(buf, '\f')
				i += 2
			case 'n':
				buf = append(buf, '\n')
				i += 2
			case 'r':
				buf = append(buf, '\r')
				i += 2
			case 't':
				buf = append(buf, '\t')
				i += 2
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					p.pos = i
					return "", false, p.fail("bad \\u escape")
				}
				i += 6
				if r >= 0xD800 && r < 0xDC00 {
					// A high surrogate pairs only with a following low one;
					// otherwise it stands alone and becomes U+FFFD, and
					// whatever follows is read on its own (as encoding/json).
					if i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' {
						if r2, ok := hex4(d, i+2); ok && r2 >= 0xDC00 && r2 < 0xE000 {
							buf = utf8.AppendRune(buf, (r-0xD800)<<10+(r2-0xDC00)+0x10000)
							i += 6
							continue
						}
					}
					buf = utf8.AppendRune(buf, utf8.RuneError)
					bad = true
					continue
				}
				if r >= 0xDC00 && r < 0xE000 {
					buf = utf8.AppendRune(buf, utf8.RuneError)
					bad = true
					continue
				}
				buf = utf8.AppendRune(buf, r)
			default:
				p.pos = i
				return "", false, p.fail("bad escape")
			}
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				bad = true
			}
			buf = utf8.AppendRune(buf, r)
			i += size
		}
	}
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// interned holds the field names and enumerated values of the protocol, so
// that reading them allocates nothing: most strings of a body are these.
var interned = func() map[string]string {
	words := []string{
		"run", "request", "house", "backend", "credential", "task", "attempt", "key",
		"effect", "executor", "type", "role", "workspace", "brief", "branch", "pinned",
		"agent", "worker", "question", "body", "resource", "kind", "handle", "head",
		"report_path", "model", "effort", "coordinator", "delivery", "waitMs", "status",
		"receipt", "reference", "created", "touched", "reason", "retryAfterSeconds",
		"capability", "state", "outcome", "resources", "owner", "liveness", "report",
		"source", "tokens", "input", "output", "cacheRead", "cacheWrite", "cost",
		"amount", "basis", "id", "messages", "unreadable", "subject", "capabilities",
		"workerSelection", "families",
		ExecutorWorker, OpLaunch, OpMessage, OpReply, OpCancel, OpRelease,
		KindWorktree, KindTerminal, KindBranch, KindSchedule, WorkspaceIsolated, WorkspaceExisting,
		RoleChefOwner, RoleSousChef, RoleStationCook, RoleCommis, RoleExpediter,
		RoleGardener, RoleDishwasher, RoleInspector, AgentClaude, AgentCodex,
		StatusApplied, StatusNotApplied, StatusAbsent, StatusUnknown,
		ReasonRejected, ReasonRateLimited, ReasonUnsupported, ReasonCrossHouse, ReasonForeignBackend,
		StateStarting, StateReady, StateAwaitingReply, StateUserTakeover, StateSettled, StateMissing,
		OutcomeSucceeded, OutcomeFailed, OutcomeCancelled, MailEmpty, MailFenced,
		MsgQuestion, MsgWorkerDone, MsgEscalation, MsgHeartbeat, MsgStatus,
		LivenessLive, LivenessExited, LivenessUnverifiable, SupportSupported, SupportPartial,
		EffortWithModel, EffortAlways, BasisReported, BasisComputed, UsageNone, UsageReported,
	}
	words = append(words, Capabilities...)
	m := make(map[string]string, len(words))
	for _, w := range words {
		if len(w) > maxInterned {
			panic("protocol: interned word too long: " + w)
		}
		m[w] = w
	}
	return m
}()

const maxInterned = 40
