// Package bootstrap derives the one-time code an ECS worker task receives in
// place of its credential. The code travels in RunTask's container overrides,
// which ECS shows to anyone who may describe the task and CloudTrail records,
// so it is not the credential: it is a MAC keyed by the worker's token, which
// reveals nothing of the token, and galley exchanges it for the token once,
// for the first claimant only, and only shortly after the launch (see
// docs/runtime-ecs.md). Both the ECS runtime (which writes the code) and the
// worker API (which checks it) use this package; it depends on nothing but
// the standard library.
package bootstrap

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"time"
)

// Prefix marks a bootstrap code, so that it is never mistaken for a token.
const Prefix = "gb1."

// DefaultTTL is how long after a worker's creation galley should still
// exchange its code: enough for Fargate to pull the image and start the
// task, short enough that a code read from the overrides later is dead.
const DefaultTTL = 15 * time.Minute

// label separates this use of the worker token as a MAC key from any other.
const label = "galley-worker-bootstrap\x00"

// Code returns the bootstrap code for the worker handle whose credential is
// token. It is deterministic, so that every retried RunTask of one launch
// sends the same overrides (ECS refuses a reused clientToken whose
// parameters changed).
func Code(token, handle string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(label + handle))
	return Prefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Valid reports, in constant time, whether code is the bootstrap code of
// handle under its credential token.
func Valid(token, handle, code string) bool {
	if !strings.HasPrefix(code, Prefix) {
		return false
	}
	return hmac.Equal([]byte(code), []byte(Code(token, handle)))
}
