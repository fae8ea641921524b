package gitserve

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
)

// BasicAuth requires HTTP basic auth accepted by check; otherwise it answers
// 401 with WWW-Authenticate: Basic realm=..., as a forge does, so git asks
// its credential helpers (or, with prompts off, fails at once). The
// Authorization header is removed before next sees the request: the
// client's credential goes no further.
func BasicAuth(realm string, check func(user, pass string) bool, next http.Handler) http.Handler {
	challenge := "Basic realm=" + strconv.Quote(strings.Map(printable, realm)) + `, charset="UTF-8"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || !check(user, pass) {
			w.Header().Set("WWW-Authenticate", challenge)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		r = r.Clone(r.Context())
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

// Credential returns a check for BasicAuth that accepts exactly user and
// pass, comparing in constant time (of digests, so not even the lengths
// leak). An empty pass accepts nothing.
func Credential(user, pass string) func(user, pass string) bool {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	empty := pass == ""
	return func(u, p string) bool {
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		okUser := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		okPass := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		return okUser&okPass == 1 && !empty
	}
}

// printable drops control characters (and quotes' escapes are strconv's).
func printable(r rune) rune {
	if r < 0x20 || r == 0x7f {
		return -1
	}
	return r
}
