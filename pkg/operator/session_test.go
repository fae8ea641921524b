package operator_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// clock is a settable clock for the handler.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// newClock starts at the real time: the stores expire entries by their
// own (real) clock, so a handler's time must not lag it.
func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// houseStore is a store.Store that keeps worker event logs too, as the
// stores of both shapes do.
type houseStore interface {
	store.Store
	operator.Events
}

// stores are the stores the session tests run on; dump, when set, closes
// the store and answers every byte it wrote to disk.
var stores = []struct {
	name string
	open func(t *testing.T) (st houseStore, dump func() []byte)
}{
	{"memstore", func(*testing.T) (houseStore, func() []byte) { return memstore.New(), nil }},
	{"bbolt", func(t *testing.T) (houseStore, func() []byte) {
		path := filepath.Join(t.TempDir(), "galley.db")
		st, err := boltstore.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st, func() []byte {
			st.Close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}},
}

// console serves the operator API for token on st, with the clock.
func console(t *testing.T, token string, st houseStore, clk *clock) *httptest.Server {
	h := operator.New([]byte(token), &actions{}, st, st, localbell.New(), nil, operator.WithClock(clk.Now))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// login logs in to srv with token and answers the session cookie.
func login(t *testing.T, srv *httptest.Server, token string) *http.Cookie {
	t.Helper()
	r := do(t, srv, "POST", operator.PathLogin, `{"token":"`+token+`"}`, operator.CSRFHeader, "1", "Origin", srv.URL)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", r.StatusCode)
	}
	for _, c := range r.Cookies() {
		if c.Name == "galley_operator" {
			return c
		}
	}
	t.Fatal("the login set no session cookie")
	return nil
}

// read answers the status of a read of the workers with the cookie's value.
func read(t *testing.T, srv *httptest.Server, c *http.Cookie) int {
	t.Helper()
	return do(t, srv, "GET", operator.PathWorkers, "", "Cookie", c.Name+"="+c.Value).StatusCode
}

func logout(t *testing.T, srv *httptest.Server, c *http.Cookie) *http.Response {
	t.Helper()
	return do(t, srv, "POST", operator.PathLogout, "", "Cookie", c.Name+"="+c.Value, operator.CSRFHeader, "1", "Origin", srv.URL)
}

// A session is issued at login (a fresh random id each time, of which
// the store keeps only the hash) and ends, on the server, at its logout,
// at its lifetime by the server's clock, and when the operator token
// changes: its cookie, replayed, is refused.
func TestSessionsEnd(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			st, dump := sc.open(t)
			clk := newClock()
			srv := console(t, "token-one", st, clk)
			a, b := login(t, srv, "token-one"), login(t, srv, "token-one")
			if a.Value == b.Value {
				t.Fatal("two logins gave one session cookie")
			}
			for _, c := range []*http.Cookie{a, b} {
				raw, err := base64.RawURLEncoding.DecodeString(c.Value)
				if err != nil || len(raw) < 32 {
					t.Errorf("session id %q: %d bytes (%v), want 32 random bytes, base64url", c.Value, len(raw), err)
				}
				if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != operator.Prefix ||
					c.MaxAge != int(operator.SessionLifetime/time.Second) || c.Secure {
					t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, path %s, Max-Age of the lifetime, not Secure over http", c, operator.Prefix)
				}
				if st := read(t, srv, c); st != http.StatusOK {
					t.Fatalf("a read with a fresh session: %d", st)
				}
			}

			// The store holds the id's hash, never the id.
			ctx := context.Background()
			if _, err := st.GetSession(ctx, a.Value); galleyerr.KindOf(err) != galleyerr.NotFound {
				t.Errorf("the store has a session under the cookie's own value: %v", err)
			}
			h := sha256.Sum256([]byte(a.Value))
			se, err := st.GetSession(ctx, hex.EncodeToString(h[:]))
			if err != nil {
				t.Fatalf("the session is not in the store under its id's hash: %v", err)
			}
			if !se.Expires.Equal(se.Created.Add(operator.SessionLifetime)) || se.TokenFingerprint == "" ||
				strings.Contains(se.TokenFingerprint, "token-one") {
				t.Errorf("stored session %+v: want the lifetime, a fingerprint that is not the token", se)
			}

			// Logout ends a on the server: its value, replayed, is refused;
			// b lives on.
			r := logout(t, srv, a)
			if r.StatusCode != http.StatusOK || len(r.Cookies()) != 1 || r.Cookies()[0].MaxAge >= 0 {
				t.Errorf("logout: %d, cookies %v: want 200 and the cookie cleared", r.StatusCode, r.Cookies())
			}
			if st := read(t, srv, a); st != http.StatusUnauthorized {
				t.Errorf("the cookie after its logout, replayed: %d, want 401", st)
			}
			if st := read(t, srv, b); st != http.StatusOK {
				t.Errorf("another session after one's logout: %d, want 200", st)
			}
			if r := logout(t, srv, a); r.StatusCode != http.StatusOK {
				t.Errorf("a second logout of an ended session: %d, want 200", r.StatusCode)
			}

			// Its lifetime ends it, by the server's clock, whatever the
			// browser keeps.
			clk.Add(operator.SessionLifetime - time.Second)
			if st := read(t, srv, b); st != http.StatusOK {
				t.Errorf("a session a second before its end: %d, want 200", st)
			}
			clk.Add(time.Second)
			if st := read(t, srv, b); st != http.StatusUnauthorized {
				t.Errorf("a session at its end: %d, want 401", st)
			}

			// A new operator token ends the sessions issued under the old.
			c := login(t, srv, "token-one")
			rotated := console(t, "token-two", st, clk)
			if st := read(t, rotated, c); st != http.StatusUnauthorized {
				t.Errorf("a session of the old token after a rotation: %d, want 401", st)
			}
			d := login(t, rotated, "token-two")
			if st := read(t, rotated, d); st != http.StatusOK {
				t.Errorf("a session of the new token: %d, want 200", st)
			}
			if st := read(t, srv, d); st != http.StatusUnauthorized {
				t.Errorf("a session of the new token where the old one is served: %d, want 401", st)
			}
			// A cookie galley never issued is refused.
			if st := read(t, srv, &http.Cookie{Name: "galley_operator", Value: strings.Repeat("A", 43)}); st != http.StatusUnauthorized {
				t.Errorf("a forged session id: %d, want 401", st)
			}

			if dump != nil {
				disk := dump()
				for _, k := range []*http.Cookie{a, b, c, d} {
					if bytes.Contains(disk, []byte(k.Value)) {
						t.Errorf("the store's file holds a session id")
					}
				}
				for _, tok := range []string{"token-one", "token-two"} {
					if bytes.Contains(disk, []byte(tok)) {
						t.Errorf("the store's file holds the operator token")
					}
				}
			}
		})
	}
}

