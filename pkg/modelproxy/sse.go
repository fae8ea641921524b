package modelproxy

// sseReader follows a server-sent event stream a chunk at a time and hands
// each event's data (the JSON the providers send) to a fieldScanner, then
// calls onEvent at the event's end. Memory is bounded: a field name longer
// than any SSE field is skipped with its line; the data goes to the
// scanner, which keeps only its bounded values.
type sseReader struct {
	scan    *fieldScanner
	onEvent func(*fieldScanner)

	field     []byte
	inValue   bool // past the field name's colon
	skipSpace bool // the one space after "data:"
	isData    bool
	skipLine  bool
	hasData   bool
	lastCR    bool
}

const maxFieldBytes = 16

func newSSEReader(scan *fieldScanner, onEvent func(*fieldScanner)) *sseReader {
	return &sseReader{scan: scan, onEvent: onEvent}
}

func (r *sseReader) Write(p []byte) (int, error) {
	for _, c := range p {
		r.byte(c)
	}
	return len(p), nil
}

func (r *sseReader) byte(c byte) {
	if c == '\n' && r.lastCR {
		r.lastCR = false
		return // the LF of a CRLF
	}
	r.lastCR = c == '\r'
	if c == '\n' || c == '\r' {
		r.endLine()
		return
	}
	switch {
	case r.skipLine:
	case r.inValue:
		if r.skipSpace {
			r.skipSpace = false
			if c == ' ' {
				return
			}
		}
		if r.isData {
			r.scan.byte(c)
		}
	case c == ':':
		r.inValue, r.skipSpace = true, true
		r.isData = string(r.field) == "data"
		if r.isData {
			if r.hasData {
				r.scan.byte('\n') // data lines join with a newline
			}
			r.hasData = true
		}
	case len(r.field) >= maxFieldBytes:
		r.skipLine = true
	default:
		r.field = append(r.field, c)
	}
}

func (r *sseReader) endLine() {
	blank := len(r.field) == 0 && !r.inValue && !r.skipLine
	if !r.inValue && string(r.field) == "data" {
		// "data" with no colon: an empty data line.
		if r.hasData {
			r.scan.byte('\n')
		}
		r.hasData = true
	}
	r.field, r.inValue, r.isData, r.skipLine, r.skipSpace = r.field[:0], false, false, false, false
	if !blank {
		return
	}
	if r.hasData {
		r.onEvent(r.scan)
	}
	r.scan.reset()
	r.hasData = false
}
