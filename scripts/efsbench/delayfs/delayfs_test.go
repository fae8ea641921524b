package delayfs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/galley-run/galley/scripts/efsbench/delayfs"
)

// TestWriteReadBackDelayed writes a file through the mount, reads it back,
// finds it in the backing directory, and checks that the write and the read
// were counted and that the write took at least its delay.
func TestWriteReadBackDelayed(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("delayfs needs /dev/fuse: %v", err)
	}
	backing, mountpoint := t.TempDir(), t.TempDir()
	const writeDelay = 20 * time.Millisecond
	m, err := delayfs.New(mountpoint, backing, delayfs.Delays{Read: time.Millisecond, Write: writeDelay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	})

	before := m.Counts()
	want := []byte("through the delaying mount\n")
	start := time.Now()
	if err := os.WriteFile(filepath.Join(mountpoint, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	// Create and Write are two operations of the write class at least.
	if took := time.Since(start); took < 2*writeDelay {
		t.Errorf("write through the mount took %v, want at least %v", took, 2*writeDelay)
	}
	got, err := os.ReadFile(filepath.Join(mountpoint, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("read back %q, want %q", got, want)
	}
	inBacking, err := os.ReadFile(filepath.Join(backing, "f"))
	if err != nil || !bytes.Equal(inBacking, want) {
		t.Errorf("backing file: %q, %v; want %q", inBacking, err, want)
	}
	ops := m.Counts().Sub(before)
	if ops.Writes < 2 || ops.Reads < 1 {
		t.Errorf("counted %+v, want at least 2 writes (create, write) and 1 read", ops)
	}
}
