package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	"github.com/stripe/smokescreen/pkg/smokescreen"
	acl "github.com/stripe/smokescreen/pkg/smokescreen/acl/v1"
)

// generalDecider is the general rules' ACL: the allowlist by host name, on
// the proxy's ports, for every role.
type generalDecider struct{ p *Proxy }

func (d generalDecider) Decide(a acl.DecideArgs) (acl.Decision, error) {
	host, port, refusal := checkArgs(a)
	switch {
	case refusal != "":
		return deny(refusal)
	case net.ParseIP(host) != nil:
		return deny(host + " is an IP address: the proxy reaches host names on the allowlist, never an address")
	case !slices.Contains(d.p.o.ports, port):
		return deny(fmt.Sprintf("port %d is not allowed (the proxy's ports: %s)", port, portList(d.p.o.ports)))
	}
	if e, ok := d.p.o.allow.match(host, port, d.p.o.ports); ok {
		return acl.Decision{Result: acl.Allow, Reason: "on the allowlist as " + e.String()}, nil
	}
	return deny(host + " is not on the allowlist")
}

// harnessDecider is the harness rules' ACL: the harness's own
// destinations, for the harness alone.
type harnessDecider struct{ p *Proxy }

func (d harnessDecider) Decide(a acl.DecideArgs) (acl.Decision, error) {
	host, port, refusal := checkArgs(a)
	switch {
	case refusal != "":
		return deny(refusal)
	case Role(a.Service) != RoleHarness:
		return deny("only the harness reaches the harness's destinations")
	}
	if e, ok := d.p.o.harness.match(host, port, d.p.o.ports); ok {
		return acl.Decision{Result: acl.Allow, Reason: "a harness destination as " + e.String()}, nil
	}
	return deny(net.JoinHostPort(host, strconv.Itoa(port)) + " is not a harness destination")
}

// checkArgs reads the destination of a decision as the front did.
func checkArgs(a acl.DecideArgs) (host string, port int, refusal string) {
	if a.ConnectProxyHost != "" {
		return "", 0, "a client may not choose the proxy's upstream"
	}
	if a.Req == nil {
		return "", 0, "no request to decide on"
	}
	_, port = target(a.Req)
	if port == 0 {
		return "", 0, "the destination has no valid port"
	}
	return normalizeHost(a.Host), port, ""
}

func deny(reason string) (acl.Decision, error) {
	return acl.Decision{Result: acl.Deny, Reason: reason}, nil
}

// logBridge receives every line smokescreen logs: a request's decision
// becomes a Decision, the rest goes to the slog logger. Nothing is printed
// by logrus itself.
type logBridge struct{ p *Proxy }

func (logBridge) Levels() []logrus.Level { return logrus.AllLevels }

func (b logBridge) Fire(e *logrus.Entry) error {
	if e.Message == smokescreen.CanonicalProxyDecision {
		b.p.decided(e.Data)
		return nil
	}
	// A client's failures (a name that does not resolve, a destination
	// that refuses) are smokescreen's errors: warnings here. Its routine
	// lines (a tunnel closed) are debug.
	level := slog.LevelDebug
	switch {
	case e.Level <= logrus.FatalLevel:
		level = slog.LevelError
	case e.Level <= logrus.WarnLevel:
		level = slog.LevelWarn
	}
	if !b.p.log.Enabled(context.Background(), level) {
		return nil
	}
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		v := e.Data[k]
		// A tunnel's byte counts are pointers the copies still update
		// atomically.
		switch n := v.(type) {
		case *uint64:
			v = atomic.LoadUint64(n)
		case *int64:
			v = atomic.LoadInt64(n)
		}
		attrs = append(attrs, k, v)
	}
	b.p.log.Log(context.Background(), level, "smokescreen: "+e.Message, attrs...)
	return nil
}

type discardFormatter struct{}

func (discardFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }

// deniedIPPattern finds the address in smokescreen's reason for refusing
// every address a name resolved to ("… - 10.0.0.1 denied by rule …").
var deniedIPPattern = regexp.MustCompile(`(\S+) denied by rule '`)

// decided turns smokescreen's canonical decision line into the request's
// Decision.
func (p *Proxy) decided(data logrus.Fields) {
	id, _ := data[smokescreen.LogFieldTraceID].(string)
	var ex *exchange
	if v, ok := p.inflight.Load(id); ok {
		ex = v.(*exchange)
	} else {
		// Not a request of the front's (cannot happen): report what the
		// line says.
		ex = &exchange{}
		if h, ok := data[smokescreen.LogFieldRequestedHost].(string); ok {
			ex.host = h
		}
		if r, ok := data[smokescreen.LogFieldRole].(string); ok {
			ex.role = Role(r)
		}
	}
	allowed, _ := data[smokescreen.LogFieldAllow].(bool)
	reason, _ := data[smokescreen.LogFieldDecisionReason].(string)
	addr, _ := data[resolvedField].(string)
	if r, ok := data[reasonField].(string); ok && allowed {
		reason = r
	}
	// An allowed request whose name did not resolve was not allowed
	// through.
	if errText, _ := data[smokescreen.LogFieldError].(string); errText != "" {
		allowed, reason, addr = false, errText, ""
	}
	reason = strings.TrimRight(reason, ". ")
	if addr == "" && !allowed && ex.port != 0 {
		if m := deniedIPPattern.FindStringSubmatch(reason); m != nil && net.ParseIP(m[1]) != nil {
			addr = net.JoinHostPort(m[1], strconv.Itoa(ex.port))
		}
	}
	p.report(ex, Decision{Allowed: allowed, Reason: reason, Addr: addr})
}

// portList is ports for a reason text.
func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}
