package harness

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/snapshot"
)

// MinParkAfter is the shortest park after a harness takes.
const MinParkAfter = time.Second

// parkFromEnv reads when the agent is parked and where its session archive
// is kept (docs/parking.md): contract.EnvParkAfter (unset or 0: never),
// contract.EnvParkDir (a folder; without it snapshots, the snapshot
// store) and the archive's limits (contract.EnvParkMaxBytes,
// contract.EnvParkMaxEntries; unset: DefaultParkLimits).
func parkFromEnv(getenv func(string) string, snapshots SnapshotStore) (time.Duration, SnapshotStore, snapshot.Limits, error) {
	var limits snapshot.Limits
	var after time.Duration
	if s := strings.TrimSpace(getenv(contract.EnvParkAfter)); s != "" && s != "0" {
		d, err := time.ParseDuration(s)
		if err != nil || d < MinParkAfter {
			return 0, nil, limits, errors.New(contract.EnvParkAfter + " must be a Go duration of at least " + MinParkAfter.String() + ", or 0")
		}
		after = d
	}
	for _, l := range []struct {
		name string
		max  int64
		set  func(int64)
	}{
		{contract.EnvParkMaxBytes, 1 << 40, func(n int64) { limits.MaxBytes = n }},
		{contract.EnvParkMaxEntries, 1 << 24, func(n int64) { limits.MaxEntries = int(n) }},
	} {
		if s := strings.TrimSpace(getenv(l.name)); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 || n > l.max {
				return 0, nil, limits, errors.New(l.name + " must be a positive whole number (at most " + strconv.FormatInt(l.max, 10) + ")")
			}
			l.set(n)
		}
	}
	dir := strings.TrimSpace(getenv(contract.EnvParkDir))
	if dir == "" {
		return after, snapshots, limits, nil
	}
	if !filepath.IsAbs(dir) {
		return 0, nil, limits, errors.New(contract.EnvParkDir + " must be an absolute path")
	}
	s, err := snapshot.NewDirStore(dir)
	if err != nil {
		return 0, nil, limits, errors.New(contract.EnvParkDir + ": " + err.Error())
	}
	return after, s, limits, nil
}
