package iamgate

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Signature Version 4, verified the way AWS does: recompute the signature
// from the request as received and compare. Only the Authorization header
// form is accepted (no presigned query), which is all the SDK sends to
// these JSON services.
const (
	sigAlgorithm = "AWS4-HMAC-SHA256"
	amzDate      = "X-Amz-Date"
	amzToken     = "X-Amz-Security-Token"
	timeFormat   = "20060102T150405Z"
	// maxSkew is how far a request's X-Amz-Date may be from the clock.
	maxSkew = 5 * time.Minute
)

// authHeader is a parsed Authorization header.
type authHeader struct {
	accessKey     string
	date          string // yyyymmdd of the credential scope
	region        string
	service       string
	signedHeaders []string
	signature     string
}

// parseAuth parses "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/sqs/aws4_request,
// SignedHeaders=host;x-amz-date, Signature=hex". ok is false when the header
// is malformed; why says what is missing, in AWS's words where known.
func parseAuth(h string) (a authHeader, why string) {
	alg, rest, ok := strings.Cut(h, " ")
	if !ok || alg != sigAlgorithm {
		return a, "Authorization header requires '" + sigAlgorithm + "' algorithm."
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		fields[k] = v
	}
	for _, k := range []string{"Credential", "SignedHeaders", "Signature"} {
		if fields[k] == "" {
			return a, "Authorization header requires '" + k + "' parameter."
		}
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || scope[0] == "" {
		return a, "Credential should be of the form 'access key/date/region/service/aws4_request'."
	}
	a = authHeader{
		accessKey:     scope[0],
		date:          scope[1],
		region:        scope[2],
		service:       scope[3],
		signedHeaders: strings.Split(fields["SignedHeaders"], ";"),
		signature:     fields["Signature"],
	}
	return a, ""
}

// signature computes the SigV4 signature of r (with its body) for the
// secret key and the scope in a.
// payloadHash is the canonical request's last line: the body's SHA-256
// in hex, or what S3's x-amz-content-sha256 names (s3PayloadHash); S3's
// path is not encoded a second time (s3Path).
func signature(r *http.Request, payloadHash string, s3Path bool, a authHeader, secret, stamp string) string {
	var canon strings.Builder
	canon.WriteString(r.Method)
	canon.WriteByte('\n')
	if s3Path {
		canon.WriteString(canonicalS3URI(r.URL))
	} else {
		canon.WriteString(canonicalURI(r.URL))
	}
	canon.WriteByte('\n')
	canon.WriteString(canonicalQuery(r.URL))
	canon.WriteByte('\n')
	for _, h := range a.signedHeaders {
		canon.WriteString(h)
		canon.WriteByte(':')
		canon.WriteString(headerValue(r, h))
		canon.WriteByte('\n')
	}
	canon.WriteByte('\n')
	canon.WriteString(strings.Join(a.signedHeaders, ";"))
	canon.WriteByte('\n')
	canon.WriteString(payloadHash)

	scope := a.date + "/" + a.region + "/" + a.service + "/aws4_request"
	creq := sha256.Sum256([]byte(canon.String()))
	toSign := sigAlgorithm + "\n" + stamp + "\n" + scope + "\n" + hex.EncodeToString(creq[:])

	k := hmacSHA256([]byte("AWS4"+secret), a.date)
	k = hmacSHA256(k, a.region)
	k = hmacSHA256(k, a.service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, toSign))
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func sameSignature(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// headerValue is a header's canonical value: its values joined by commas,
// each trimmed with inner runs of spaces collapsed. Go's server moves Host
// (and sometimes Content-Length) out of the header map.
func headerValue(r *http.Request, name string) string {
	switch name {
	case "host":
		return r.Host
	case "content-length":
		if v := r.Header.Get("Content-Length"); v != "" {
			return v
		}
		return strconv.FormatInt(r.ContentLength, 10)
	}
	vals := r.Header.Values(name)
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(out, ",")
}

// canonicalURI encodes the path a second time, as SigV4 wants for every
// service but S3.
func canonicalURI(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		return "/"
	}
	return escape(p, true)
}

// canonicalS3URI is the path as sent, encoded once: S3 signs it so.
func canonicalS3URI(u *url.URL) string {
	if p := u.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

// bodyHash is a body's SHA-256 in hex.
func bodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

func canonicalQuery(u *url.URL) string {
	q := u.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		vals := append([]string(nil), q[k]...)
		sort.Strings(vals)
		for _, v := range vals {
			parts = append(parts, escape(k, false)+"="+escape(v, false))
		}
	}
	return strings.Join(parts, "&")
}

// escape percent-encodes all but SigV4's unreserved characters (and "/"
// in a path).
func escape(s string, path bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.', c == '~', path && c == '/':
			b.WriteByte(c)
		default:
			b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
		}
	}
	return b.String()
}
