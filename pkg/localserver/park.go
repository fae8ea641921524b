package localserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/snapshot"
)

// parkDir holds parked agents' session archives (docs/parking.md): the
// harnesses write them, galley deletes a worker's once it settles.
const parkDir = "parked"

// parkStore checks --park-after and opens <data>/parked, closed to
// everyone but galley (mode 0700, as the data folder's other entries).
func parkStore(data string, after time.Duration) (*snapshot.DirStore, error) {
	if after < harness.MinParkAfter {
		return nil, fmt.Errorf("--park-after must be at least %s, or 0", harness.MinParkAfter)
	}
	dir := filepath.Join(data, parkDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("park store: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("park store: %s is not a folder (a link is not followed)", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("park store: %w", err)
	}
	s, err := snapshot.NewDirStore(dir)
	if err != nil {
		return nil, fmt.Errorf("park store: %w", err)
	}
	return s, nil
}

// parkedFiles deletes a settled worker's session archive.
type parkedFiles struct {
	store *snapshot.DirStore
	house string
}

func (p parkedFiles) DeleteParked(ctx context.Context, handle string) error {
	return p.store.Delete(ctx, harness.ParkKey(p.house, handle))
}

func withParked(s *snapshot.DirStore, house string) service.Option {
	if s == nil {
		return func(*service.Service) {}
	}
	return service.WithParkedFiles(parkedFiles{store: s, house: house})
}
