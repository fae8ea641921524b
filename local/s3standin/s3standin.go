// Package s3standin is S3 at the wire, for the snapshot store's tests and
// for aws-local's worktree snapshots bucket: gofakes3 (an S3 in memory)
// behind a front that is as strict as S3 with a bucket policy requiring
// server-side encryption, where gofakes3 is kinder.
//
//   - A PutObject or CreateMultipartUpload without
//     x-amz-server-side-encryption, or with a value the bucket's policy
//     does not take (WithEncryption; default AES256 and aws:kms), is
//     refused 403 AccessDenied, as the bucket policy's explicit deny is.
//   - An UploadPart naming x-amz-server-side-encryption is refused 400
//     InvalidArgument, as S3 does (a part takes its upload's encryption).
//   - A body the SDK sends aws-chunked with a trailing checksum
//     (x-amz-content-sha256 STREAMING-UNSIGNED-PAYLOAD-TRAILER: every
//     PutObject and UploadPart over TLS) is decoded, its length checked
//     against x-amz-decoded-content-length and its trailing checksum
//     (CRC32, CRC32C, SHA-1 or SHA-256) verified, before gofakes3, which
//     would store the encoding itself, sees the bytes. A signed-chunk body
//     (STREAMING-AWS4-HMAC-SHA256-PAYLOAD...) is refused: nothing here
//     verifies its chunk signatures.
//   - A body is bounded (WithMaxBody, default 64 MiB: the snapshot store's
//     parts are 8 MiB), answered 400 EntityTooLarge past it.
//
// Authentication is not this package's: aws-local serves it behind an IAM
// gate (local/iamgate), which verifies each request's signature and the
// caller's identity policies. It counts the multipart uploads created,
// completed and aborted (Stats), so a test can tell that none was left
// open.
package s3standin

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// DefaultMaxBody bounds one request's body.
const DefaultMaxBody = 64 << 20

// Server is the stand-in: an http.Handler speaking S3's REST API by path
// (https://host/<bucket>/<key>).
type Server struct {
	backend    *s3mem.Backend
	fake       http.Handler
	encryption []string
	maxBody    int64

	mu    sync.Mutex
	stats Stats
}

// Stats counts what the front let through.
type Stats struct {
	// SSE holds the x-amz-server-side-encryption of each PutObject and
	// CreateMultipartUpload taken, in order; KMSKey the last KMS key one
	// named.
	SSE    []string
	KMSKey string
	// Multipart uploads created, completed and aborted.
	Created, Completed, Aborted int
}

// Option is an optional setting of New.
type Option func(*Server)

// WithEncryption sets the x-amz-server-side-encryption values a put must
// name (the bucket policy's): "AES256" alone for aws-local's bucket, whose
// policy denies any other.
func WithEncryption(values ...string) Option {
	return func(s *Server) { s.encryption = slices.Clone(values) }
}

// WithMaxBody bounds one request's body (default DefaultMaxBody).
func WithMaxBody(n int64) Option { return func(s *Server) { s.maxBody = n } }

// New makes a stand-in holding the buckets named, empty.
func New(buckets []string, opts ...Option) (*Server, error) {
	s := &Server{backend: s3mem.New(), encryption: []string{"AES256", "aws:kms"}, maxBody: DefaultMaxBody}
	for _, o := range opts {
		o(s)
	}
	for _, b := range buckets {
		if err := s.backend.CreateBucket(b); err != nil {
			return nil, fmt.Errorf("s3standin: bucket %s: %w", b, err)
		}
	}
	s.fake = gofakes3.New(s.backend).Server()
	return s, nil
}

// CreateBucket makes an empty bucket (a deployment's), or does nothing
// when it exists.
func (s *Server) CreateBucket(name string) error {
	if ok, err := s.backend.BucketExists(name); err != nil || ok {
		return err
	}
	return s.backend.CreateBucket(name)
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.SSE = slices.Clone(s.stats.SSE)
	return st
}

// Object reads an object's bytes directly (for a test's check); ok is
// false when the bucket holds no such key.
func (s *Server) Object(bucket, key string) (data []byte, ok bool, err error) {
	obj, err := s.backend.GetObject(bucket, key, nil)
	if gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer obj.Contents.Close()
	data, err = io.ReadAll(obj.Contents)
	return data, err == nil, err
}

