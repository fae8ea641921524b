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
	"net"
	"net/url"
	"regexp"
	"slices"
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
	MaxWorkers    int      `json:"maxWorkers"`    // concurrent workers; beyond: rate-limited
	AwaitCapMs    int      `json:"awaitCapMs"`    // deliveries/await hold cap
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

var identifier = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Lambda architectures (context lambdaArchitecture).
const (
	ArchARM64 = "arm64"
	ArchX8664 = "x86_64"
)

// validGitUsername: 1 to 256 printable ASCII characters without ':', which
// would end the user part of a credential.
func validGitUsername(u string) bool {
	if len(u) < 1 || len(u) > 256 {
		return false
	}
	for i := 0; i < len(u); i++ {
		if u[i] < 0x20 || u[i] > 0x7e || u[i] == ':' {
			return false
		}
	}
	return true
}

// Agent families a deployment may allow (the functions accept these two;
// the scripted agent is for tests and the local stacks).
var agentFamilies = map[string]bool{"claude": true, "codex": true}

// fargateMemory lists the memory sizes (MiB) Fargate allows per CPU size.
func fargateMemory(cpu int) (min, max, step int, ok bool) {
	switch cpu {
	case 256:
		return 512, 2048, 512, true // 512, 1024, 2048 (checked below)
	case 512:
		return 1024, 4096, 1024, true
	case 1024:
		return 2048, 8192, 1024, true
	case 2048:
		return 4096, 16384, 1024, true
	case 4096:
		return 8192, 30720, 1024, true
	case 8192:
		return 16384, 61440, 4096, true
	case 16384:
		return 32768, 122880, 8192, true
	}
	return 0, 0, 0, false
}

