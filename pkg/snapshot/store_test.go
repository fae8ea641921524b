package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/galley-run/galley/local/s3standin"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/snapshot/storetest"
)

func TestDirStore(t *testing.T) {
	storetest.Run(t, storetest.Subject{
		Open: func(t *testing.T) snapshot.Store {
			s, err := snapshot.NewDirStore(filepath.Join(t.TempDir(), "snapshots"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Large: 3 << 20,
	})
}

// A failed or cancelled Put leaves no temporary file behind.
func TestDirStoreLeavesNoTemporaryFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	s, err := snapshot.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := snapshot.Key("h", "w", "worktree")
	if err := s.Put(t.Context(), key, bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), key, failingReader{}); err == nil {
		t.Fatal("a failing Put succeeded")
	}
	names, err := os.ReadDir(filepath.Join(dir, "h", "w"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != "worktree" {
		t.Fatalf("the key's folder holds %v, want only worktree", names)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, fmt.Errorf("broken") }

func TestS3Store(t *testing.T) {
	var fakes []*fakeS3
	storetest.Run(t, storetest.Subject{
		Open: func(t *testing.T) snapshot.Store {
			f := newFakeS3(t)
			fakes = append(fakes, f)
			return snapshot.NewS3Store(f.client, "snapshots", snapshot.WithPrefix("galley/"), snapshot.WithPartSize(5<<20))
		},
		Large: 11 << 20, // three parts
	})
	var multipart int
	for _, f := range fakes {
		st := f.Stats()
		multipart += st.Created
		if st.Created != st.Completed+st.Aborted {
			t.Errorf("multipart uploads: %d created, %d completed, %d aborted: some left open", st.Created, st.Completed, st.Aborted)
		}
	}
	if multipart == 0 {
		t.Error("the suite made no multipart upload: Large is too small to test that path")
	}
}

// Every object is put with server-side encryption requested (the fake
// refuses a put without it, as a bucket policy that requires it would),
// SSE-KMS with its key when asked.
func TestS3StoreRequestsEncryption(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []snapshot.S3Option
		want string
	}{
		{"sse-s3", nil, "AES256"},
		{"sse-kms", []snapshot.S3Option{snapshot.WithKMSKey("alias/galley-snapshots")}, "aws:kms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeS3(t)
			s := snapshot.NewS3Store(f.client, "snapshots", append(tc.opts, snapshot.WithPartSize(5<<20))...)
			key := snapshot.Key("h", "w", "worktree")
			// The front is strict: a put that asks for no encryption fails.
			if _, err := f.client.PutObject(t.Context(), &s3.PutObjectInput{
				Bucket: aws.String("snapshots"), Key: aws.String(key), Body: bytes.NewReader([]byte("x")),
			}); err == nil {
				t.Fatal("the fake took a put without server-side encryption")
			}
			for _, size := range []int{10, 6 << 20} {
				if err := s.Put(t.Context(), key, bytes.NewReader(make([]byte, size))); err != nil {
					t.Fatalf("Put of %d bytes: %v", size, err)
				}
			}
			st := f.Stats()
			if len(st.SSE) != 2 {
				t.Fatalf("%d puts or uploads seen, want 2 (one PutObject, one multipart)", len(st.SSE))
			}
			for _, got := range st.SSE {
				if got != tc.want {
					t.Errorf("server-side encryption %q requested, want %q", got, tc.want)
				}
			}
			if tc.want == "aws:kms" && st.KMSKey != "alias/galley-snapshots" {
				t.Errorf("KMS key %q requested", st.KMSKey)
			}
		})
	}
}

// A missing bucket is an error of its own, not a missing snapshot.
func TestS3StoreMissingBucket(t *testing.T) {
	f := newFakeS3(t)
	s := snapshot.NewS3Store(f.client, "no-such-bucket")
	_, err := s.Get(t.Context(), snapshot.Key("h", "w", "worktree"))
	if err == nil || galleyerr.Is(galleyerr.NotFound, err) {
		t.Fatalf("Get from a missing bucket: %v, want an error other than NotFound", err)
	}
}

// fakeS3 is the S3 stand-in (local/s3standin: gofakes3 behind a front as
// strict as S3 with a bucket policy requiring encryption) on an httptest
// server over TLS, so the SDK sends its bodies aws-chunked with a trailing
// checksum, as it does to S3.
type fakeS3 struct {
	*s3standin.Server
	client *s3.Client
}

func newFakeS3(t *testing.T) *fakeS3 {
	t.Helper()
	st, err := s3standin.New([]string{"snapshots"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(st)
	t.Cleanup(srv.Close)
	return &fakeS3{Server: st, client: s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.URL),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "fake-secret-for-the-fake", ""),
		UsePathStyle: true,
		HTTPClient:   srv.Client(),
	})}
}

// Sessions delete a settled worker's session archive from the S3 store
// (its key only: the worker's other keys, and another worker's archive,
// stay), and a worker without one is no error.
func TestSessionsDeleteParked(t *testing.T) {
	f := newFakeS3(t)
	s := snapshot.NewS3Store(f.client, "snapshots", snapshot.WithPartSize(5<<20))
	ctx := context.Background()
	for _, k := range []string{snapshot.SessionKey("house", "w-1"), snapshot.SessionKey("house", "w-2"), snapshot.WorktreeKey("house", "w-1")} {
		if err := s.Put(ctx, k, strings.NewReader("archive")); err != nil {
			t.Fatal(err)
		}
	}
	sessions := snapshot.Sessions{Store: s, House: "house"}
	for range 2 { // the second finds none
		if err := sessions.DeleteParked(ctx, "w-1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, snapshot.SessionKey("house", "w-1")); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Errorf("the deleted archive reads %v, want not found", err)
	}
	for _, k := range []string{snapshot.SessionKey("house", "w-2"), snapshot.WorktreeKey("house", "w-1")} {
		rc, err := s.Get(ctx, k)
		if err != nil {
			t.Errorf("%s is gone with the worker's archive: %v", k, err)
			continue
		}
		rc.Close()
	}
}
