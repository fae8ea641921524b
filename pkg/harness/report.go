package harness

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/workerapi"
)

// reporter sends what the harness sees to galley for the worker's event
// log (docs/operations.md), in the background and in order: a report never
// waits for galley, a full queue drops events, and a failed send is
// logged and dropped. Before anything is queued, every secret the harness
// holds is replaced by [redacted] and long text is cut.
type reporter struct {
	h       *harness
	secrets []string
	mu      sync.Mutex
	q       []workerapi.HarnessEvent
	wake    chan struct{}
	done    chan struct{}
	stop    chan struct{}
	once    sync.Once
}

// reportQueue bounds the events waiting to be sent.
const reportQueue = 256

func newReporter(h *harness) *reporter {
	r := &reporter{h: h, wake: make(chan struct{}, 1), done: make(chan struct{}), stop: make(chan struct{})}
	for _, s := range h.secrets() {
		if len(s) >= 8 {
			r.secrets = append(r.secrets, s)
		}
	}
	go r.run()
	return r
}

// redact replaces every secret the harness knows in s.
func (r *reporter) redact(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	return s
}

// report queues one event; kv are field names and values.
func (r *reporter) report(event, text string, kv ...string) {
	if r == nil {
		return
	}
	e := workerapi.HarnessEvent{Event: event, At: time.Now(), Text: cutText(r.redact(text), 240)}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			continue
		}
		if e.Fields == nil {
			e.Fields = map[string]string{}
		}
		e.Fields[kv[i]] = cutText(r.redact(kv[i+1]), 120)
	}
	r.mu.Lock()
	if len(r.q) < reportQueue {
		r.q = append(r.q, e)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// close sends what is queued, within a few seconds, and stops.
func (r *reporter) close() {
	if r == nil {
		return
	}
	r.once.Do(func() { close(r.stop) })
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
	}
}

func (r *reporter) run() {
	defer close(r.done)
	for {
		stopping := false
		select {
		case <-r.wake:
		case <-r.stop:
			stopping = true
		}
		for {
			r.mu.Lock()
			batch := r.q[:min(len(r.q), workerapi.MaxEventsPerRequest)]
			r.q = r.q[len(batch):]
			r.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := r.h.api.Events(ctx, batch); err != nil {
				r.h.log.Warn("cannot send events to galley; dropped", "events", len(batch), "err", err)
			}
			cancel()
		}
		if stopping {
			return
		}
	}
}

// cutText cuts s to n bytes on a rune boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && s[len(s)-1]&0xC0 == 0x80 {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xC0 {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// toolArgs is a tool call's arguments as short JSON.
func toolArgs(in any) string {
	// Long texts are cut before they are encoded: the event keeps 120
	// bytes, and an agent's calls of 64 KiB texts, escaped, would each make
	// a copy several times larger. The cut leaves 1 KiB, so that a secret
	// that begins in what the event shows is whole for redaction.
	if v := reflect.ValueOf(in); v.Kind() == reflect.Struct {
		short := reflect.New(v.Type()).Elem()
		short.Set(v)
		for i := range short.NumField() {
			if f := short.Field(i); f.Kind() == reflect.String && f.CanSet() && f.Len() > 1024 {
				f.SetString(cutText(f.String(), 1024))
			}
		}
		in = short.Interface()
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // readable; the console shows it as text
	if err := enc.Encode(in); err != nil {
		return ""
	}
	return strings.TrimSpace(b.String())
}

// ToolEvents is implemented by the Events the harness gives a driver: a
// driver reports each tool call its agent's stream shows.
type ToolEvents interface {
	Tool(name, args string, resultBytes int)
}

// Tool implements ToolEvents.
func (e events) Tool(name, args string, resultBytes int) {
	kv := []string{"tool", name, "args", args}
	if resultBytes >= 0 {
		kv = append(kv, "resultBytes", strconv.Itoa(resultBytes))
	}
	e.h.rep.report(workerapi.EventTool, "", kv...)
}
