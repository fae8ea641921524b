package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/jsii-runtime-go"
)

// Provider secret short names: galley/<house>/<name>.
const (
	SecretAnthropic   = "anthropic"
	SecretOpenAI      = "openai"
	SecretGit         = "git-credential"
	SecretBearerToken = "bearer-token"
	SecretWorkerKey   = "worker-signing-key"
	// SecretOperatorToken opens the operator API and console; it opens
	// nothing of kitchn's, and kitchn's token does not open it.
	SecretOperatorToken = "operator-token"
	// SecretEgress is what a harness proves itself to the egress proxy
	// with: generated, read by the worker's and the proxy's execution
	// roles only, for ECS to inject.
	SecretEgress = "egress-proxy"
)

// addSecrets makes kitchn's bearer token (generated) and the named secrets
// the operator fills in. Only names and ARNs ever leave Secrets Manager in
// configuration; values are read at run time by the roles allowed to.
//
// kitchn's token and the signing key are retained when the stack goes
// (retainSecrets, default true): kitchn holds the token in its registry,
// and CloudFormation is reported to delete a secret with no recovery
// window, which AWS's pages leave open (docs/deploy.md, Tearing down);
// retained, a destroy cannot lose them. The three secrets the operator fills in go with the stack: their
// values are copies of what the providers and the git host issued.
func (g *Galley) addSecrets() {
	keep := awscdk.RemovalPolicy_DESTROY
	if g.Config.RetainSecrets {
		keep = awscdk.RemovalPolicy_RETAIN
	}
	g.TokenSecret = awssecretsmanager.NewSecret(g.Stack, jsii.String("BearerToken"), &awssecretsmanager.SecretProps{
		RemovalPolicy:        keep,
		SecretName:           jsii.String(g.Config.SecretPrefix() + SecretBearerToken),
		Description:          jsii.String("kitchn's bearer token for galley house " + g.Config.House + "; rotate with put-secret-value"),
		GenerateSecretString: randomSecret(48),
	})
	// The operator's token, made like kitchn's: the person running galley
	// reads it once (get-secret-value) into a file for the galley
	// commands and the console.
	g.OperatorTokenSecret = awssecretsmanager.NewSecret(g.Stack, jsii.String("OperatorToken"), &awssecretsmanager.SecretProps{
		RemovalPolicy:        keep,
		SecretName:           jsii.String(g.Config.SecretPrefix() + SecretOperatorToken),
		Description:          jsii.String("the operator token of galley house " + g.Config.House + " (operator API and console); rotate with put-secret-value"),
		GenerateSecretString: randomSecret(48),
	})
	g.WorkerSecret = awssecretsmanager.NewSecret(g.Stack, jsii.String("WorkerSigningKey"), &awssecretsmanager.SecretProps{
		RemovalPolicy:        keep,
		SecretName:           jsii.String(g.Config.SecretPrefix() + SecretWorkerKey),
		Description:          jsii.String("key that signs galley worker credentials for house " + g.Config.House),
		GenerateSecretString: randomSecret(64),
	})
	// Nothing outside the stack holds it: it goes with the stack, and a
	// new one is made with the next.
	g.EgressSecret = awssecretsmanager.NewSecret(g.Stack, jsii.String("EgressSecret"), &awssecretsmanager.SecretProps{
		SecretName:           jsii.String(g.Config.SecretPrefix() + SecretEgress),
		Description:          jsii.String("the secret galley house " + g.Config.House + "'s harnesses prove themselves to its egress proxy with"),
		GenerateSecretString: randomSecret(48),
	})
	for _, p := range []struct{ id, name, desc string }{
		{"AnthropicKey", SecretAnthropic, "Anthropic API key for Claude Code workers"},
		{"OpenAIKey", SecretOpenAI, "OpenAI API key for Codex workers"},
		{"GitCredential", SecretGit, "git credential (token) for the house repository"},
	} {
		// The generated value is a placeholder: the operator replaces it
		// with put-secret-value (docs/deploy.md).
		g.ProviderSecrets[p.name] = awssecretsmanager.NewSecret(g.Stack, jsii.String(p.id), &awssecretsmanager.SecretProps{
			SecretName:  jsii.String(g.Config.SecretPrefix() + p.name),
			Description: jsii.String(p.desc + " (galley house " + g.Config.House + "); fill in with put-secret-value"),
		})
	}
}

// randomSecret is how every secret the stack makes is generated: length
// letters and digits, no punctuation or space (they travel in headers and
// environment variables).
func randomSecret(length float64) *awssecretsmanager.SecretStringGenerator {
	return &awssecretsmanager.SecretStringGenerator{
		PasswordLength:     jsii.Number(length),
		ExcludePunctuation: jsii.Bool(true),
		IncludeSpace:       jsii.Bool(false),
	}
}
