package service

import (
	"context"

	"github.com/galley-run/galley/pkg/store"
)

// What a change announces: an event in the worker's log, and a doorbell
// ring on the topic its waiters wait on.

// event records one event in the worker's log; kv are field names and
// values.
func (s *Service) event(handle, kind, text string, kv ...string) {
	if s.events == nil {
		return
	}
	e := store.Event{At: s.clock.Now(), Kind: kind, Text: text}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			if e.Fields == nil {
				e.Fields = map[string]string{}
			}
			e.Fields[kv[i]] = kv[i+1]
		}
	}
	s.events.Record(handle, e)
}

func (s *Service) ring(ctx context.Context, topic string) {
	if err := s.bell.Ring(context.WithoutCancel(ctx), topic); err != nil {
		// A lost ring costs latency, never a message: waiters re-read the
		// store at their deadline.
		s.log.Warn("doorbell ring failed", "topic", topic, "err", err)
	}
}

func inboxTopic(handle string) string { return "inbox:" + handle }

func runTopic(run string) string { return "run:" + run }

// InboxTopic is the doorbell topic a worker's harness waits on (its wake
// grant's queue is this topic's).
func InboxTopic(handle string) string { return inboxTopic(handle) }