// An event stream opened with a session ends once the session has: the
// credential is checked again every heartbeat.
func TestStreamEndsWithItsSession(t *testing.T) {
	st, clk, bell := memstore.New(), newClock(), localbell.New()
	srv := httptest.NewServer(operator.New([]byte("token-one"), &actions{}, st, st, bell, nil, operator.WithClock(clk.Now)))
	t.Cleanup(srv.Close)
	c := login(t, srv, "token-one")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+operator.PathWorkers+"/w-1/stream", nil)
	req.AddCookie(c)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "retry:") {
		t.Fatalf("the stream began with %q, %v", line, err)
	}
	if r := logout(t, srv, c); r.StatusCode != http.StatusOK {
		t.Fatalf("logout: %d", r.StatusCode)
	}
	// A heartbeat later an event wakes the stream, which finds its
	// session ended.
	clk.Add(16 * time.Second)
	if _, err := st.AppendEvent(ctx, "w-1", store.Event{At: time.Now(), Kind: eventlog.KindHarness, Text: "after the logout"}); err != nil {
		t.Fatal(err)
	}
	_ = bell.Ring(ctx, eventlog.Topic("w-1"))
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("the stream of an ended session did not end: %v", err)
	}
}

// Attempts at the operator token are throttled per client address (the
// connection's, never X-Forwarded-For) and in all, per minute: past a
// limit they are answered 429 with Retry-After and a JSON error, the
// token unread, without a store write each; a right token from another
// address still logs in until the ceiling in all; the next minute opens
// again.
func TestLoginThrottle(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			inner, _ := sc.open(t)
			st := faultstore.New(inner)
			clk := newClock()
			h := operator.New([]byte("token-one"), &actions{}, inner, st, localbell.New(), nil, operator.WithClock(clk.Now))
			call := func(method, path, addr, body string, header ...string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(method, path, strings.NewReader(body))
				req.RemoteAddr = addr
				req.Header.Set(operator.CSRFHeader, "1")
				for i := 0; i+1 < len(header); i += 2 {
					req.Header.Set(header[i], header[i+1])
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			loginFrom := func(addr, token string, header ...string) *httptest.ResponseRecorder {
				return call("POST", operator.PathLogin, addr, `{"token":"`+token+`"}`, header...)
			}
			bearerFrom := func(addr, token string) *httptest.ResponseRecorder {
				return call("GET", operator.PathWorkers, addr, "", "Authorization", "Bearer "+token)
			}
			throttled := func(what string, rec *httptest.ResponseRecorder, why string) {
				t.Helper()
				var e struct{ Error string }
				_ = json.Unmarshal(rec.Body.Bytes(), &e)
				s, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
				if rec.Code != http.StatusTooManyRequests || s < 1 || s > 60 || !strings.Contains(e.Error, why) {
					t.Errorf("%s: %d, Retry-After %q, %s: want 429, 1 to 60 s, an error naming %q", what, rec.Code,
						rec.Header().Get("Retry-After"), rec.Body.String(), why)
				}
			}
			wantCode := func(what string, rec *httptest.ResponseRecorder, code int) {
				t.Helper()
				if rec.Code != code {
					t.Errorf("%s: %d %s, want %d", what, rec.Code, rec.Body.String(), code)
				}
			}

			// One address: ten wrong tokens are each refused 401; the
			// eleventh attempt, even with the right token and another
			// address in X-Forwarded-For, is throttled.
			for i := range operator.LoginsPerAddress {
				wantCode("wrong login "+strconv.Itoa(i+1), loginFrom("192.0.2.1:4000", "guess"), http.StatusUnauthorized)
			}
			throttled("the right token past the address's limit", loginFrom("192.0.2.1:4001", "token-one", "X-Forwarded-For", "198.51.100.9"), "this address")
			writes := st.Calls("AddTally")
			throttled("again", loginFrom("192.0.2.1:4002", "token-one"), "this address")
			if n := st.Calls("AddTally") - writes; n != 0 {
				t.Errorf("a throttled attempt made %d store writes, want none", n)
			}
			// Another address logs in.
			wantCode("the right token from another address", loginFrom("192.0.2.2:4000", "token-one"), http.StatusOK)

			// Wrong bearer tokens are attempts too.
			for range operator.LoginsPerAddress {
				wantCode("a wrong bearer token", bearerFrom("192.0.2.3:4000", "guess"), http.StatusUnauthorized)
			}
			throttled("the right bearer token past the address's limit", bearerFrom("192.0.2.3:4000", "token-one"), "this address")
			wantCode("the right bearer token from another address", bearerFrom("192.0.2.4:4000", "token-one"), http.StatusOK)

			// An IPv6 client counts by its /64.
			for range operator.LoginsPerAddress {
				wantCode("a wrong login over IPv6", loginFrom("[2001:db8:1:2::1]:4000", "guess"), http.StatusUnauthorized)
			}
			throttled("the right token from the same /64", loginFrom("[2001:db8:1:2::ffff]:4000", "token-one"), "this address")
			wantCode("the right token from another /64", loginFrom("[2001:db8:1:3::1]:4000", "token-one"), http.StatusOK)

			// So far 32 attempts counted in all (10 + 1 + 10 + 10 + 1; the
			// throttled ones are not); others' wrong attempts fill the
			// ceiling, then every attempt is refused, the right token too.
			for i := range operator.LoginsInAll - 32 {
				addr := "203.0.113." + strconv.Itoa(10+i/5) + ":4000"
				wantCode("a wrong login from one of many", loginFrom(addr, "guess"), http.StatusUnauthorized)
			}
			throttled("the right token past the ceiling in all", loginFrom("198.51.100.1:4000", "token-one"), "in all")
			throttled("the right bearer token past the ceiling in all", bearerFrom("198.51.100.2:4000", "token-one"), "in all")

			// The next minute opens again, the first address too.
			s, _ := strconv.Atoi(loginFrom("198.51.100.1:4000", "token-one").Header().Get("Retry-After"))
			clk.Add(time.Duration(s) * time.Second)
			wantCode("the right token the next minute", loginFrom("192.0.2.1:4000", "token-one"), http.StatusOK)
			wantCode("the right bearer token the next minute", bearerFrom("192.0.2.3:4000", "token-one"), http.StatusOK)
		})
	}
}

