package awslocal

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/harness"
)

// The stack's egress proxy (an ECS service on AWS, whose task runs
// `galley-worker egress-proxy`) runs in this process, from its task
// definition's environment and secret, where worker containers reach it:
// on the container network's host side, the one port of the stack a
// worker container reaches besides its task endpoint. Everything a
// harness calls (the API, the git server, the SQS gate, the worker
// services) is reached through it, as on AWS, where a worker task's
// subnets have no other way out.
type egressService struct {
	ln    net.Listener
	proxy *egress.Proxy
}

// egressTaskDefinition is the logical id of the task definition whose
// container runs the egress proxy, or "".
func (d *deployment) egressTaskDefinition() string {
	for _, id := range d.t.OfType("AWS::ECS::TaskDefinition") {
		for _, c := range asList(d.props[id]["ContainerDefinitions"]) {
			if cmd := asList(asMap(c)["Command"]); len(cmd) > 0 && fmt.Sprint(cmd[0]) == egress.ServiceCommand {
				return id
			}
		}
	}
	return ""
}

// workerEgressUpstream is the egress service's URL as the template gives
// it to the worker task (harness.EnvEgressUpstream), read before the
// deployment, or "".
func workerEgressUpstream(d *deployment) string {
	for _, id := range d.t.OfType("AWS::ECS::TaskDefinition") {
		props, err := d.r.Properties(id)
		if err != nil {
			// A task definition that names resources not deployed yet: the
			// value sought is a literal, found in the raw template below.
			props = d.t.Resources[id].Properties
		}
		for _, c := range asList(props["ContainerDefinitions"]) {
			for _, e := range asList(asMap(c)["Environment"]) {
				if str(asMap(e), "Name") == harness.EnvEgressUpstream {
					return str(asMap(e), "Value")
				}
			}
		}
	}
	return ""
}

// startEgress serves the egress proxy of the deployed template on ln:
// its environment as the task definition sets it, its secret read from
// the Secrets Manager stand-in, and its harness destinations (the API,
// the git host, the providers, SQS) rewritten to where this machine
// serves them, as DNS points the names there on AWS.
func (s *Stack) startEgress(ctx context.Context, ln net.Listener, hosts map[string]string) (*egressService, error) {
	id := s.deploy.egressTaskDefinition()
	if id == "" {
		return nil, fmt.Errorf("the template's worker task names an egress service (%s) but no task definition runs %q", harness.EnvEgressUpstream, egress.ServiceCommand)
	}
	env := map[string]string{}
	for _, c := range asList(s.deploy.props[id]["ContainerDefinitions"]) {
		cd := asMap(c)
		for _, e := range asList(cd["Environment"]) {
			env[str(asMap(e), "Name")] = str(asMap(e), "Value")
		}
		for _, sec := range asList(cd["Secrets"]) {
			out, err := s.admin.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(str(asMap(sec), "ValueFrom"))})
			if err != nil {
				return nil, fmt.Errorf("the egress proxy's secret %s: %w", str(asMap(sec), "Name"), err)
			}
			env[str(asMap(sec), "Name")] = aws.ToString(out.SecretString)
		}
	}
	env[egress.EnvHarnessAllow] = rewriteHosts(env[egress.EnvHarnessAllow], hosts)
	if r := s.cfg.Options.EgressResolver; r != "" {
		env[egress.EnvResolver] = r
	}
	cfg, err := egress.ServiceConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		return nil, fmt.Errorf("the egress proxy's task definition: %w", err)
	}
	log := s.cfg.Options.Logger.With("component", "egress service")
	p, err := egress.New(append(cfg.Options(), egress.WithLogger(log))...)
	if err != nil {
		return nil, err
	}
	go func() { _ = p.Serve(ln) }()
	log.Info("aws-local: the stack's egress proxy serves worker tasks", "address", ln.Addr().String(),
		"harnessDestinations", env[egress.EnvHarnessAllow])
	return &egressService{ln: ln, proxy: p}, nil
}

func (e *egressService) close() {
	if e != nil {
		_ = e.proxy.Close()
	}
}

// rewriteHosts replaces each entry of a comma-separated host list that
// names a host of hosts (host, or host:port) by where this machine serves
// it.
func rewriteHosts(list string, hosts map[string]string) string {
	var out []string
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		name := h
		if n, _, err := net.SplitHostPort(h); err == nil {
			name = n
		}
		if to, ok := hosts[strings.ToLower(name)]; ok {
			h = to
		}
		out = append(out, h)
	}
	return strings.Join(out, ",")
}

// hostOf is the host:port of a URL (the scheme's port when none is
// named), or "".
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	port := "443"
	if u.Scheme == "http" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
