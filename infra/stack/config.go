// Package stack defines galley's AWS deployment as a CDK stack: the HTTP
// API and its Go functions, the DynamoDB table, the worker cluster and task
// definition, the workers' network (isolated subnets, the egress proxy
// service, VPC endpoints, a DNS Firewall), secrets, alarms and a
// dashboard, with cdk-nag's AwsSolutions checks applied. The infra module's main package only reads the CDK
// context into a Config and synthesizes NewApp's result.
package stack

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
)

// Config is the deployment's configuration, read from CDK context
// (cdk.json or `cdk synth -c key=value`). Context keys are the json names.
type Config struct {
	House         string   `json:"house"`         // kitchn house served
	Backend       string   `json:"backend"`       // backend namespace
	Credential    string   `json:"credential"`    // credential name in kitchn's binding
	Repository    string   `json:"repository"`    // house repository URL (https)
	AgentFamilies []string `json:"agentFamilies"` // allowed agent families
	WorkerCPU     int      `json:"workerCpu"`     // Fargate CPU units per worker
	WorkerMemory  int      `json:"workerMemory"`  // Fargate memory (MiB) per worker
	// WorkerEphemeralStorageGiB is a worker task's own disk (Fargate's
	// ephemeral storage, 21 to 200 GiB), which holds the image, the
	// worktree and the agent's home and temporary files.
	WorkerEphemeralStorageGiB int `json:"workerEphemeralStorageGiB"`
	MaxWorkers                int `json:"maxWorkers"` // concurrent workers; beyond: rate-limited
	// ParkAfter is how long a worker's agent waits on its coordinator
	// before its harness parks it (GALLEY_PARK_AFTER on the worker task
	// definitions; docs/parking.md): its task ends, and a reply or a
	// message starts a new one. Context: a Go duration ("10m", "90s") of
	// at least 1 s, or "0" for never.
	ParkAfter  time.Duration `json:"parkAfter"`
	AwaitCapMs int           `json:"awaitCapMs"` // deliveries/await hold cap
	// QueueIdleHours: the reconciler's sweep (at most hourly) deletes
	// doorbell queues unused for longer.
	QueueIdleHours int `json:"queueIdleHours"`
	// EffectsReservedConcurrency is the effects function's reserved
	// concurrency: a floor no other function's invocations (awaits held
	// by waiting coordinators) can take, and a ceiling. 0 reserves none
	// (for an account whose concurrency quota is below 100 + this).
	EffectsReservedConcurrency int `json:"effectsReservedConcurrency"`
	// DomainName and CertificateArn together give the API a custom domain
	// (the certificate must be in the stack's region).
	DomainName     string `json:"domainName"`
	CertificateArn string `json:"certificateArn"`
	// AlarmTopicArn, when set, receives every alarm's state changes.
	AlarmTopicArn    string `json:"alarmTopicArn"`
	LogRetentionDays int    `json:"logRetentionDays"`
	// ThrottleRate and ThrottleBurst are each route's throttle (the
	// stage's default route settings): kitchn's /v1/ routes have these.
	ThrottleRate  int `json:"throttleRate"`  // steady requests per second, per route
	ThrottleBurst int `json:"throttleBurst"` // burst, per route
	// WorkerThrottleRate and WorkerThrottleBurst throttle the workers'
	// greedy route (POST /worker/v1/{proxy+}) apart from kitchn's.
	WorkerThrottleRate  int `json:"workerThrottleRate"`
	WorkerThrottleBurst int `json:"workerThrottleBurst"`
	// CredentialThrottleRate and CredentialThrottleBurst throttle the one
	// unauthenticated route, POST /worker/v1/credential (a worker's
	// bootstrap-code exchange, once per task start).
	CredentialThrottleRate  int `json:"credentialThrottleRate"`
	CredentialThrottleBurst int `json:"credentialThrottleBurst"`
	// AssetDir holds one folder per function with its `bootstrap`.
	AssetDir string `json:"assetDir"`
	// GitUsername is the user name sent with the git credential (the
	// token): x-access-token suits GitHub App and fine-grained tokens;
	// other hosts want the account's name or "oauth2".
	GitUsername string `json:"gitUsername"`
	// LambdaArchitecture is the functions' instruction set: arm64, or
	// x86_64 for hosts that emulate Lambda on x86 (LocalStack, aws-local).
	// The worker task stays ARM64.
	LambdaArchitecture string `json:"lambdaArchitecture"`
	// ScriptAgent makes the scripted agent the default for launches that
	// name none (GALLEY_DEFAULT_AGENT=script on effects), so that
	// `galley conformance` with effects can run against the deployment.
	// Not for production.
	ScriptAgent bool `json:"scriptAgent"`
	// RetainSecrets keeps kitchn's bearer token and the worker signing key
	// when the stack is deleted (DeletionPolicy and UpdateReplacePolicy
	// Retain), so a destroy cannot lose them. false deletes them with the
	// stack.
	RetainSecrets bool `json:"retainSecrets"`
	// AnthropicBaseURL and OpenAIBaseURL, when set, are where the claude
	// and codex workers send their model calls instead of the providers'
	// public APIs (an LLM gateway or proxy): https URLs, in the worker
	// task's environment (not secrets).
	AnthropicBaseURL string `json:"anthropicBaseUrl"`
	OpenAIBaseURL    string `json:"openaiBaseUrl"`
	// EgressAllowlist is the house's list of hosts an agent may reach
	// through the egress proxy: host names, or "*.domain" for every name
	// below a domain (not the domain itself). Empty: agents reach no host.
	EgressAllowlist []string `json:"egressAllowlist"`
	// ModelCapTokens and ModelCapUSD cap what one worker may spend on
	// model calls (the harness's model proxy counts from the providers'
	// answers and refuses at the cap): tokens, and decimal dollars as
	// written ("25", "12.50"). 0 and "" set no cap.
	ModelCapTokens int64  `json:"modelCapTokens"`
	ModelCapUSD    string `json:"modelCapUsd"`
	// DNSFirewall associates a Route 53 Resolver DNS Firewall rule group
	// with the VPC: the names the deployment needs and the allowlist
	// resolve, every other name is answered NXDOMAIN, so no process in
	// the VPC can carry data out in DNS queries through the VPC resolver.
	DNSFirewall bool `json:"dnsFirewall"`
	// AvailabilityZones is how many AZs the VPC spans (1 or 2): each
	// interface endpoint is billed per AZ, so one AZ halves their cost, at
	// the price of workers that cannot start while that AZ is impaired.
	AvailabilityZones int `json:"availabilityZones"`
	// WorkerContext is the worker image's build context (the repository
	// root) and WorkerDockerfile the Dockerfile inside it.
	WorkerContext    string `json:"-"`
	WorkerDockerfile string `json:"-"`
}

