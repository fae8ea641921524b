package egress

import (
	"strings"
	"testing"
)

func TestParseAllowlistRefusesWhatIsNotAHostName(t *testing.T) {
	for entry, want := range map[string]string{
		"https://example.com": "not a host name",
		"example.com/path":    "not a host name",
		"user@example.com":    "not a host name",
		"example.com:443":     "takes no port",
		"10.0.0.1":            "an IP address",
		"::1":                 "IPv6",
		"[::1]:443":           "IPv6",
		"a.*.example.com":     "only as a leading",
		"*":                   "only as a leading",
		"*.com":               "whole top-level domain",
		"exa mple.com":        "not a host name",
		"exam!ple.com":        "disallowed rune",
		"a..example.com":      "1 to 63 characters",
		"127.1":               "last label is a number",
	} {
		_, err := ParseAllowlist("good.example.com, " + entry)
		if err == nil {
			t.Errorf("%q: accepted", entry)
			continue
		}
		if !strings.Contains(err.Error(), entry) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q does not name the entry and say %q", entry, err, want)
		}
	}
}

func TestParseDestinationsTakesPortsAndAddresses(t *testing.T) {
	l, err := ParseDestinations(" api.example.com:8443 ,*.git.example.com, 10.0.0.5:4566,,sqs.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.String(), "api.example.com:8443,*.git.example.com,10.0.0.5:4566,sqs.example.com"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, bad := range []string{"api.example.com:0", "api.example.com:x", "api.example.com:70000", "[fd00::1]:443", "https://api.example.com"} {
		if _, err := ParseDestinations(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: error %v does not refuse it by name", bad, err)
		}
	}
}

func TestHostListMatch(t *testing.T) {
	ports := []int{443, 80}
	agent, err := ParseAllowlist("Example.COM., *.wild.example.org")
	if err != nil {
		t.Fatal(err)
	}
	harness, err := ParseDestinations("api.example.net:8443, 10.0.0.5:4566, git.example.net")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		list HostList
		host string
		port int
		want bool
	}{
		{agent, "example.com", 443, true},
		{agent, normalizeHost("EXAMPLE.com."), 80, true},
		{agent, "example.com", 22, false},
		{agent, "www.example.com", 443, false},
		{agent, "notexample.com", 443, false},
		{agent, "a.wild.example.org", 443, true},
		{agent, "a.b.wild.example.org", 443, true},
		{agent, "wild.example.org", 443, false},
		{agent, "xwild.example.org", 443, false},
		{harness, "api.example.net", 8443, true},
		{harness, "api.example.net", 443, false},
		{harness, "git.example.net", 443, true},
		{harness, "10.0.0.5", 4566, true},
		{harness, "10.0.0.5", 443, false},
		{harness, "10.0.0.6", 4566, false},
	} {
		if _, got := c.list.match(c.host, c.port, ports); got != c.want {
			t.Errorf("%s match(%s, %d) = %v, want %v", c.list, c.host, c.port, got, c.want)
		}
	}
}
