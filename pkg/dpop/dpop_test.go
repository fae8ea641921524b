package dpop_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
)

func TestProofVerifies(t *testing.T) {
	k, err := dpop.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p, err := k.Proof("POST", "https://api.example/prod/worker/v1/self?x=1", "w-1.secret", now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dpop.Verify(p, "POST", "/worker/v1/self", "w-1.secret", now)
	if err != nil {
		t.Fatal(err)
	}
	if c.JKT != k.Thumbprint() || len(c.JTI) < 16 || c.IssuedAt.Unix() != now.Unix() {
		t.Fatalf("checked %+v, key %s", c, k.Thumbprint())
	}
	p2, _ := k.Proof("POST", "https://api.example/prod/worker/v1/self", "w-1.secret", now)
	c2, _ := dpop.Verify(p2, "POST", "/worker/v1/self", "w-1.secret", now)
	if c2.JTI == c.JTI {
		t.Fatal("two proofs share a jti")
	}
	// For the exchange: no credential, no ath.
	p3, _ := k.Proof("POST", "http://127.0.0.1:1/worker/v1/credential", "", now)
	if _, err := dpop.Verify(p3, "POST", "/worker/v1/credential", "", now); err != nil {
		t.Fatal(err)
	}
}

func TestProofRefused(t *testing.T) {
	k, _ := dpop.NewKey()
	other, _ := dpop.NewKey()
	now := time.Now()
	good, _ := k.Proof("POST", "http://galley/worker/v1/self", "tok", now)
	parts := strings.Split(good, ".")
	otherSig, _ := other.Proof("POST", "http://galley/worker/v1/self", "tok", now)
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"typ":"dpop+jwt","alg":"none","jwk":{}}`))
	old, _ := k.Proof("POST", "http://galley/worker/v1/self", "tok", now.Add(-2*dpop.Window))
	for name, tc := range map[string]struct{ proof, method, path, cred string }{
		"none":                 {"", "POST", "/worker/v1/self", "tok"},
		"garbage":              {"a.b.c", "POST", "/worker/v1/self", "tok"},
		"another method":       {good, "GET", "/worker/v1/self", "tok"},
		"another route":        {good, "POST", "/worker/v1/exited", "tok"},
		"another credential":   {good, "POST", "/worker/v1/self", "stolen"},
		"no credential":        {good, "POST", "/worker/v1/self", ""},
		"too old":              {old, "POST", "/worker/v1/self", "tok"},
		"alg none":             {none + "." + parts[1] + ".", "POST", "/worker/v1/self", "tok"},
		"signature of another": {parts[0] + "." + parts[1] + "." + strings.Split(otherSig, ".")[2], "POST", "/worker/v1/self", "tok"},
		"claims changed":       {parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"jti":"aaaaaaaaaaaaaaaaaaaa","htm":"POST","htu":"http://galley/worker/v1/self","iat":1}`)) + "." + parts[2], "POST", "/worker/v1/self", "tok"},
	} {
		if _, err := dpop.Verify(tc.proof, tc.method, tc.path, tc.cred, now); !errors.Is(err, dpop.ErrProof) {
			t.Errorf("%s: %v, want a refusal", name, err)
		} else if strings.Contains(err.Error(), "tok") {
			t.Errorf("%s: the refusal names the credential: %v", name, err)
		}
	}
}
