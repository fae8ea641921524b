package stack

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Validate, and the checks and limits it applies to the context values.

var identifier = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

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
	seen := map[string]bool{}
	for _, f := range c.AgentFamilies {
		switch {
		case !agentFamilies[f]:
			errs = append(errs, fmt.Sprintf("agentFamilies: unknown family %q (want claude or codex)", f))
		case seen[f]:
			// Each family is one image and one task definition.
			errs = append(errs, fmt.Sprintf("agentFamilies: %q is listed twice", f))
		}
		seen[f] = true
	}
	if c.ParkAfter != 0 && c.ParkAfter < minParkAfter {
		errs = append(errs, fmt.Sprintf("parkAfter %s: want at least %s, or 0 for never", c.ParkAfter, minParkAfter))
	}
	if min, max, step, ok := fargateMemory(c.WorkerCPU); !ok {
		errs = append(errs, fmt.Sprintf("workerCpu %d: want 256, 512, 1024, 2048, 4096, 8192 or 16384", c.WorkerCPU))
	} else if c.WorkerMemory < min || c.WorkerMemory > max || (c.WorkerCPU != 256 && c.WorkerMemory%step != 0) ||
		(c.WorkerCPU == 256 && c.WorkerMemory != 512 && c.WorkerMemory != 1024 && c.WorkerMemory != 2048) {
		errs = append(errs, fmt.Sprintf("workerMemory %d: not a Fargate size for workerCpu %d (%d to %d MiB)", c.WorkerMemory, c.WorkerCPU, min, max))
	}
	if c.WorkerEphemeralStorageGiB < 21 || c.WorkerEphemeralStorageGiB > 200 {
		errs = append(errs, fmt.Sprintf("workerEphemeralStorageGiB %d: want 21 to 200 (Fargate's range)", c.WorkerEphemeralStorageGiB))
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
