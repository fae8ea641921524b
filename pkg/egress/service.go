package egress

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
)

// ServiceCommand is galley-worker's subcommand that runs RunService.
const ServiceCommand = contract.EgressProxyCommand

// The names of the service's environment (RunService reads them by the
// contract's names: contract.EnvEgressListen, EnvEgressAllow,
// EnvEgressHarnessAllow, EnvEgressSecret, EnvEgressResolver,
// EnvEgressPorts) that aws-local takes from this package.
const (
	EnvAllow        = contract.EnvEgressAllow
	EnvHarnessAllow = contract.EnvEgressHarnessAllow
	EnvResolver     = contract.EnvEgressResolver
)

// DefaultListen is the service's address unless contract.EnvEgressListen
// says otherwise: every address, at contract.EgressPort.
var DefaultListen = ":" + strconv.Itoa(contract.EgressPort)

// ServiceLimits are the service's budgets: it serves every worker task of
// a deployment, each from its own address.
var ServiceLimits = Limits{
	Conns:   connlimit.Limits{PerPeer: 512, Total: 4096}, // Total: at most a quarter of the open-file limit
	Tunnels: 4096,
}

// ServiceConfig is the service's configuration, read by
// ServiceConfigFromEnv.
type ServiceConfig struct {
	Listen   string
	Allow    HostList
	Harness  HostList
	Secret   string
	Resolver string
	Ports    []int
}

// ServiceConfigFromEnv reads the service's configuration. A bad or
// missing setting is an error of kind galleyerr.Invalid naming the
// variable (never the secret's value).
func ServiceConfigFromEnv(getenv func(string) string) (ServiceConfig, error) {
	c := ServiceConfig{
		Listen:   strings.TrimSpace(getenv(contract.EnvEgressListen)),
		Secret:   getenv(contract.EnvEgressSecret),
		Resolver: strings.TrimSpace(getenv(contract.EnvEgressResolver)),
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return c, galleyerr.Errorf(galleyerr.Invalid, "%s=%q is not host:port", contract.EnvEgressListen, c.Listen)
	}
	var err error
	if c.Allow, err = ParseAllowlist(getenv(contract.EnvEgressAllow)); err != nil {
		return c, galleyerr.E(galleyerr.Invalid, contract.EnvEgressAllow, err)
	}
	if c.Harness, err = ParseDestinations(getenv(contract.EnvEgressHarnessAllow)); err != nil {
		return c, galleyerr.E(galleyerr.Invalid, contract.EnvEgressHarnessAllow, err)
	}
	if len(c.Secret) < MinSecretLen {
		return c, galleyerr.Errorf(galleyerr.Invalid, "%s must be set to the harness's credential, at least %d characters", contract.EnvEgressSecret, MinSecretLen)
	}
	if ports := strings.TrimSpace(getenv(contract.EnvEgressPorts)); ports != "" {
		for _, s := range strings.Split(ports, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 || n > 65535 {
				return c, galleyerr.Errorf(galleyerr.Invalid, "%s: %q is not a port from 1 to 65535", contract.EnvEgressPorts, s)
			}
			c.Ports = append(c.Ports, n)
		}
	}
	return c, nil
}

// Options are the service's options for New: the harness role only, with
// ServiceLimits.
func (c ServiceConfig) Options() []Option {
	opts := []Option{
		WithAllowlist(c.Allow),
		WithHarness(c.Secret, c.Harness),
		RequireHarness(),
		WithResolver(c.Resolver),
		WithLimits(ServiceLimits),
	}
	if c.Ports != nil {
		opts = append(opts, WithPorts(c.Ports...))
	}
	return opts
}

// RunService runs the egress proxy service (galley-worker egress-proxy)
// configured from getenv, logging each decision to log, until ctx ends. A
// configuration error is of kind galleyerr.Invalid.
func RunService(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	c, err := ServiceConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	p, err := New(append(c.Options(), WithLogger(log))...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return galleyerr.E(galleyerr.Unavailable, "listen on "+c.Listen, err)
	}
	resolver := c.Resolver
	if resolver == "" {
		resolver = "system"
	}
	log.Info("egress proxy serving", "addr", ln.Addr().String(), "allow", c.Allow.String(),
		"harnessAllow", c.Harness.String(), "ports", portList(p.o.ports), "resolver", resolver)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.Shutdown(sctx)
	if serr := <-served; serr != nil {
		err = errors.Join(err, serr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		p.Close()
		err = nil
	}
	log.Info("egress proxy stopped")
	return err
}
