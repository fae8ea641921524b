package modelproxy

import "strings"

// fieldScanner watches a JSON text stream past, a chunk at a time, and
// keeps the raw values found at a few paths (object keys from the top,
// e.g. "usage" or "response.usage"): what the proxy needs of a provider's
// answer, without holding the answer. Its memory is bounded whatever the
// input: keys and kept values have a size limit (a value past it is
// dropped), nesting past maxDepth is followed without its keys.
//
// It is a tokenizer, not a validator: a text that is not JSON yields no
// values, or values a later json.Unmarshal refuses.
type fieldScanner struct {
	want   map[string]bool
	values map[string][]byte

	stack     []frame
	inStr     bool
	esc       bool
	strIsKey  bool
	inScalar  bool
	key       []byte
	keyTooBig bool
	depthOver int // containers opened past maxDepth, not on the stack

	capturing bool
	capPath   string
	capDepth  int // the stack's depth where the captured value started
	capBuf    []byte
	capOver   bool
}

type frame struct {
	obj     bool
	key     string // the current member's key (objects)
	wantKey bool   // an object awaiting a key (after '{' or ',')
}

const (
	maxDepth    = 32
	maxKeyBytes = 64
	// maxValueBytes bounds a kept value: a usage object is well under a
	// kilobyte.
	maxValueBytes = 64 << 10
)

func newFieldScanner(paths ...string) *fieldScanner {
	s := &fieldScanner{want: map[string]bool{}, values: map[string][]byte{}}
	for _, p := range paths {
		s.want[p] = true
	}
	return s
}

// reset makes the scanner ready for a new text, forgetting the values.
func (s *fieldScanner) reset() {
	want := s.want
	*s = fieldScanner{want: want, values: map[string][]byte{}, stack: s.stack[:0], key: s.key[:0], capBuf: s.capBuf[:0]}
}

// value returns the raw JSON value at path, or nil.
func (s *fieldScanner) value(path string) []byte { return s.values[path] }

func (s *fieldScanner) Write(p []byte) (int, error) {
	for _, c := range p {
		s.byte(c)
	}
	return len(p), nil
}

func (s *fieldScanner) byte(c byte) {
	if s.inStr {
		if s.capturing {
			s.capByte(c)
		}
		if s.strIsKey {
			s.keyByte(c)
		}
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr = false
			if s.strIsKey {
				s.endKey()
			} else {
				s.valueEnded()
			}
		}
		return
	}
	if s.inScalar {
		switch c {
		case ',', '}', ']', ' ', '\t', '\n', '\r', ':':
			s.inScalar = false
			s.valueEnded()
		default:
			if s.capturing {
				s.capByte(c)
			}
			return
		}
	}
	switch c {
	case ' ', '\t', '\n', '\r':
		if s.capturing {
			s.capByte(c)
		}
	case '{', '[':
		s.valueStarts(c)
		if s.capturing {
			s.capByte(c)
		}
		if len(s.stack) >= maxDepth || s.depthOver > 0 {
			s.depthOver++
			return
		}
		s.stack = append(s.stack, frame{obj: c == '{', wantKey: c == '{'})
	case '}', ']':
		if s.depthOver > 0 {
			s.depthOver--
		} else if len(s.stack) > 0 {
			s.stack = s.stack[:len(s.stack)-1]
		}
		if s.capturing {
			s.capByte(c)
		}
		s.valueEnded()
	case ',':
		if s.capturing {
			s.capByte(c)
		}
		if f := s.top(); f != nil && f.obj {
			f.wantKey = true
		}
	case ':':
		if s.capturing {
			s.capByte(c)
		}
	case '"':
		if f := s.top(); f != nil && f.obj && f.wantKey {
			s.inStr, s.strIsKey = true, true
			s.key, s.keyTooBig = s.key[:0], false
			if s.capturing {
				s.capByte(c)
			}
			return
		}
		s.valueStarts(c)
		s.inStr, s.strIsKey = true, false
		if s.capturing {
			s.capByte(c)
		}
	default:
		s.valueStarts(c)
		s.inScalar = true
		if s.capturing {
			s.capByte(c)
		}
	}
}

func (s *fieldScanner) top() *frame {
	if s.depthOver > 0 || len(s.stack) == 0 {
		return nil
	}
	return &s.stack[len(s.stack)-1]
}

func (s *fieldScanner) keyByte(c byte) {
	if c == '"' && !s.esc {
		return
	}
	if len(s.key) >= maxKeyBytes {
		s.keyTooBig = true
		return
	}
	s.key = append(s.key, c)
}

func (s *fieldScanner) endKey() {
	f := s.top()
	if f == nil {
		return
	}
	f.wantKey = false
	f.key = ""
	if !s.keyTooBig {
		f.key = string(s.key)
	}
}

// valueStarts notes a value beginning at the current position; a wanted
// one (and none is being kept) starts a capture.
func (s *fieldScanner) valueStarts(byte) {
	if s.capturing || s.depthOver > 0 || len(s.stack) == 0 || len(s.stack) > 3 {
		return
	}
	var b strings.Builder
	for i, f := range s.stack {
		if !f.obj || f.key == "" {
			return // inside an array, or an unkeyed member: never wanted
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(f.key)
	}
	if p := b.String(); s.want[p] {
		s.capturing, s.capPath, s.capDepth, s.capBuf, s.capOver = true, p, len(s.stack), s.capBuf[:0], false
	}
}

// valueEnded is called after a value's last byte (or, for a container,
// after its closing bracket is popped): the capture ends when the stack
// is back where it began.
func (s *fieldScanner) valueEnded() {
	if !s.capturing || s.depthOver > 0 || len(s.stack) != s.capDepth {
		return
	}
	s.capturing = false
	if !s.capOver {
		s.values[s.capPath] = append([]byte(nil), s.capBuf...)
	}
}

func (s *fieldScanner) capByte(c byte) {
	if len(s.capBuf) >= maxValueBytes {
		s.capOver = true
		return
	}
	s.capBuf = append(s.capBuf, c)
}
