package egress

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/stripe/smokescreen/pkg/smokescreen/hostport"
)

// HostList is a validated list of destinations. Each entry is a host name
// (example.com: that name exactly) or a wildcard (*.example.com: every name
// below example.com, not example.com itself), matched without regard to
// case or a trailing dot. In a list of the harness's destinations
// (ParseDestinations) an entry may also name a port (git.example.com:8443:
// that port only; without one, the proxy's ports apply) or be an exact IPv4
// address. The zero HostList allows nothing.
type HostList struct {
	entries []hostEntry
}

type hostEntry struct {
	host     string // lower case, no trailing dot; for a wildcard, the part after "*."
	wildcard bool
	ip       bool
	port     int // 0: the proxy's ports
}

// ParseAllowlist parses a comma-separated agent allowlist
// (GALLEY_EGRESS_ALLOW): host names and wildcards only, no port, no
// address, no URL. Empty entries are skipped; a bad entry is an error that
// names it.
func ParseAllowlist(s string) (HostList, error) { return parseHostList(s, false) }

// ParseDestinations parses a comma-separated list of the harness's own
// destinations (GALLEY_EGRESS_HARNESS_ALLOW): as ParseAllowlist, and an
// entry may name a port or be an exact IPv4 address.
func ParseDestinations(s string) (HostList, error) { return parseHostList(s, true) }

func parseHostList(s string, harness bool) (HostList, error) {
	var l HostList
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		e, err := parseEntry(raw, harness)
		if err != nil {
			return HostList{}, fmt.Errorf("egress host list entry %q: %w", raw, err)
		}
		if !slices.Contains(l.entries, e) {
			l.entries = append(l.entries, e)
		}
	}
	return l, nil
}

func parseEntry(raw string, harness bool) (hostEntry, error) {
	var e hostEntry
	if strings.ContainsAny(raw, "/?#@ \t") || strings.Contains(raw, "://") {
		return e, fmt.Errorf("not a host name: give the name alone, without a scheme, path or user")
	}
	if strings.HasPrefix(raw, "[") || strings.Count(raw, ":") > 1 {
		return e, fmt.Errorf("IPv6 addresses are not supported")
	}
	host := raw
	if h, p, ok := strings.Cut(raw, ":"); ok {
		if !harness {
			return e, fmt.Errorf("an allowlist entry takes no port: the proxy's ports apply to every host")
		}
		port, err := strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return e, fmt.Errorf("the port %q is not a number from 1 to 65535", p)
		}
		host, e.port = h, port
	}
	if ip := net.ParseIP(host); ip != nil {
		if !harness {
			return e, fmt.Errorf("an IP address: the allowlist names hosts, never addresses")
		}
		if ip.To4() == nil {
			return e, fmt.Errorf("IPv6 addresses are not supported")
		}
		e.host, e.ip = ip.String(), true
		return e, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, e.wildcard = rest, true
	}
	if strings.Contains(host, "*") {
		return e, fmt.Errorf("a wildcard is allowed only as a leading \"*.\"")
	}
	host = strings.TrimSuffix(host, ".")
	norm, err := hostport.NormalizeHost(host, false)
	if err != nil {
		return e, err
	}
	if norm == "" || len(norm) > 253 {
		return e, fmt.Errorf("not a host name")
	}
	labels := strings.Split(norm, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 {
			return e, fmt.Errorf("not a host name: every label must have 1 to 63 characters")
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return e, fmt.Errorf("looks like an address: the last label is a number")
	}
	if e.wildcard && len(labels) < 2 {
		return e, fmt.Errorf("a wildcard over a whole top-level domain is too wide")
	}
	e.host = norm
	return e, nil
}

// Len is the number of entries.
func (l HostList) Len() int { return len(l.entries) }

// String is the list as ParseDestinations reads it back, normalized.
func (l HostList) String() string {
	parts := make([]string, len(l.entries))
	for i, e := range l.entries {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

func (e hostEntry) String() string {
	s := e.host
	if e.wildcard {
		s = "*." + s
	}
	if e.port != 0 {
		s += ":" + strconv.Itoa(e.port)
	}
	return s
}

// match returns the entry that allows host on port, where ports are the
// proxy's ports (those an entry without its own port allows). host must
// already be normalized (normalizeHost).
func (l HostList) match(host string, port int, ports []int) (hostEntry, bool) {
	isIP := net.ParseIP(host) != nil
	for _, e := range l.entries {
		if e.port != 0 && e.port != port || e.port == 0 && !slices.Contains(ports, port) {
			continue
		}
		switch {
		case e.ip:
			if isIP && host == e.host {
				return e, true
			}
		case isIP:
		case e.wildcard:
			if strings.HasSuffix(host, "."+e.host) {
				return e, true
			}
		case host == e.host:
			return e, true
		}
	}
	return hostEntry{}, false
}

// normalizeHost is the form match expects: smokescreen's normalization
// (lower case, Punycode, one spelling per IP address) without a trailing
// dot, so that "Example.COM." is "example.com".
func normalizeHost(h string) string {
	if n, err := hostport.NormalizeHost(h, false); err == nil {
		h = n
	}
	return strings.TrimSuffix(h, ".")
}
