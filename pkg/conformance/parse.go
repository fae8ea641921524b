package conformance

import "github.com/galley-run/galley/pkg/protocol"

// Every answer is read with the strict parsers in package protocol, which
// read at least as strictly as kitchn's client, so that the suite refuses
// what the client refuses. These wrappers are the only place the suite
// names them.

func parseDescriptor(b []byte) (protocol.Descriptor, error) { return protocol.ParseDescriptor(b) }

func parseOutcome(b []byte, backend string) (protocol.EffectOutcome, error) {
	return protocol.ParseEffectOutcome(b, backend)
}

func parseLookup(b []byte, backend string) (protocol.LookupAnswer, error) {
	return protocol.ParseLookupAnswer(b, backend)
}

func parseObservation(b []byte) (protocol.Observation, error) { return protocol.ParseObservation(b) }

func parseInventory(b []byte) (protocol.Inventory, error) { return protocol.ParseInventory(b) }

func parseMailbox(b []byte) (protocol.MailboxAnswer, error) { return protocol.ParseMailboxAnswer(b) }

func parseAdopt(b []byte) (fenced bool, err error) { return protocol.ParseAdoptAnswer(b) }
