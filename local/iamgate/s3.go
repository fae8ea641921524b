package iamgate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"strings"

	"github.com/galley-run/galley/local/awswire"
)

// S3 speaks REST: the operation is the method, the path (/<bucket> or
// /<bucket>/<key>, path-style, as aws-local's callers address it) and
// the query's sub-resource; errors are S3's XML <Error> document, and a
// denial is HTTP 403 AccessDenied. The payload's hash travels in
// x-amz-content-sha256, signed: a hex digest the gate checks against the
// body, or UNSIGNED-PAYLOAD or STREAMING-UNSIGNED-PAYLOAD-TRAILER (what
// the SDK sends over TLS), which SigV4 signs as written. A body of signed
// chunks (STREAMING-AWS4-HMAC-SHA256-PAYLOAD...) is refused: the gate
// does not verify chunk signatures.

// Payload hashes S3 takes in x-amz-content-sha256 beside a hex digest.
const (
	s3UnsignedPayload = "UNSIGNED-PAYLOAD"
	s3UnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	amzContentSHA256  = "X-Amz-Content-Sha256"
)

// s3Codes maps the gate's authentication errors (by their query code) to
// S3's own code and status.
var s3Codes = map[string]struct {
	code   string
	status int
}{
	"InvalidClientTokenId":       {"InvalidAccessKeyId", http.StatusForbidden},
	"SignatureDoesNotMatch":      {"SignatureDoesNotMatch", http.StatusForbidden},
	"MissingAuthenticationToken": {"AccessDenied", http.StatusForbidden},
	"IncompleteSignature":        {"AuthorizationHeaderMalformed", http.StatusBadRequest},
	"ExpiredToken":               {"ExpiredToken", http.StatusBadRequest},
	"AccessDenied":               {"AccessDenied", http.StatusForbidden},
}

// s3ErrorDoc is S3's error document.
type s3ErrorDoc struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
}

func writeS3Error(w http.ResponseWriter, e awsError) {
	code, status := e.queryCode, e.status
	if c, ok := s3Codes[e.queryCode]; ok {
		code, status = c.code, c.status
	}
	if code == "" {
		code = e.typ
	}
	id := awswire.UUID()
	b, _ := xml.Marshal(s3ErrorDoc{Code: code, Message: e.message, RequestID: id})
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("X-Amz-Request-Id", id)
	w.WriteHeader(status)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}

// s3PayloadHash is the payload hash SigV4 signs for an S3 request, or the
// error S3 answers: the header must be present (and signed, which
// authenticate checks), a hex digest must be the body's.
func (g *Gate) s3PayloadHash(r *http.Request, body []byte) (string, *awsError) {
	h := r.Header.Get(amzContentSHA256)
	switch {
	case h == "":
		e := awsError{status: http.StatusBadRequest, queryCode: "InvalidRequest",
			message: "Missing required header for this request: x-amz-content-sha256"}
		return "", &e
	case h == s3UnsignedPayload || h == s3UnsignedTrailer:
		return h, nil
	case strings.HasPrefix(h, "STREAMING-"):
		e := awsError{status: http.StatusNotImplemented, queryCode: "NotImplemented",
			message: "iamgate: x-amz-content-sha256 " + h + " (signed chunks) is not modelled by the IAM gate; refusing it rather than passing it unchecked"}
		return "", &e
	}
	sum := sha256.Sum256(body)
	if want := hex.EncodeToString(sum[:]); !strings.EqualFold(h, want) {
		e := awsError{status: http.StatusBadRequest, queryCode: "XAmzContentSHA256Mismatch",
			message: "The provided 'x-amz-content-sha256' header does not match what was computed."}
		return "", &e
	}
	return strings.ToLower(h), nil
}

// s3Operation maps an S3 request to its operation and the authorizations
// it needs: the snapshot store's operations (objects: PutObject and the
// multipart upload's, GetObject, HeadObject, DeleteObject; the bucket:
// ListObjectsV2). Anything else is refused, never passed through
// unchecked. Resources are arn:aws:s3:::<bucket> and
// arn:aws:s3:::<bucket>/<key>; a put's context has
// s3:x-amz-server-side-encryption as the request names it, a listing's
// s3:prefix.
func (g *Gate) s3Operation(r *http.Request) (string, mapping, *awsError) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ := strings.Cut(path, "/")
	q := r.URL.Query()
	refuse := func(what string) (string, mapping, *awsError) {
		e := awsError{status: http.StatusNotImplemented, queryCode: "NotImplemented",
			message: "iamgate: s3 " + what + " is not modelled by the IAM gate; refusing it rather than passing it unchecked"}
		return "", mapping{}, &e
	}
	if bucket == "" {
		return refuse("a request naming no bucket (ListBuckets, or virtual-hosted addressing)")
	}
	for k := range q {
		switch k {
		case "uploads", "uploadId", "partNumber", "list-type", "prefix", "delimiter", "max-keys",
			"continuation-token", "start-after", "encoding-type", "x-id":
		default:
			return refuse("the sub-resource or parameter " + k)
		}
	}
	if r.Header.Get("X-Amz-Copy-Source") != "" {
		return refuse("a copy (x-amz-copy-source)")
	}
	bucketARN := "arn:aws:s3:::" + bucket
	object := func(op, action string, ctx map[string][]string) (string, mapping, *awsError) {
		if key == "" {
			return refuse(r.Method + " on a bucket")
		}
		return op, mapping{checks: []check{{action: action, resource: bucketARN + "/" + key, context: ctx}}}, nil
	}
	sse := func() map[string][]string {
		if v := r.Header.Get("X-Amz-Server-Side-Encryption"); v != "" {
			return map[string][]string{"s3:x-amz-server-side-encryption": {v}}
		}
		return nil
	}
	switch {
	case r.Method == http.MethodPut && q.Has("partNumber") && q.Has("uploadId"):
		return object("UploadPart", "s3:PutObject", nil)
	case r.Method == http.MethodPut && !q.Has("uploadId") && !q.Has("partNumber"):
		return object("PutObject", "s3:PutObject", sse())
	case r.Method == http.MethodPost && q.Has("uploads"):
		return object("CreateMultipartUpload", "s3:PutObject", sse())
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return object("CompleteMultipartUpload", "s3:PutObject", nil)
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return object("AbortMultipartUpload", "s3:AbortMultipartUpload", nil)
	case r.Method == http.MethodDelete:
		return object("DeleteObject", "s3:DeleteObject", nil)
	case r.Method == http.MethodGet && key != "" && !q.Has("uploadId"):
		return object("GetObject", "s3:GetObject", nil)
	case r.Method == http.MethodHead && key != "":
		return object("HeadObject", "s3:GetObject", nil)
	case r.Method == http.MethodGet && key == "" && q.Get("list-type") == "2":
		// s3:prefix only when the request names one, as S3 sets it.
		var ctx map[string][]string
		if q.Has("prefix") {
			ctx = map[string][]string{"s3:prefix": {q.Get("prefix")}}
		}
		return "ListObjectsV2", mapping{checks: []check{{action: "s3:ListBucket", resource: bucketARN, context: ctx}}}, nil
	}
	return refuse(r.Method + " without a sub-resource the gate models")
}
