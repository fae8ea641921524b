package protocol

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// appendString writes s as a JSON string: only '"', '\\' and control
// characters are escaped, so the output is compact and stable. Invalid UTF-8
// becomes U+FFFD, which no validated value holds.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendCanonical writes v compactly with object keys sorted and duplicate
// keys collapsed to the last one, so that two spellings of one document
// encode alike. It takes O(n log n) in the number of members of an object:
// a request is untrusted, and looking each key up anew was quadratic (a
// 660 KB object of short keys cost seconds of CPU).
func appendCanonical(b []byte, v *jvalue) []byte {
	switch v.kind {
	case jNull:
		return append(b, "null"...)
	case jBool:
		if v.b {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case jNumber:
		return append(b, v.s...)
	case jString:
		return appendString(b, v.s)
	case jArray:
		b = append(b, '[')
		for i := range v.kids {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCanonical(b, &v.kids[i].val)
		}
		return append(b, ']')
	default:
		return appendCanonicalObject(b, v.kids)
	}
}

// appendCanonicalObject writes an object's members sorted by key (bytewise,
// as slices.Sort orders strings), each key once with its last value. The
// member indexes are sorted by key and, within one key, last first; the
// first of each run of equal keys is the one written.
func appendCanonicalObject(b []byte, kids []jmember) []byte {
	b = append(b, '{')
	switch len(kids) {
	case 0:
	case 1:
		b = appendString(b, kids[0].key)
		b = append(b, ':')
		b = appendCanonical(b, &kids[0].val)
	default:
		order := make([]int, len(kids))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int {
			if c := strings.Compare(kids[i].key, kids[j].key); c != 0 {
				return c
			}
			return j - i // the later member first
		})
		for n, i := range order {
			if n > 0 {
				if kids[order[n-1]].key == kids[i].key {
					continue // an earlier duplicate: the last one won
				}
				b = append(b, ',')
			}
			b = appendString(b, kids[i].key)
			b = append(b, ':')
			b = appendCanonical(b, &kids[i].val)
		}
	}
	return append(b, '}')
}
