package iamgate

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/local/s3standin"
	"github.com/galley-run/galley/pkg/iampolicy"
)

// The task role's snapshot policy, as the stack writes it: the object
// actions below the house's prefix, and listing it.
const s3Policy = `{"Version":"2012-10-17","Statement":[
 {"Effect":"Allow","Action":["s3:GetObject","s3:PutObject","s3:DeleteObject","s3:AbortMultipartUpload"],
  "Resource":"arn:aws:s3:::snaps/main/*"},
 {"Effect":"Allow","Action":"s3:ListBucket","Resource":"arn:aws:s3:::snaps",
  "Condition":{"StringLike":{"s3:prefix":"main/*"}}}]}`

// s3Env serves a gate for S3 over TLS in front of the S3 stand-in, and
// answers a client of the principal's and the stand-in.
func s3Env(t *testing.T, policy string) (*s3.Client, *s3standin.Server, *Gate, Principal) {
	t.Helper()
	pol, err := iampolicy.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	p := Principal{AccessKeyID: "ASIA" + strings.ToUpper(random(t, 8)), SecretAccessKey: random(t, 20),
		SessionToken: random(t, 32), RoleARN: roleARN, SessionName: session, Policies: []iampolicy.Policy{pol}}
	st, err := s3standin.New([]string{"snaps"}, s3standin.WithEncryption("AES256"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(S3, st, principals{p.AccessKeyID: p})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(g)
	t.Cleanup(srv.Close)
	return s3.New(s3.Options{BaseEndpoint: aws.String(srv.URL), Region: region, UsePathStyle: true, HTTPClient: srv.Client(),
		Credentials: credentials.NewStaticCredentialsProvider(p.AccessKeyID, p.SecretAccessKey, p.SessionToken)}), st, g, p
}

func s3Code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// The SDK's own requests, signed over TLS (bodies aws-chunked with a
// trailing checksum): allowed below the house's prefix, denied elsewhere
// with S3's AccessDenied naming the action, and each decision recorded.
func TestS3GateAuthorizesTheSnapshotStore(t *testing.T) {
	c, st, g, _ := s3Env(t, s3Policy)
	ctx := t.Context()
	put := func(key string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("snaps"), Key: aws.String(key),
			Body: bytes.NewReader([]byte("an archive")), ServerSideEncryption: s3types.ServerSideEncryptionAes256})
		return err
	}
	if err := put("main/wt-1/worktree"); err != nil {
		t.Fatalf("a put below the house's prefix: %v", err)
	}
	if b, ok, _ := st.Object("snaps", "main/wt-1/worktree"); !ok || string(b) != "an archive" {
		t.Fatalf("the stand-in holds %q (%v), want the archive", b, ok)
	}
	err := put("other-house/wt-1/worktree")
	if s3Code(err) != "AccessDenied" || !strings.Contains(err.Error(), "s3:PutObject") {
		t.Fatalf("a put outside the prefix: %v, want AccessDenied naming s3:PutObject", err)
	}
	if _, ok, _ := st.Object("snaps", "other-house/wt-1/worktree"); ok {
		t.Fatal("the denied put reached the stand-in")
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("snaps"), Key: aws.String("main/wt-1/worktree")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "an archive" {
		t.Fatalf("get: %q", b)
	}
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("snaps"), Key: aws.String("main/wt-2/worktree")}); s3Code(err) != "NoSuchKey" {
		t.Fatalf("a missing snapshot: %v, want NoSuchKey", err)
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("snaps"), Prefix: aws.String("main/")}); err != nil {
		t.Fatalf("a listing of the house's prefix: %v", err)
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("snaps")}); s3Code(err) != "AccessDenied" {
		t.Fatalf("a listing of the whole bucket: %v, want AccessDenied", err)
	}
	// A put without encryption passes the role's policy and meets the
	// bucket's (the stand-in's front).
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("snaps"), Key: aws.String("main/wt-3/worktree"),
		Body: bytes.NewReader([]byte("x"))}); s3Code(err) != "AccessDenied" {
		t.Fatalf("a put without encryption: %v, want AccessDenied", err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("snaps"), Key: aws.String("main/wt-1/worktree")}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, ok, _ := st.Object("snaps", "main/wt-1/worktree"); ok {
		t.Fatal("the deleted snapshot is still there")
	}
	var actions []string
	for _, d := range g.Decisions() {
		if !d.Allowed {
			actions = append(actions, d.Action+" "+d.Resource)
		}
	}
	want := []string{"s3:PutObject arn:aws:s3:::snaps/other-house/wt-1/worktree", "s3:ListBucket arn:aws:s3:::snaps"}
	if strings.Join(actions, ",") != strings.Join(want, ",") {
		t.Errorf("denials %v, want %v", actions, want)
	}
}

// A multipart upload (the snapshot store's path for a large snapshot)
// goes through: create, parts, complete.
func TestS3GateMultipart(t *testing.T) {
	c, st, _, _ := s3Env(t, s3Policy)
	ctx := t.Context()
	key := aws.String("main/wt-1/worktree")
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("snaps"), Key: key,
		ServerSideEncryption: s3types.ServerSideEncryptionAes256})
	if err != nil {
		t.Fatal(err)
	}
	part := bytes.Repeat([]byte("p"), 5<<20)
	var parts []s3types.CompletedPart
	for n := int32(1); n <= 2; n++ {
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("snaps"), Key: key, UploadId: up.UploadId,
			PartNumber: aws.Int32(n), Body: bytes.NewReader(part)})
		if err != nil {
			t.Fatalf("part %d: %v", n, err)
		}
		parts = append(parts, s3types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("snaps"), Key: key,
		UploadId: up.UploadId, MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
	if b, ok, _ := st.Object("snaps", *key); !ok || len(b) != 2*len(part) {
		t.Fatalf("the object holds %d bytes, want %d", len(b), 2*len(part))
	}
}

// What the SDK would never send is refused, not passed on: a wrong
// signature, an unsigned or mismatched payload hash, operations the gate
// does not model.
func TestS3GateRefuses(t *testing.T) {
	c, _, _, p := s3Env(t, s3Policy)
	ctx := t.Context()
	wrong := s3.New(c.Options(), func(o *s3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(p.AccessKeyID, "not-the-secret", p.SessionToken)
	})
	if _, err := wrong.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("snaps"), Key: aws.String("main/a")}); s3Code(err) != "SignatureDoesNotMatch" {
		t.Errorf("a wrong secret: %v, want SignatureDoesNotMatch", err)
	}
	stranger := s3.New(c.Options(), func(o *s3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider("AKIASTRANGER", "x", "")
	})
	if _, err := stranger.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("snaps"), Key: aws.String("main/a")}); s3Code(err) != "InvalidAccessKeyId" {
		t.Errorf("an unknown key: %v, want InvalidAccessKeyId", err)
	}
	if _, err := c.ListBuckets(ctx, &s3.ListBucketsInput{}); s3Code(err) != "NotImplemented" {
		t.Errorf("ListBuckets: %v, want NotImplemented", err)
	}
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("snaps"), Key: aws.String("main/b"),
		CopySource: aws.String("snaps/main/a")}); s3Code(err) != "NotImplemented" {
		t.Errorf("CopyObject: %v, want NotImplemented", err)
	}
	// An unauthenticated request, and one whose body is not what its
	// signed hash says.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, *c.Options().BaseEndpoint+"/snaps/main/a", nil)
	resp, err := c.Options().HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("an anonymous get: %d, want 403", resp.StatusCode)
	}
}