// Keys lists a bucket's keys below prefix.
func (s *Server) Keys(bucket, prefix string) ([]string, error) {
	res, err := s.backend.ListBucket(bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range res.Contents {
		out = append(out, c.Key)
	}
	return out, nil
}

// Content hashes the SDK names in x-amz-content-sha256 beside a hex
// digest.
const (
	unsignedPayload        = "UNSIGNED-PAYLOAD"
	streamingUnsignedTrail = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	streamingSignedPrefix  = "STREAMING-AWS4-"
)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sse := r.Header.Get("X-Amz-Server-Side-Encryption")
	onObject := strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1
	isPart := r.Method == http.MethodPut && q.Has("partNumber")
	isCopy := r.Header.Get("X-Amz-Copy-Source") != ""
	isPut := r.Method == http.MethodPut && onObject && !isPart && !isCopy
	isCreate := r.Method == http.MethodPost && q.Has("uploads")
	switch {
	case isCopy:
		writeError(w, http.StatusNotImplemented, "NotImplemented", "the stand-in does not copy objects")
		return
	case isPart && sse != "":
		writeError(w, http.StatusBadRequest, "InvalidArgument",
			"x-amz-server-side-encryption is not valid on an upload part: it takes its upload's encryption")
		return
	case (isPut || isCreate) && !slices.Contains(s.encryption, sse):
		writeError(w, http.StatusForbidden, "AccessDenied",
			"the bucket's policy denies a put without x-amz-server-side-encryption: "+strings.Join(s.encryption, " or "))
		return
	}
	if r.ContentLength > s.maxBody {
		writeError(w, http.StatusBadRequest, "EntityTooLarge", fmt.Sprintf("the body is over the stand-in's %d bytes", s.maxBody))
		return
	}
	switch sha := r.Header.Get("X-Amz-Content-Sha256"); {
	case sha == streamingUnsignedTrail:
		if code, msg := s.decodeChunked(r); code != "" {
			writeError(w, http.StatusBadRequest, code, msg)
			return
		}
	case strings.HasPrefix(sha, streamingSignedPrefix):
		writeError(w, http.StatusNotImplemented, "NotImplemented",
			"the stand-in takes no signed-chunk body ("+sha+"): nothing here verifies its chunk signatures")
		return
	}
	s.mu.Lock()
	switch {
	case isPut || isCreate:
		s.stats.SSE = append(s.stats.SSE, sse)
		s.stats.KMSKey = r.Header.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id")
		if isCreate {
			s.stats.Created++
		}
	case r.Method == http.MethodPost && q.Has("uploadId"):
		s.stats.Completed++
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		s.stats.Aborted++
	}
	s.mu.Unlock()
	s.fake.ServeHTTP(w, r)
}

// decodeChunked replaces r's aws-chunked body by the bytes it encodes,
// checked: each chunk's size, the decoded length the request declared,
// and the trailing checksum the request named in x-amz-trailer. It
// answers S3's error code and message, or "".
func (s *Server) decodeChunked(r *http.Request) (code, msg string) {
	declared, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil || declared < 0 || declared > s.maxBody {
		return "MissingContentLength", "an aws-chunked body needs x-amz-decoded-content-length, at most the stand-in's bound"
	}
	trailer := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Amz-Trailer")))
	sum, ok := newChecksum(trailer)
	if !ok {
		return "InvalidRequest", fmt.Sprintf("x-amz-trailer %q names no checksum the stand-in verifies (crc32, crc32c, sha1, sha256)", trailer)
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, s.maxBody+64<<10))
	_ = r.Body.Close()
	if err != nil {
		return "IncompleteBody", "the body could not be read"
	}
	data, trailers, why := decodeAWSChunked(raw, s.maxBody)
	switch {
	case why != "":
		return "IncompleteBody", why
	case int64(len(data)) != declared:
		return "IncompleteBody", fmt.Sprintf("the chunks hold %d bytes, x-amz-decoded-content-length says %d", len(data), declared)
	}
	got, named := trailers[trailer]
	if !named || len(trailers) != 1 {
		return "MalformedTrailerError", "the body's trailer must be the one x-amz-trailer names, alone"
	}
	sum.Write(data)
	if want := sum.encoded(); got != want {
		return "BadDigest", "the " + trailer + " you specified did not match the calculated checksum"
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.Header.Set("Content-Length", strconv.Itoa(len(data)))
	r.Header.Set("X-Amz-Content-Sha256", unsignedPayload)
	r.Header.Del("X-Amz-Decoded-Content-Length")
	r.Header.Del("X-Amz-Trailer")
	if enc := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.Header.Get("Content-Encoding")), "aws-chunked")); enc != "" {
		r.Header.Set("Content-Encoding", strings.TrimPrefix(enc, ","))
	} else {
		r.Header.Del("Content-Encoding")
	}
	return "", ""
}

// s3Error is S3's error document.
type s3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	RequestID string   `xml:"RequestId"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := xml.Marshal(s3Error{Code: code, Message: msg, RequestID: "s3standin"})
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}