// When the store fails, the API fails closed and says so: a session that
// cannot be read opens nothing (503, not 401, so the console does not
// ask for the token again), a logout that cannot end the session keeps
// the cookie, and a login that cannot be counted is not tried.
func TestSessionStoreFailures(t *testing.T) {
	inner := memstore.New()
	st := faultstore.New(inner)
	srv := httptest.NewServer(operator.New([]byte("token-one"), &actions{}, inner, st, localbell.New(), nil))
	t.Cleanup(srv.Close)
	c := login(t, srv, "token-one")

	st.Inject(faultstore.Fault{Method: "GetSession", When: faultstore.Before})
	if code := read(t, srv, c); code != http.StatusServiceUnavailable {
		t.Errorf("a read whose session cannot be read: %d, want 503", code)
	}
	st.Clear()
	st.Inject(faultstore.Fault{Method: "DeleteSession", When: faultstore.Before})
	if r := logout(t, srv, c); r.StatusCode != http.StatusServiceUnavailable || len(r.Cookies()) != 0 {
		t.Errorf("a logout that cannot end the session: %d, cookies %v; want 503 and the cookie kept", r.StatusCode, r.Cookies())
	}
	st.Clear()
	if code := read(t, srv, c); code != http.StatusOK {
		t.Errorf("the session after a failed logout: %d, want 200 (it was not ended)", code)
	}
	st.Inject(faultstore.Fault{Method: "AddTally", When: faultstore.Before})
	if r := do(t, srv, "POST", operator.PathLogin, `{"token":"token-one"}`, operator.CSRFHeader, "1"); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a login that cannot be counted: %d, want 503", r.StatusCode)
	}
	st.Clear()
	if r := logout(t, srv, c); r.StatusCode != http.StatusOK {
		t.Fatalf("logout: %d", r.StatusCode)
	}
	if code := read(t, srv, c); code != http.StatusUnauthorized {
		t.Errorf("the cookie after its logout: %d, want 401", code)
	}
}
