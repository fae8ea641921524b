package conformance

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// Defaults of a Config.
const (
	DefaultTimeout = 5 * time.Second
	DefaultWait    = 30 * time.Second
)

// Config says which deployment to check and how.
type Config struct {
	// Endpoint is the base URL kitchn would be bound to; every route is
	// below it.
	Endpoint string
	// Token is the bearer token. It goes only in the Authorization header
	// and is redacted from every result.
	Token string
	// House, Backend and Credential are the binding's: the descriptor must
	// name the first two, and every effect names the credential.
	House, Backend, Credential string
	// Only restricts the run to these checks (by name); empty runs all.
	Only []string
	// NoEffects skips every check that launches, messages, cancels or
	// releases a real worker.
	NoEffects bool
	// Timeout is the client deadline of each call (1 s to 25 s, as kitchn's);
	// await gets waitMs on top. Zero means DefaultTimeout.
	Timeout time.Duration
	// Wait bounds each wait for a worker or a mailbox message. Zero means
	// DefaultWait.
	Wait time.Duration
	// OnResult, when set, is called with each result as soon as it is known.
	OnResult func(Result)

	// wakeWait is await-wakes' waitMs; zero means 10 s. Tests shorten it.
	wakeWait time.Duration
}

// Validate checks the configuration the way kitchn checks a binding, and
// fills in defaults.
func (c *Config) Validate() error {
	const op = galleyerr.Op("conformance.config")
	if err := ValidateEndpoint(c.Endpoint); err != nil {
		return err
	}
	if c.Token == "" {
		return galleyerr.E(op, galleyerr.Invalid, "no token")
	}
	for name, v := range map[string]string{"house": c.House, "backend": c.Backend, "credential": c.Credential} {
		if !protocol.IsIdentifier(v) {
			return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s %q is not an identifier (1 to 64 letters, digits, - or _)", name, v))
		}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Timeout < time.Second || c.Timeout > 25*time.Second {
		return galleyerr.E(op, galleyerr.Invalid, "timeout must be between 1s and 25s, like the client's deadline")
	}
	if c.Wait == 0 {
		c.Wait = DefaultWait
	}
	if c.Wait < time.Second {
		return galleyerr.E(op, galleyerr.Invalid, "wait must be at least 1s")
	}
	return ValidateOnly(c.Only)
}

// ValidateOnly checks that every name is a check's.
func ValidateOnly(names []string) error {
	for _, n := range names {
		if findCheck(n) == nil {
			return galleyerr.E(galleyerr.Op("conformance.config"), galleyerr.Invalid,
				fmt.Sprintf("no check named %q (known: %s)", n, strings.Join(checkNames(), ", ")))
		}
	}
	return nil
}

// ValidateEndpoint applies the protocol's rules for a binding's endpoint:
// https, or plain http to 127.0.0.1, localhost or [::1]; a DNS name, IPv4
// address or bracketed IPv6 address; a port of 1 to 65535; no user
// information, query or fragment.
func ValidateEndpoint(s string) error {
	const op = galleyerr.Op("conformance.endpoint")
	bad := func(why string) error { return galleyerr.E(op, galleyerr.Invalid, "endpoint "+why) }
	u, err := url.Parse(s)
	if err != nil {
		return bad("is not a URL")
	}
	if u.User != nil {
		return bad("may not carry user information")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(s, "?#") {
		return bad("may not carry a query or a fragment")
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("needs a scheme and a host")
	}
	host := u.Hostname()
	switch {
	case strings.HasPrefix(u.Host, "["):
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
			return bad("has a bad IPv6 address")
		}
	case net.ParseIP(host) != nil:
		if net.ParseIP(host).To4() == nil {
			return bad("has an IPv6 address without brackets")
		}
	case !isDNSName(host):
		return bad("host is not a DNS name")
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return bad("port must be 1 to 65535")
		}
	}
	switch u.Scheme {
	case "https":
	case "http":
		if host != "127.0.0.1" && host != "localhost" && host != "::1" {
			return bad("must be https, or http to 127.0.0.1, localhost or [::1]")
		}
	default:
		return bad("must be https, or http to 127.0.0.1, localhost or [::1]")
	}
	return nil
}

func isDNSName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// maxTokenFile is the largest credential file kitchn opens.
const maxTokenFile = 16 << 10

// ReadTokenFile reads a bearer token the way kitchn reads a credential
// file: not through a symbolic link, a regular file readable by its owner
// only, at most 16 KiB. Surrounding white space is dropped. Errors never
// quote the file's content.
func ReadTokenFile(path string) (string, error) {
	const op = galleyerr.Op("conformance.token")
	fi, err := os.Lstat(path)
	if err != nil {
		return "", galleyerr.E(op, galleyerr.Invalid, "token file", err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return "", galleyerr.E(op, galleyerr.Invalid, "token file is a symbolic link; kitchn does not follow links")
	case !fi.Mode().IsRegular():
		return "", galleyerr.E(op, galleyerr.Invalid, "token file is not a regular file")
	case fi.Mode().Perm()&0o077 != 0:
		return "", galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("token file is readable by others (mode %04o); kitchn wants 600", fi.Mode().Perm()))
	case fi.Size() > maxTokenFile:
		return "", galleyerr.E(op, galleyerr.Invalid, "token file is larger than 16 KiB")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", galleyerr.E(op, galleyerr.Invalid, "token file", err)
	}
	if len(b) > maxTokenFile {
		return "", galleyerr.E(op, galleyerr.Invalid, "token file is larger than 16 KiB")
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", galleyerr.E(op, galleyerr.Invalid, "token file is empty")
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return "", galleyerr.E(op, galleyerr.Invalid, "token holds a character that cannot go in a header")
		}
	}
	return tok, nil
}
