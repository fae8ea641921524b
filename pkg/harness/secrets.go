package harness

import (
	"fmt"

	"github.com/galley-run/galley/pkg/contract"
)

// providerKey is the harness's key for p.
func (h *harness) providerKey(p Provider) string {
	switch p {
	case ProviderAnthropic:
		return h.cfg.AnthropicKey
	case ProviderOpenAI:
		return h.cfg.OpenAIKey
	}
	return ""
}

// providerBaseURL is the configured base URL for p; empty for the
// provider's public API.
func (h *harness) providerBaseURL(p Provider) string {
	switch p {
	case ProviderAnthropic:
		return h.cfg.AnthropicBaseURL
	case ProviderOpenAI:
		return h.cfg.OpenAIBaseURL
	}
	return ""
}

// missingKey says which secret a family's worker lacks (never a value).
func missingKey(family string, p Provider) string {
	where := map[Provider]string{
		ProviderAnthropic: contract.EnvAnthropicAPIKey + " (the deployment's Anthropic key secret; locally " + EnvAnthropicCLIKey + ")",
		ProviderOpenAI:    contract.EnvOpenAIAPIKey + " (the deployment's OpenAI key secret; locally " + EnvCodexCLIKey + " or " + EnvOpenAICLIKey + ")",
	}[p]
	return fmt.Sprintf("the %s agent needs the %s API key, and this worker has none: set %s", family, p, where)
}

// namedSecret is a value the harness holds, and what it is.
type namedSecret struct{ what, value string }

// namedSecrets are the values the harness holds that neither the agent
// nor any report or log line may carry: the one list that the agent's
// command is checked against (prepareCommand) and that every report is
// redacted of (secrets). Unset ones are empty.
func (h *harness) namedSecrets() []namedSecret {
	return []namedSecret{{"the worker token", h.cfg.Token}, {"the bootstrap code", h.cfg.Bootstrap},
		{"the git credential", h.cfg.GitCredential}, {"the anthropic key", h.cfg.AnthropicKey},
		{"the openai key", h.cfg.OpenAIKey}, {"the egress service's credential", h.cfg.EgressSecret}}
}

// secrets are the values of namedSecrets.
func (h *harness) secrets() []string {
	var out []string
	for _, s := range h.namedSecrets() {
		out = append(out, s.value)
	}
	return out
}