// Defaults for every context key.
func Defaults() Config {
	return Config{
		House:                      "main",
		Backend:                    contract.DefaultBackend,
		Credential:                 contract.DefaultCredential,
		AgentFamilies:              []string{"claude", "codex"},
		WorkerCPU:                  1024,
		WorkerMemory:               4096,
		WorkerEphemeralStorageGiB:  DefaultWorkerEphemeralStorageGiB,
		ParkAfter:                  DefaultParkAfter,
		MaxWorkers:                 10,
		AwaitCapMs:                 int(contract.AwaitCap / time.Millisecond),
		QueueIdleHours:             24,
		EffectsReservedConcurrency: 10,
		LogRetentionDays:           30,
		ThrottleRate:               50,
		ThrottleBurst:              100,
		AssetDir:                   "bin/lambda",
		GitUsername:                contract.DefaultGitUsername,
		LambdaArchitecture:         ArchARM64,
		WorkerDockerfile:           "worker/Dockerfile",
		RetainSecrets:              true,
		DNSFirewall:                true,
		AvailabilityZones:          2,

		// Workers: a long poll at a time each, and their posts.
		WorkerThrottleRate:  50,
		WorkerThrottleBurst: 100,
		// One exchange per task start: a burst of ten starts at once, then
		// five a second.
		CredentialThrottleRate:  5,
		CredentialThrottleBurst: 10,
	}
}

// Context reads one context value; nil when unset. *cdk.Node's
// TryGetContext fits.
type Context func(key string) any

