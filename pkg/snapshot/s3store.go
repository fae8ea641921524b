package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// S3API is what S3Store calls of an S3 client (*s3.Client has it).
type S3API interface {
	PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObject(context.Context, *s3.DeleteObjectInput, ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	CreateMultipartUpload(context.Context, *s3.CreateMultipartUploadInput, ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(context.Context, *s3.UploadPartInput, ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	CompleteMultipartUpload(context.Context, *s3.CompleteMultipartUploadInput, ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(context.Context, *s3.AbortMultipartUploadInput, ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

// S3Store keeps snapshots as objects of one bucket, each put with
// server-side encryption requested (SSE-S3, or SSE-KMS with WithKMSKey),
// so a bucket whose policy refuses an unencrypted put takes them.
type S3Store struct {
	client   S3API
	bucket   string
	prefix   string
	kmsKey   string
	partSize int64
}

// S3Option is an optional setting of NewS3Store.
type S3Option func(*S3Store)

// WithPrefix puts every key under prefix (such as "snapshots/").
func WithPrefix(prefix string) S3Option { return func(s *S3Store) { s.prefix = prefix } }

// WithKMSKey requests SSE-KMS with the given key (an id, alias or ARN)
// instead of SSE-S3.
func WithKMSKey(keyID string) S3Option { return func(s *S3Store) { s.kmsKey = keyID } }

// WithPartSize sets the bytes Put holds in memory at once: a snapshot of
// at most one part is one PutObject, a larger one a multipart upload of
// parts of this size (S3's least is 5 MiB; a smaller size is raised to
// it). Default 8 MiB. S3 takes at most 10,000 parts, so this also bounds
// a snapshot's size (80,000 MiB at the default).
func WithPartSize(n int64) S3Option { return func(s *S3Store) { s.partSize = max(n, minPartSize) } }

const (
	minPartSize     = 5 << 20
	defaultPartSize = 8 << 20
	maxParts        = 10_000
)

// NewS3Store makes a Store of bucket through client.
func NewS3Store(client S3API, bucket string, opts ...S3Option) *S3Store {
	s := &S3Store{client: client, bucket: bucket, partSize: defaultPartSize}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *S3Store) sse() (types.ServerSideEncryption, *string) {
	if s.kmsKey != "" {
		return types.ServerSideEncryptionAwsKms, aws.String(s.kmsKey)
	}
	return types.ServerSideEncryptionAes256, nil
}

// Put reads r a part at a time: what fits in one part is one PutObject,
// else a multipart upload, completed only once r has ended without error
// (and aborted otherwise), so S3 replaces the object whole or not at all.
func (s *S3Store) Put(ctx context.Context, key string, r io.Reader) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	sse, kms := s.sse()
	buf := make([]byte, s.partSize)
	n, err := io.ReadFull(ctxReader{ctx, r}, buf)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key),
			Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n)),
			ServerSideEncryption: sse, SSEKMSKeyId: kms,
		})
		return s3Err(ctx, "snapshot.put", err)
	}
	if err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.put"), "cannot read the snapshot", err)
	}
	up, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key),
		ServerSideEncryption: sse, SSEKMSKeyId: kms,
	})
	if err != nil {
		return s3Err(ctx, "snapshot.put", err)
	}
	if err := s.upload(ctx, key, up.UploadId, buf, n, r); err != nil {
		// Aborted even when ctx is done, within a bound of its own, so
		// the parts do not linger (and cost) until a lifecycle rule.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key), UploadId: up.UploadId,
		})
		return err
	}
	return nil
}

// upload sends the first part (buf[:n]) and the rest of r, and completes.
func (s *S3Store) upload(ctx context.Context, key string, id *string, buf []byte, n int, r io.Reader) error {
	var parts []types.CompletedPart
	for number := int32(1); ; number++ {
		if number > maxParts {
			return tooLarge("snapshot.put", fmt.Sprintf("the snapshot is larger than %d parts of %d bytes", maxParts, s.partSize))
		}
		out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key), UploadId: id,
			PartNumber: aws.Int32(number), Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			return s3Err(ctx, "snapshot.put", err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(number)})
		var rerr error
		n, rerr = io.ReadFull(ctxReader{ctx, r}, buf)
		if errors.Is(rerr, io.EOF) {
			break
		}
		if errors.Is(rerr, io.ErrUnexpectedEOF) {
			rerr = nil // a last, shorter part
		}
		if rerr != nil {
			return galleyerr.E(galleyerr.Op("snapshot.put"), "cannot read the snapshot", rerr)
		}
	}
	_, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	return s3Err(ctx, "snapshot.put", err)
}

// Get opens the object's body; the caller reads and closes it.
func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)})
	if err != nil {
		return nil, s3Err(ctx, "snapshot.get", err)
	}
	return out.Body, nil
}

// Delete deletes the object (S3 answers a missing key as deleted).
func (s *S3Store) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)})
	return s3Err(ctx, "snapshot.delete", err)
}

// s3Err classifies an S3 call's error: a missing key is NotFound, ctx's
// own error is returned as such, anything else is Unavailable (uncertain:
// the caller may retry).
func s3Err(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return galleyerr.E(galleyerr.Op(op), ctx.Err())
	}
	var nsk *types.NoSuchKey
	var api smithy.APIError
	var resp *smithyhttp.ResponseError
	switch {
	case errors.As(err, &api) && api.ErrorCode() == "NoSuchBucket":
		return galleyerr.E(galleyerr.Op(op), "the snapshots' bucket does not exist", err)
	case errors.As(err, &nsk),
		errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound"),
		errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusNotFound:
		return galleyerr.E(galleyerr.NotFound, galleyerr.Op(op), "no snapshot under this key")
	}
	return galleyerr.E(galleyerr.Unavailable, galleyerr.Op(op), err)
}
