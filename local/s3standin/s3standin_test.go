package s3standin_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/galley-run/galley/local/s3standin"
)

func serve(t *testing.T, opts ...s3standin.Option) (*s3standin.Server, *httptest.Server, *s3.Client) {
	t.Helper()
	st, err := s3standin.New([]string{"b"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(st)
	t.Cleanup(srv.Close)
	return st, srv, s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.URL), Region: "us-east-1", UsePathStyle: true, HTTPClient: srv.Client(),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "not-a-secret", ""),
	})
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// Over TLS the SDK sends a put's body aws-chunked with a trailing CRC32:
// the object holds the bytes, not their encoding.
func TestPutOverTLSKeepsTheBytes(t *testing.T) {
	st, _, c := serve(t)
	body := bytes.Repeat([]byte("snapshot "), 100000)
	if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("h/w/worktree"),
		Body: bytes.NewReader(body), ServerSideEncryption: types.ServerSideEncryptionAes256}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.Object("b", "h/w/worktree")
	if err != nil || !ok || !bytes.Equal(got, body) {
		t.Fatalf("object: %d bytes, ok %v, %v; want the %d bytes put", len(got), ok, err, len(body))
	}
}

// As strict as the bucket policy: a put without encryption, or with one
// the policy does not take, is AccessDenied; a part naming it is
// InvalidArgument.
func TestEncryptionRequired(t *testing.T) {
	_, _, c := serve(t, s3standin.WithEncryption("AES256"))
	put := func(sse types.ServerSideEncryption) error {
		_, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"),
			Body: strings.NewReader("x"), ServerSideEncryption: sse})
		return err
	}
	for _, sse := range []types.ServerSideEncryption{"", types.ServerSideEncryptionAwsKms} {
		if err := put(sse); code(err) != "AccessDenied" {
			t.Errorf("a put with encryption %q: %v, want AccessDenied", sse, err)
		}
	}
	if _, err := c.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("k")}); code(err) != "AccessDenied" {
		t.Errorf("an upload without encryption: %v, want AccessDenied", err)
	}
	up, err := c.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("k"),
		ServerSideEncryption: types.ServerSideEncryptionAes256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UploadPart(t.Context(), &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("k"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("x")},
		func(o *s3.Options) {
			o.APIOptions = append(o.APIOptions, smithyhttpHeader("X-Amz-Server-Side-Encryption", "AES256"))
		}); code(err) != "InvalidArgument" {
		t.Errorf("a part naming its encryption: %v, want InvalidArgument", err)
	}
	if err := put(types.ServerSideEncryptionAes256); err != nil {
		t.Errorf("a put with AES256: %v", err)
	}
}

// A chunked body whose trailing checksum is wrong, whose length is not
// the declared one, or that is cut, is refused before it is stored.
func TestChunkedBodyChecked(t *testing.T) {
	st, srv, _ := serve(t)
	good := "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n"
	for _, tc := range []struct {
		name, body, decoded, code string
	}{
		{"good", good, "5", ""},
		{"wrong checksum", strings.Replace(good, "NhCmhg==", "AAAAAA==", 1), "5", "BadDigest"},
		{"wrong length", good, "6", "IncompleteBody"},
		{"cut", good[:12], "5", "IncompleteBody"},
		{"bytes after the end", good + "x", "5", "IncompleteBody"},
		{"signed chunk", strings.Replace(good, "5\r\n", "5;chunk-signature=00\r\n", 1), "5", "IncompleteBody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/b/"+strings.ReplaceAll(tc.name, " ", "-"), strings.NewReader(tc.body))
			req.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
			req.Header.Set("X-Amz-Decoded-Content-Length", tc.decoded)
			req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
			req.Header.Set("Content-Encoding", "aws-chunked")
			req.Header.Set("X-Amz-Server-Side-Encryption", "AES256")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			_, stored, _ := st.Object("b", strings.ReplaceAll(tc.name, " ", "-"))
			if tc.code == "" {
				if resp.StatusCode != http.StatusOK || !stored {
					t.Fatalf("status %d, stored %v; want 200 and stored", resp.StatusCode, stored)
				}
				return
			}
			if resp.StatusCode != http.StatusBadRequest || stored {
				t.Errorf("status %d, stored %v; want 400 (%s), nothing stored", resp.StatusCode, stored, tc.code)
			}
		})
	}
}

// smithyhttpHeader sets a header on the request as sent, past the SDK's
// own checks (the SDK would not send a part's encryption).
func smithyhttpHeader(name, value string) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Build.Add(middleware.BuildMiddlewareFunc("setHeader", func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			if req, ok := in.Request.(*smithyhttp.Request); ok {
				req.Header.Set(name, value)
			}
			return next.HandleBuild(ctx, in)
		}), middleware.After)
	}
}
