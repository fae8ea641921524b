package snapshot

import "context"

// SessionName names a parked worker's session archive among its keys
// (docs/parking.md): its agent's session files, saved by its harness
// when it parked and restored by the harness that resumes it.
const SessionName = "session"

// SessionKey is the key of the worker's session archive: per worker, as
// only that worker's resumes read it.
func SessionKey(house, worker string) string { return Key(house, worker, SessionName) }

// Sessions are a house's parked workers' session archives in a store (on
// AWS the snapshot bucket), as galley's service deletes a worker's once
// it has settled (service.ParkedFiles).
type Sessions struct {
	Store Store
	House string
}

// DeleteParked deletes the worker's session archive; a worker without
// one is no error.
func (s Sessions) DeleteParked(ctx context.Context, worker string) error {
	return s.Store.Delete(ctx, SessionKey(s.House, worker))
}