// retentionDays are the values CloudWatch Logs accepts.
var retentionDays = []int{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

// Validate checks every field, naming each problem.
func (c Config) Validate() error {
	var errs []string
	for _, f := range []struct{ key, v string }{{"house", c.House}, {"backend", c.Backend}, {"credential", c.Credential}} {
		if !identifier.MatchString(f.v) {
			errs = append(errs, fmt.Sprintf("%s %q: want 1 to 64 ASCII letters, digits, - or _", f.key, f.v))
		}
	}
	// Queue names are "galley-<house>-<topic>" within SQS's 80 characters;
	// keep the house short enough to leave room for a topic.
	if len(c.House) > 32 {
		errs = append(errs, fmt.Sprintf("house %q: at most 32 characters on AWS (queue and secret names carry it)", c.House))
	}
	// The functions refuse to start without a repository: a stack
	// without one would deploy and then fail every call.
	if c.Repository == "" {
		errs = append(errs, "repository: required, the house repository's https:// URL (-c repository=https://...; make REPOSITORY=...)")
	} else if !strings.HasPrefix(c.Repository, "https://") {
		errs = append(errs, fmt.Sprintf("repository %q: want an https:// URL (the git credential is a token)", c.Repository))
	}
	if len(c.AgentFamilies) == 0 {
		errs = append(errs, "agentFamilies: want at least one of claude, codex")
	}
	for _, f := range c.AgentFamilies {
		if !agentFamilies[f] {
			errs = append(errs, fmt.Sprintf("agentFamilies: unknown family %q (want claude or codex)", f))
		}
	}
	if min, max, step, ok := fargateMemory(c.WorkerCPU); !ok {
		errs = append(errs, fmt.Sprintf("workerCpu %d: want 256, 512, 1024, 2048, 4096, 8192 or 16384", c.WorkerCPU))
	} else if c.WorkerMemory < min || c.WorkerMemory > max || (c.WorkerCPU != 256 && c.WorkerMemory%step != 0) ||
		(c.WorkerCPU == 256 && c.WorkerMemory != 512 && c.WorkerMemory != 1024 && c.WorkerMemory != 2048) {
		errs = append(errs, fmt.Sprintf("workerMemory %d: not a Fargate size for workerCpu %d (%d to %d MiB)", c.WorkerMemory, c.WorkerCPU, min, max))
	}
	if c.MaxWorkers < 1 || c.MaxWorkers > 1000 {
		errs = append(errs, fmt.Sprintf("maxWorkers %d: want 1 to 1000", c.MaxWorkers))
	}
	// The HTTP API ends every request at 30 s, and the mailbox function
	// times out at 29 s: the cap leaves room to answer after the hold.
	if c.AwaitCapMs < 1000 || c.AwaitCapMs > 27000 {
		errs = append(errs, fmt.Sprintf("awaitCapMs %d: want 1000 to 27000 (API Gateway HTTP APIs end requests at 30 s)", c.AwaitCapMs))
	}
	// A listener refreshes its queue's last-listen tag hourly: under twice
	// that, a sweep could take a queue in use (pkg/doorbell/sqsbell).
	if c.QueueIdleHours < 2 || c.QueueIdleHours > 24*366 {
		errs = append(errs, fmt.Sprintf("queueIdleHours %d: want 2 to 8784 (at least twice the doorbell's hourly touch)", c.QueueIdleHours))
	}
	// Lambda keeps 100 of an account's concurrency unreserved: a
	// reservation beyond what a default quota of 1,000 leaves is a
	// mistake, not a floor.
	if c.EffectsReservedConcurrency < 0 || c.EffectsReservedConcurrency > 900 {
		errs = append(errs, fmt.Sprintf("effectsReservedConcurrency %d: want 0 (none) to 900", c.EffectsReservedConcurrency))
	}
	if (c.DomainName == "") != (c.CertificateArn == "") {
		errs = append(errs, "domainName and certificateArn: set both or neither")
	}
	if c.CertificateArn != "" && !strings.HasPrefix(c.CertificateArn, "arn:") {
		errs = append(errs, fmt.Sprintf("certificateArn %q: want an ACM certificate ARN", c.CertificateArn))
	}
	if c.AlarmTopicArn != "" && !strings.HasPrefix(c.AlarmTopicArn, "arn:") {
		errs = append(errs, fmt.Sprintf("alarmTopicArn %q: want an SNS topic ARN", c.AlarmTopicArn))
	}
	okRetention := false
	for _, d := range retentionDays {
		okRetention = okRetention || d == c.LogRetentionDays
	}
	if !okRetention {
		errs = append(errs, fmt.Sprintf("logRetentionDays %d: want one of %v", c.LogRetentionDays, retentionDays))
	}
	for _, t := range []struct {
		name        string
		rate, burst int
	}{
		{"throttleRate and throttleBurst", c.ThrottleRate, c.ThrottleBurst},
		{"workerThrottleRate and workerThrottleBurst", c.WorkerThrottleRate, c.WorkerThrottleBurst},
		{"credentialThrottleRate and credentialThrottleBurst", c.CredentialThrottleRate, c.CredentialThrottleBurst},
	} {
		if t.rate < 1 || t.burst < 1 {
			errs = append(errs, t.name+": want at least 1")
		}
	}
	if !validGitUsername(c.GitUsername) {
		errs = append(errs, fmt.Sprintf("gitUsername %q: want 1 to 256 printable ASCII characters without ':'", c.GitUsername))
	}
	if c.LambdaArchitecture != ArchARM64 && c.LambdaArchitecture != ArchX8664 {
		errs = append(errs, fmt.Sprintf("lambdaArchitecture %q: want %s or %s", c.LambdaArchitecture, ArchARM64, ArchX8664))
	}
	for _, b := range []struct{ key, v string }{{"anthropicBaseUrl", c.AnthropicBaseURL}, {"openaiBaseUrl", c.OpenAIBaseURL}} {
		if why := baseURLProblem(b.v); why != "" {
			errs = append(errs, b.key+": "+why)
		}
	}
	if c.AssetDir == "" {
		errs = append(errs, "assetDir: want the folder holding <function>/bootstrap")
	}
	// The worker tasks reach the repository and the providers only through
	// the egress proxy, whose security group sends HTTPS on 443 (and HTTP
	// on 80) alone.
	for _, b := range []struct{ key, v string }{{"repository", c.Repository}, {"anthropicBaseUrl", c.AnthropicBaseURL}, {"openaiBaseUrl", c.OpenAIBaseURL}} {
		if u, err := url.Parse(b.v); b.v != "" && err == nil && u.Port() != "" && u.Port() != "443" {
			errs = append(errs, fmt.Sprintf("%s: port %s: the workers' network carries HTTPS on port 443 only (the egress proxy's security group)", b.key, u.Port()))
		}
	}
	errs = append(errs, allowlistProblems(c.EgressAllowlist)...)
	if c.ModelCapTokens < 0 || c.ModelCapTokens > maxModelCapTokens {
		errs = append(errs, fmt.Sprintf("modelCapTokens %d: want 1 to %d tokens (or leave it out for no cap)", c.ModelCapTokens, maxModelCapTokens))
	}
	if why := dollarsProblem(c.ModelCapUSD); why != "" {
		errs = append(errs, "modelCapUsd "+strconv.Quote(c.ModelCapUSD)+": "+why)
	}
	if c.AvailabilityZones != 1 && c.AvailabilityZones != 2 {
		errs = append(errs, fmt.Sprintf("availabilityZones %d: want 1 or 2 (a stack without an account and region at synth spans at most 2)", c.AvailabilityZones))
	}
	if len(errs) > 0 {
		return fmt.Errorf("galley config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// MaxEgressAllowlist is the most entries egressAllowlist may hold: the
// list is in two task definitions' environment (64 KiB each, all told)
// and the DNS Firewall's domain list.
const MaxEgressAllowlist = 200

// maxModelCapTokens bounds modelCapTokens: a trillion tokens is no cap a
// house means.
const maxModelCapTokens = 1_000_000_000_000

// hostLabel is one label of a host name: letters (lower case), digits and
// hyphens, not at either end.
var hostLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// allowlistProblems checks egressAllowlist: host names or "*.domain"
// globs only, each of at least two labels (a glob over a top-level domain
// is the open internet), lower case ASCII (the xn-- form of an
// internationalized name), no scheme, port, path or IP address, at most
// MaxEgressAllowlist. The egress proxy and the DNS Firewall both match
// by name, and a glob matches the names below its domain, not the
// domain itself.
func allowlistProblems(list []string) []string {
	var errs []string
	if len(list) > MaxEgressAllowlist {
		errs = append(errs, fmt.Sprintf("egressAllowlist: %d entries, at most %d", len(list), MaxEgressAllowlist))
	}
	for _, e := range list {
		if why := allowEntryProblem(e); why != "" {
			errs = append(errs, fmt.Sprintf("egressAllowlist: entry %q: %s", e, why))
		}
	}
	return errs
}

func allowEntryProblem(e string) string {
	host := strings.TrimPrefix(e, "*.")
	switch {
	case e == "*" || e == "*.":
		return "matches every host: list the hosts agents may reach"
	case strings.Contains(e, "://") || strings.ContainsAny(e, "/?#@"):
		return "want a host name or *.domain, without scheme, path or user"
	case net.ParseIP(strings.Trim(host, "[]")) != nil:
		return "an IP address: the proxy allows hosts by name (and refuses private addresses after resolving)"
	case strings.Contains(e, ":"):
		return "want a host name without a port (the proxy reaches HTTPS on 443 and HTTP on 80)"
	case strings.Contains(host, "*"):
		return "a wildcard only as a whole first label (*.example.com)"
	case len(host) > 253:
		return "longer than a host name's 253 characters"
	}
	for _, r := range host {
		if r > 0x7e {
			return "not ASCII: write an internationalized name in its xn-- form"
		}
	}
	if host != strings.ToLower(host) {
		return "want lower case (host names match without regard to case)"
	}
	labels := strings.Split(host, ".")
	if len(labels) < 2 {
		if strings.HasPrefix(e, "*.") {
			return "a glob over a top-level domain allows most of the internet"
		}
		return "want a fully qualified host name (at least two labels)"
	}
	for _, l := range labels {
		if !hostLabel.MatchString(l) {
			return "want labels of letters, digits and inner hyphens, 1 to 63 characters each"
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "the last label is a number: an IP address is not allowed"
	}
	return ""
}

// usd is a decimal dollar amount: whole dollars and at most six decimals
// (a millionth of a dollar, the unit usage reports count).
var usd = regexp.MustCompile(`^[0-9]{1,7}(\.[0-9]{1,6})?$`)

// dollarsProblem says what is wrong with modelCapUsd ("" when it is unset
// or fine): a positive amount of at most $1,000,000.
func dollarsProblem(s string) string {
	if s == "" {
		return ""
	}
	if !usd.MatchString(s) {
		return "want a decimal number of dollars, such as 25 or 12.50 (no sign, currency symbol or exponent; at most 6 decimals)"
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f > 1_000_000 {
		return "want more than 0 and at most 1000000 dollars"
	}
	return ""
}

// baseURLProblem says what is wrong with a provider base URL ("" when it
// is empty or fine): on AWS an https URL with a host, and no user, query
// or fragment (the harness checks the same; the URL is never quoted, as it
// could hold a credential).
func baseURLProblem(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.User != nil:
		return "must not carry a user or password (the provider key is a secret of its own)"
	case u.Scheme != "https" || u.Host == "":
		return "want an https:// URL with a host"
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "want no query or fragment"
	}
	return ""
}

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
