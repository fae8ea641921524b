package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Store keeps snapshots by key: a folder (DirStore) for the local shape,
// an S3 bucket (S3Store) on AWS. storetest is the suite both pass.
type Store interface {
	// Put stores r's bytes under key, replacing what it held, once r has
	// been read to its end without error: a Put that fails (r's error,
	// ctx, the store) leaves the key's earlier bytes, or none.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the bytes under key; a key never put, or deleted, is
	// NotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes key's bytes; a missing key is no error.
	Delete(ctx context.Context, key string) error
}

// Key names one snapshot of a worker of a house: name says which (the
// worktree, the CLI's session files). Each part is escaped (every byte
// but letters, digits, '-', '_' and a '.' not leading is written %XX), so
// a handle of any bytes makes one key, of three segments, and no two
// (house, worker, name) make the same.
func Key(house, worker, name string) string {
	return escape(house) + "/" + escape(worker) + "/" + escape(name)
}

func escape(s string) string {
	if s == "" {
		return "%"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// maxKeyLen is S3's bound on a key.
const maxKeyLen = 1024

// CheckKey refuses (Invalid) a key a Store does not take: one that is not
// segments of letters, digits, '-', '_', '.' and '%' (none empty, none
// starting with '.') joined by '/', or longer than 1,024 bytes. Key's keys
// pass; a folder store can map any that passes to a path inside its folder.
func CheckKey(key string) error {
	bad := func(why string) error {
		return galleyerr.E(galleyerr.Invalid, galleyerr.Op("snapshot.key"), "a snapshot key "+why)
	}
	if key == "" || len(key) > maxKeyLen {
		return bad(fmt.Sprintf("must have 1 to %d bytes", maxKeyLen))
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg[0] == '.' {
			return bad("has an empty segment or one starting with '.'")
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.%", c) >= 0) {
				return bad("has a byte other than letters, digits and -_.%")
			}
		}
	}
	return nil
}

// SaveTo saves the worktree at dir (Save) into s under key, streaming: the
// key's earlier snapshot is replaced only when the whole archive is
// stored, so a Save or a Put that fails leaves it.
func SaveTo(ctx context.Context, s Store, key, dir string, limits Limits, opts ...SaveOption) (Stats, error) {
	if err := CheckKey(key); err != nil {
		return Stats{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	type result struct {
		stats Stats
		err   error
	}
	saved := make(chan result, 1)
	go func() {
		st, err := Save(ctx, dir, pw, limits, opts...)
		if err != nil {
			pw.CloseWithError(err)
		} else {
			pw.Close()
		}
		saved <- result{st, err}
	}()
	perr := s.Put(ctx, key, pr)
	pr.CloseWithError(errPutEnded) // a Put that stopped reading ends the Save
	cancel()
	res := <-saved
	if res.err != nil && !errors.Is(res.err, errPutEnded) {
		return res.stats, res.err
	}
	if perr != nil {
		return res.stats, perr
	}
	return res.stats, res.err
}

var errPutEnded = errors.New("the store stopped reading the snapshot")

// RestoreFrom restores the snapshot under key in s into the worktree at
// dir (Restore). A missing snapshot is NotFound, and dir is left as it was.
func RestoreFrom(ctx context.Context, s Store, key, dir string, limits Limits, opts ...RestoreOption) (Stats, error) {
	if err := CheckKey(key); err != nil {
		return Stats{}, err
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		return Stats{}, err
	}
	defer rc.Close()
	return Restore(ctx, rc, dir, limits, opts...)
}

// randomHex is a name no one guesses, for temporary files and folders.
func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