// FromContext overlays the context values on Defaults and validates.
func FromContext(get Context) (Config, error) {
	c := Defaults()
	var errs []string
	str := func(key string, dst *string) {
		if v := get(key); v != nil {
			*dst = strings.TrimSpace(fmt.Sprint(v))
		}
	}
	num := func(key string, dst *int) {
		v := get(key)
		if v == nil {
			return
		}
		switch n := v.(type) {
		case float64:
			*dst = int(n)
		case int:
			*dst = n
		default:
			i, err := strconv.Atoi(strings.TrimSpace(fmt.Sprint(v)))
			if err != nil {
				errs = append(errs, fmt.Sprintf("context %s: %q is not an integer", key, fmt.Sprint(v)))
				return
			}
			*dst = i
		}
	}
	str("house", &c.House)
	str("backend", &c.Backend)
	str("credential", &c.Credential)
	str("repository", &c.Repository)
	str("domainName", &c.DomainName)
	str("certificateArn", &c.CertificateArn)
	str("alarmTopicArn", &c.AlarmTopicArn)
	str("assetDir", &c.AssetDir)
	str("gitUsername", &c.GitUsername)
	str("lambdaArchitecture", &c.LambdaArchitecture)
	str("anthropicBaseUrl", &c.AnthropicBaseURL)
	str("openaiBaseUrl", &c.OpenAIBaseURL)
	if v := get("scriptAgent"); v != nil {
		b, err := strconv.ParseBool(strings.TrimSpace(fmt.Sprint(v)))
		if err != nil {
			errs = append(errs, fmt.Sprintf("context scriptAgent: %q is not true or false", fmt.Sprint(v)))
		}
		c.ScriptAgent = b
	}
	if v := get("retainSecrets"); v != nil {
		b, err := strconv.ParseBool(strings.TrimSpace(fmt.Sprint(v)))
		if err != nil {
			errs = append(errs, fmt.Sprintf("context retainSecrets: %q is not true or false", fmt.Sprint(v)))
		}
		c.RetainSecrets = b
	}
	if v := get("dnsFirewall"); v != nil {
		b, err := strconv.ParseBool(strings.TrimSpace(fmt.Sprint(v)))
		if err != nil {
			errs = append(errs, fmt.Sprintf("context dnsFirewall: %q is not true or false", fmt.Sprint(v)))
		}
		c.DNSFirewall = b
	}
	num("availabilityZones", &c.AvailabilityZones)
	if v := get("parkAfter"); v != nil {
		d, err := parkAfter(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("context parkAfter: %q %v", fmt.Sprint(v), err))
		}
		c.ParkAfter = d
	}
	if v := get("egressAllowlist"); v != nil {
		c.EgressAllowlist = listOf(v)
	}
	if v := get("modelCapTokens"); v != nil {
		n, err := wholeNumber(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Sprintf("context modelCapTokens: %q is not a whole number of tokens from 1 to %d", fmt.Sprint(v), maxModelCapTokens))
		} else {
			c.ModelCapTokens = n
		}
	}
	if v := get("modelCapUsd"); v != nil {
		switch d := v.(type) {
		case float64:
			c.ModelCapUSD = strconv.FormatFloat(d, 'f', -1, 64)
		default:
			c.ModelCapUSD = strings.TrimSpace(fmt.Sprint(v))
		}
		if c.ModelCapUSD == "" {
			errs = append(errs, "context modelCapUsd: empty; leave the key out for no dollar cap")
		}
	}
	num("workerCpu", &c.WorkerCPU)
	num("workerMemory", &c.WorkerMemory)
	num("workerEphemeralStorageGiB", &c.WorkerEphemeralStorageGiB)
	num("maxWorkers", &c.MaxWorkers)
	num("awaitCapMs", &c.AwaitCapMs)
	num("queueIdleHours", &c.QueueIdleHours)
	num("effectsReservedConcurrency", &c.EffectsReservedConcurrency)
	num("logRetentionDays", &c.LogRetentionDays)
	num("throttleRate", &c.ThrottleRate)
	num("throttleBurst", &c.ThrottleBurst)
	num("workerThrottleRate", &c.WorkerThrottleRate)
	num("workerThrottleBurst", &c.WorkerThrottleBurst)
	num("credentialThrottleRate", &c.CredentialThrottleRate)
	num("credentialThrottleBurst", &c.CredentialThrottleBurst)
	if v := get("agentFamilies"); v != nil {
		c.AgentFamilies = listOf(v)
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("galley config: %s", strings.Join(errs, "; "))
	}
	return c, c.Validate()
}

// DefaultParkAfter is a worker's park after unless context parkAfter says
// otherwise: a waiting task costs its full price, and a resume costs about
// one task start (a minute's billing and the pull), so a worker parks
// once its coordinator has taken about ten times that (docs/parking.md).
const DefaultParkAfter = 10 * time.Minute

// minParkAfter is the shortest park after the harness takes
// (harness.MinParkAfter; the infra module does not link the harness).
const minParkAfter = time.Second

// parkAfter reads context parkAfter: "0" (or the number 0) turns parking
// off; anything else is a Go duration of at least minParkAfter.
func parkAfter(v any) (time.Duration, error) {
	s := strings.TrimSpace(fmt.Sprint(v))
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < minParkAfter {
		return 0, fmt.Errorf("is not a Go duration of at least %s (\"10m\", \"90s\"), nor 0 for never", minParkAfter)
	}
	return d, nil
}

// listOf reads a list context value: a JSON list (cdk.json) or a
// comma-separated string (-c key=a,b), blanks dropped.
func listOf(v any) []string {
	var parts, out []string
	switch l := v.(type) {
	case []any:
		for _, p := range l {
			parts = append(parts, fmt.Sprint(p))
		}
	default:
		parts = strings.Split(fmt.Sprint(v), ",")
	}
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// wholeNumber reads an integer context value: a JSON number that is whole,
// or a string of digits.
func wholeNumber(v any) (int64, error) {
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || n > math.MaxInt64 || n < math.MinInt64 {
			return 0, fmt.Errorf("not a whole number")
		}
		return int64(n), nil
	case int:
		return int64(n), nil
	case int64:
		return n, nil
	}
	return strconv.ParseInt(strings.TrimSpace(fmt.Sprint(v)), 10, 64)
}

// Lambda architectures (context lambdaArchitecture).
const (
	ArchARM64 = "arm64"
	ArchX8664 = "x86_64"
)
