package operator

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// SessionLifetime is how long a console session lives after its login,
// by the server's clock (the cookie's Max-Age says the same to the
// browser, which is not trusted to keep it).
const SessionLifetime = 12 * time.Hour

// Sessions is where the handler keeps the console's sessions and counts
// attempts at the operator token: the house's store, which every process
// serving the operator shares, so a logout in one ends the session in
// all and the limits hold across them.
type Sessions interface {
	store.Sessions
	store.Tallies
}

// sessionIDBytes is the randomness of a session id, sent base64url
// (sessionIDLen characters).
const (
	sessionIDBytes = 32
	sessionIDLen   = 43
)

func newSessionID() string {
	b := make([]byte, sessionIDBytes)
	_, _ = rand.Read(b) // crypto/rand does not fail on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// idHash is what the store keeps of a session id: its SHA-256, so who
// reads the store finds no cookie that opens the console.
func idHash(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// tokenFingerprint names the operator token a session is issued under:
// a MAC made with the token, never the token.
func tokenFingerprint(token []byte) string {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("galley operator session: token fingerprint"))
	return hex.EncodeToString(m.Sum(nil))
}

// authn is how a request is authenticated.
type authn int

const (
	refused  authn = iota
	byToken        // Authorization: Bearer <operator token>
	byCookie       // the console's session cookie
)

// auth says how r is authenticated. A wrong bearer token is an attempt at
// the token and counted as a login is; past a limit the answer is a
// refusal (429) and the token is not read. An error is the store's
// (Unavailable).
func (h *Handler) auth(r *http.Request) (authn, *refusal, error) {
	if v := r.Header.Get("Authorization"); v != "" {
		addr := clientAddr(r)
		if ref := h.limit.known(addr); ref != nil {
			return refused, ref, nil
		}
		const p = "Bearer "
		if len(v) > len(p) && strings.EqualFold(v[:len(p)], p) && h.tokenOK(v[len(p):]) {
			return byToken, nil, nil
		}
		ref, err := h.limit.count(r.Context(), addr)
		if ref == nil && err == nil {
			h.log.Info("operator request with a wrong token", "address", addr)
		}
		return refused, ref, err
	}
	if c, err := r.Cookie(cookieName); err == nil {
		ok, err := h.sessionOK(r.Context(), c.Value)
		if ok {
			return byCookie, nil, nil
		}
		return refused, nil, err
	}
	return refused, nil, nil
}

// sameSite checks what a cookie-authenticated POST must carry: the custom
// header (a cross-site form cannot send one, and a cross-site script
// cannot without a CORS preflight galley never answers) and, when sent,
// an Origin of this host.
func sameSite(r *http.Request) bool {
	if r.Header.Get(CSRFHeader) == "" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	// Behind API Gateway and Lambda the request's Host is the gateway's
	// domain name, without a port; the Host header the client sent is
	// kept in the headers (with the port, where there is one: aws-local).
	return u.Host == r.Host || u.Host == r.Header.Get("Host")
}

func (h *Handler) authed(action bool, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		how, ref, err := h.auth(r)
		switch {
		case err != nil:
			h.unavailable(w, "the operator's credentials cannot be checked now; try again", err)
			return
		case ref != nil:
			ref.write(w)
			return
		case how == refused:
			w.Header().Set("WWW-Authenticate", `Bearer realm="galley operator"`)
			writeJSON(w, http.StatusUnauthorized, errorJSON{"the operator token or session is missing, wrong or ended"})
			return
		}
		if action && how == byCookie && !sameSite(r) {
			writeJSON(w, http.StatusForbidden, errorJSON{"a console action needs the " + CSRFHeader + " header and this site's Origin"})
			return
		}
		next(w, r)
	}
}

// sessionOK reports whether id is a session that lives, by the store and
// by this handler's clock, and was issued under this handler's token.
func (h *Handler) sessionOK(ctx context.Context, id string) (bool, error) {
	if len(id) != sessionIDLen {
		return false, nil // not one galley issued: no store call
	}
	se, err := h.sessions.GetSession(ctx, idHash(id))
	switch {
	case galleyerr.KindOf(err) == galleyerr.NotFound:
		return false, nil
	case err != nil:
		return false, err
	}
	return h.now().Before(se.Expires) &&
		subtle.ConstantTimeCompare([]byte(se.TokenFingerprint), []byte(h.fingerprint)) == 1, nil
}

func (h *Handler) tokenOK(t string) bool {
	return len(h.token) > 0 && subtle.ConstantTimeCompare([]byte(t), h.token) == 1
}

// login counts the attempt, takes the operator token once and, when it is
// the token, issues a session: a fresh random id as the cookie, its hash
// in the store.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !sameSite(r) {
		writeJSON(w, http.StatusForbidden, errorJSON{"a login needs the " + CSRFHeader + " header and this site's Origin"})
		return
	}
	addr := clientAddr(r)
	ref, err := h.limit.count(r.Context(), addr)
	if err != nil {
		h.unavailable(w, "login attempts cannot be counted now; try again", err)
		return
	}
	if ref != nil {
		ref.write(w)
		return
	}
	var req struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorJSON{"the body must be {\"token\": ...}"})
		return
	}
	if !h.tokenOK(strings.TrimSpace(req.Token)) {
		h.log.Info("operator login with a wrong token", "address", addr)
		writeJSON(w, http.StatusUnauthorized, errorJSON{"that is not the operator token"})
		return
	}
	id, now := newSessionID(), h.now()
	se := store.Session{IDHash: idHash(id), TokenFingerprint: h.fingerprint, Created: now, Expires: now.Add(SessionLifetime)}
	if err := h.sessions.PutSession(r.Context(), se); err != nil {
		h.unavailable(w, "the session cannot be kept now; log in again", err)
		return
	}
	h.log.Info("operator console login", "address", addr, "expires", se.Expires)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r), MaxAge: int(SessionLifetime / time.Second)})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// logout ends the cookie's session in the store, then clears the cookie:
// the value, replayed, opens nothing. When the store cannot end it, the
// answer says so and the cookie is kept, so that the logout can be tried
// again.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if !sameSite(r) {
		writeJSON(w, http.StatusForbidden, errorJSON{"a logout needs the " + CSRFHeader + " header"})
		return
	}
	if c, err := r.Cookie(cookieName); err == nil && len(c.Value) == sessionIDLen {
		if err := h.sessions.DeleteSession(r.Context(), idHash(c.Value)); err != nil {
			h.unavailable(w, "the session cannot be ended now; log out again", err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r), MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// unavailable answers 503 for a store failure, logged (the error names
// no id: the store's errors carry the id's hash at most).
func (h *Handler) unavailable(w http.ResponseWriter, msg string, err error) {
	h.log.Warn("operator session store failed", "err", err)
	writeJSON(w, http.StatusServiceUnavailable, errorJSON{msg})
}

func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
