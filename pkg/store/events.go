package store

import (
	"encoding/json"
	"fmt"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// EncodeEvent is e as a store keeps it: its JSON, or Invalid when that
// exceeds MaxEventBytes (the byte half of a log's bound).
func EncodeEvent(op galleyerr.Op, e Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, galleyerr.E(op, galleyerr.Invalid, err)
	}
	if len(b) > MaxEventBytes {
		return nil, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("event of %d bytes exceeds %d", len(b), MaxEventBytes))
	}
	return b, nil
}
