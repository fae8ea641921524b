// Package dpop binds a worker's credential to a key its harness holds in
// memory, after OAuth's DPoP (RFC 9449): every call carries a fresh proof,
// a JWT signed by that key naming the call's method and URL, its time, a
// random id and a hash of the credential. A credential read from an
// environment, a log or a core dump is then worthless without the key.
//
// Only what galley needs of RFC 9449 is here, with the standard library:
// one algorithm (ES256, so no algorithm choice is left to the proof), the
// key's JWK in the proof's header, the key named by its JWK thumbprint
// (RFC 7638). A general JOSE library would bring every algorithm and
// serialization to refuse; this accepts one exact shape.
package dpop

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// Header is the HTTP header that carries a proof.
const Header = "DPoP"

// Scheme is the Authorization scheme of a bound credential.
const Scheme = "DPoP"

// Window is how far a proof's time may be from galley's clock either way
// (clocks of a Fargate task and a Lambda differ a little); a replay cache
// must keep a proof's id at least until IssuedAt + Window.
const Window = 60 * time.Second

// maxProof bounds a proof's size: header, claims and signature of ES256
// take well under 1 KiB.
const maxProof = 4096

// Key is a harness's proof key. It never leaves the process.
type Key struct {
	priv *ecdsa.PrivateKey
	jwk  []byte // the public JWK, canonical (RFC 7638 order)
	jkt  string
}

// NewKey makes a P-256 key.
func NewKey() (*Key, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pub, err := priv.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		return nil, err
	}
	jwk, jkt := canonicalJWK(pub[1:33], pub[33:65])
	return &Key{priv: priv, jwk: jwk, jkt: jkt}, nil
}

// Thumbprint is the key's JWK thumbprint (RFC 7638, SHA-256, base64url).
func (k *Key) Thumbprint() string { return k.jkt }

type header struct {
	Typ string          `json:"typ"`
	Alg string          `json:"alg"`
	JWK json.RawMessage `json:"jwk"`
}

type claims struct {
	JTI string `json:"jti"`
	HTM string `json:"htm"`
	HTU string `json:"htu"`
	IAT int64  `json:"iat"`
	ATH string `json:"ath,omitempty"`
}

// Proof makes a proof for one request: method, the request's URL (its query
// and fragment are dropped, as RFC 9449 says) and the credential it
// carries ("" for the call that obtains one).
func (k *Key) Proof(method, rawURL, credential string, now time.Time) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	u.RawQuery, u.Fragment, u.RawFragment = "", "", ""
	var id [16]byte
	_, _ = rand.Read(id[:])
	c := claims{JTI: b64(id[:]), HTM: method, HTU: u.String(), IAT: now.Unix()}
	if credential != "" {
		c.ATH = Hash(credential)
	}
	h, err := json.Marshal(header{Typ: "dpop+jwt", Alg: "ES256", JWK: k.jwk})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	input := b64(h) + "." + b64(p)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, k.priv, sum[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + b64(sig), nil
}

// Hash is a credential's hash as a proof's ath claim carries it.
func Hash(credential string) string {
	sum := sha256.Sum256([]byte(credential))
	return b64(sum[:])
}

// Request is what a server checks a proof against: the DPoP header's
// value, and the request's method and URL path.
type Request struct {
	Proof, Method, Path string
}

// Checked is what a valid proof says.
type Checked struct {
	JTI      string    // the proof's random id, for the replay cache
	IssuedAt time.Time // keep JTI until IssuedAt + Window at least
	JKT      string    // the signing key's thumbprint
}

// ErrProof is the kind of every refusal: the message says which check
// failed, never a credential.
var ErrProof = errors.New("invalid DPoP proof")

func refuse(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProof}, a...)...)
}

// Verify checks a proof for a request of method to path (the URL path as
// the server sees it: a gateway may serve under another host or a stage
// prefix, so the proof's URL must end with it) carrying credential ("" for
// none): its shape, its signature by the JWK in its header, the method, the
// URL, its time within Window of now, and the credential's hash. It does
// not check the replay cache nor which key the credential is bound to;
// the caller does, with Checked.
func Verify(proof, method, path, credential string, now time.Time) (Checked, error) {
	if proof == "" {
		return Checked{}, refuse("no %s header", Header)
	}
	if len(proof) > maxProof {
		return Checked{}, refuse("over %d bytes", maxProof)
	}
	parts := strings.Split(proof, ".")
	if len(parts) != 3 {
		return Checked{}, refuse("not a compact JWS")
	}
	var h header
	if err := strictJSON(parts[0], &h); err != nil {
		return Checked{}, refuse("header: %v", err)
	}
	if h.Typ != "dpop+jwt" || h.Alg != "ES256" {
		return Checked{}, refuse("want typ dpop+jwt and alg ES256")
	}
	pub, jkt, err := parseJWK(h.JWK)
	if err != nil {
		return Checked{}, refuse("jwk: %v", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return Checked{}, refuse("signature is not 64 bytes of base64url")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return Checked{}, refuse("bad signature")
	}
	var c claims
	if err := strictJSON(parts[1], &c); err != nil {
		return Checked{}, refuse("claims: %v", err)
	}
	if c.HTM != method {
		return Checked{}, refuse("htm %q is not the request's method", c.HTM)
	}
	u, err := url.Parse(c.HTU)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" || u.Fragment != "" ||
		!strings.HasSuffix(u.EscapedPath(), path) || path == "" {
		return Checked{}, refuse("htu is not the request's URL")
	}
	iat := time.Unix(c.IAT, 0)
	if iat.Before(now.Add(-Window)) || iat.After(now.Add(Window)) {
		return Checked{}, refuse("iat is more than %v from the server's clock", Window)
	}
	if len(c.JTI) < 16 || len(c.JTI) > 128 {
		return Checked{}, refuse("jti must be 16 to 128 characters")
	}
	switch {
	case credential == "" && c.ATH != "":
		return Checked{}, refuse("ath without a credential")
	case credential != "" && c.ATH != Hash(credential):
		return Checked{}, refuse("ath is not the credential's hash")
	}
	return Checked{JTI: c.JTI, IssuedAt: iat, JKT: jkt}, nil
}

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWK reads a public P-256 JWK (no private part: strict decoding
// refuses a "d") and returns the key and its thumbprint.
func parseJWK(raw json.RawMessage) (*ecdsa.PublicKey, string, error) {
	var k jwk
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&k); err != nil {
		return nil, "", err
	}
	if k.Kty != "EC" || k.Crv != "P-256" {
		return nil, "", errors.New("want kty EC, crv P-256")
	}
	x, err1 := base64.RawURLEncoding.DecodeString(k.X)
	y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
	if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
		return nil, "", errors.New("x and y must be 32 bytes of base64url")
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	if err != nil {
		return nil, "", errors.New("not a point of P-256")
	}
	_, jkt := canonicalJWK(x, y)
	return pub, jkt, nil
}

// canonicalJWK is the public JWK with members in RFC 7638's order (which
// is also what the thumbprint hashes) and its thumbprint.
func canonicalJWK(x, y []byte) ([]byte, string) {
	j := []byte(`{"crv":"P-256","kty":"EC","x":"` + b64(x) + `","y":"` + b64(y) + `"}`)
	sum := sha256.Sum256(j)
	return j, b64(sum[:])
}

func strictJSON(part string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		return errors.New("not base64url")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
