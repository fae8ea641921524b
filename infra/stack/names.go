package stack

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/galley-run/galley/pkg/contract"
)

// The names, hosts and URLs derived from a Config.

// Prefix names the deployment's own resources: "galley-<house>"
// (contract.ResourcePrefix).
func (c Config) Prefix() string { return contract.ResourcePrefix(c.House) }

// QueuePrefix is the name prefix of every doorbell queue the functions make
// ("<prefix>-<hash of the topic>", pkg/doorbell/sqsbell).
func (c Config) QueuePrefix() string { return contract.QueueNamePrefix(c.Prefix()) }

// SecretPrefix is the name prefix of the deployment's secrets.
func (c Config) SecretPrefix() string { return "galley/" + c.House + "/" }

// StackName is the CloudFormation stack name (no underscores allowed there).
func (c Config) StackName() string {
	return strings.ReplaceAll(c.Prefix(), "_", "-")
}

// EgressService is the proxy's name in the Cloud Map namespace.
const EgressService = "egress"

// EgressNamespace is the private DNS namespace (a Route 53 private hosted
// zone of the VPC) the egress proxy registers in: "galley-<house>.internal",
// the house lower-cased with "_" as "-" (a host name's letters), under the
// .internal top-level domain ICANN keeps for private use.
func (c Config) EgressNamespace() string {
	label := strings.TrimRight(strings.ToLower(strings.ReplaceAll(c.Prefix(), "_", "-")), "-")
	return label + ".internal"
}

// EgressHost is the egress proxy's DNS name, which the worker tasks
// resolve through the VPC resolver.
func (c Config) EgressHost() string { return EgressService + "." + c.EgressNamespace() }

// EgressUpstream is the worker's GALLEY_EGRESS_UPSTREAM: the proxy's URL.
func (c Config) EgressUpstream() string {
	return "http://" + c.EgressHost() + ":" + strconv.Itoa(contract.EgressPort)
}

// ProviderHosts are the hosts the harness's model proxy calls for the
// allowed agent families: each family's base URL's host when set, else
// the provider's public API.
func (c Config) ProviderHosts() []string {
	var out []string
	for _, f := range c.AgentFamilies {
		base, public := c.AnthropicBaseURL, "api.anthropic.com"
		if f == "codex" {
			base, public = c.OpenAIBaseURL, "api.openai.com"
		}
		host := public
		if u, err := url.Parse(base); base != "" && err == nil {
			host = u.Hostname()
		}
		if !slices.Contains(out, host) {
			out = append(out, host)
		}
	}
	return out
}

// GitHost is the house repository's host.
func (c Config) GitHost() string {
	u, err := url.Parse(c.Repository)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
