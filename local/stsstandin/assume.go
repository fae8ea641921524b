package stsstandin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/pkg/iampolicy"
)

var (
	sessionNamePattern = regexp.MustCompile(`^[\w+=,.@-]*$`)
	externalIDPattern  = regexp.MustCompile(`^[\w+=,.@:/-]*$`)
	// roleARNPattern: arn:<partition>:iam::<account>:role/<path><name>.
	roleARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$`)
)

// notModelled are AssumeRole parameters (by prefix) the stand-in does not
// serve: refused, because ignoring them would grant a session other than
// the one asked for.
var notModelled = []struct{ prefix, what string }{
	{"PolicyArns.", "managed session policies (PolicyArns)"},
	{"Tags.", "session tags (Tags)"},
	{"TransitiveTagKeys.", "transitive session tags (TransitiveTagKeys)"},
	{"SerialNumber", "MFA (SerialNumber)"},
	{"TokenCode", "MFA (TokenCode)"},
	{"SourceIdentity", "SourceIdentity"},
	{"ProvidedContexts.", "provided contexts (ProvidedContexts)"},
}

// onlyParams refuses a request naming a parameter other than Action,
// Version and known.
func onlyParams(f url.Values, known ...string) *apiError {
	for k := range f {
		if k == "Action" || k == "Version" {
			continue
		}
		ok := false
		for _, n := range known {
			ok = ok || k == n
		}
		if ok {
			continue
		}
		for _, nm := range notModelled {
			if strings.HasPrefix(k, nm.prefix) {
				e := validation("aws-local: the STS stand-in does not model " + nm.what + "; refusing the request rather than ignoring it")
				return &e
			}
		}
		e := validation("aws-local: the STS stand-in does not know the parameter " + strconv.Quote(k))
		return &e
	}
	return nil
}

// assumeRole serves AssumeRole for c.
func (s *Server) assumeRole(c caller, f url.Values) (*assumeRoleResponse, *apiError) {
	if e := onlyParams(f, "RoleArn", "RoleSessionName", "DurationSeconds", "Policy", "ExternalId"); e != nil {
		return nil, e
	}
	roleARN, name := f.Get("RoleArn"), f.Get("RoleSessionName")
	_, hasPolicy := f["Policy"]
	_, hasDuration := f["DurationSeconds"]
	_, hasExternal := f["ExternalId"]
	policy, externalID := f.Get("Policy"), f.Get("ExternalId")

	// The parameters' constraints, all reported at once as AWS does.
	var bad []string
	length := func(field, v string, lo, hi int) {
		if n := utf8.RuneCountInString(v); n < lo {
			bad = append(bad, fmt.Sprintf("Value '%s' at '%s' failed to satisfy constraint: Member must have length greater than or equal to %d", v, field, lo))
		} else if n > hi {
			bad = append(bad, fmt.Sprintf("Value '%s' at '%s' failed to satisfy constraint: Member must have length less than or equal to %d", v, field, hi))
		}
	}
	if _, ok := f["RoleArn"]; !ok {
		bad = append(bad, "Value null at 'roleArn' failed to satisfy constraint: Member must not be null")
	} else {
		length("roleArn", roleARN, 20, 2048)
	}
	if _, ok := f["RoleSessionName"]; !ok {
		bad = append(bad, "Value null at 'roleSessionName' failed to satisfy constraint: Member must not be null")
	} else {
		length("roleSessionName", name, 2, 64)
		if !sessionNamePattern.MatchString(name) {
			bad = append(bad, fmt.Sprintf(`Value '%s' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\w+=,.@-]*`, name))
		}
	}
	duration := DefaultDuration
	if hasDuration {
		n, err := strconv.Atoi(f.Get("DurationSeconds"))
		switch {
		case err != nil:
			e := validation(fmt.Sprintf("Value '%s' for parameter DurationSeconds is invalid: not an integer", f.Get("DurationSeconds")))
			return nil, &e
		case n < 900:
			bad = append(bad, fmt.Sprintf("Value '%d' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900", n))
		case n > 43200:
			bad = append(bad, fmt.Sprintf("Value '%d' at 'durationSeconds' failed to satisfy constraint: Member must have value less than or equal to 43200", n))
		}
		duration = time.Duration(n) * time.Second
	}
	if hasPolicy {
		length("policy", policy, 1, 2048)
		if !policyChars(policy) {
			bad = append(bad, fmt.Sprintf(`Value '%s' at 'policy' failed to satisfy constraint: Member must satisfy regular expression pattern: [\u0009\u000A\u000D\u0020-\u00FF]+`, policy))
		}
	}
	if hasExternal {
		length("externalId", externalID, 2, 1224)
		if !externalIDPattern.MatchString(externalID) {
			bad = append(bad, fmt.Sprintf(`Value '%s' at 'externalId' failed to satisfy constraint: Member must satisfy regular expression pattern: [\w+=,.@:\/-]*`, externalID))
		}
	}
	if e := constraintErrors(bad); e != nil {
		return nil, e
	}
	if !strings.HasPrefix(roleARN, "arn:") || len(strings.SplitN(roleARN, ":", 6)) != 6 {
		e := validation("Request ARN is invalid")
		return nil, &e
	}

	// Who may assume the role: AWS answers an unknown role as it answers
	// a trust policy that refuses, so the caller learns nothing of which.
	denied := &apiError{http.StatusForbidden, "AccessDenied",
		fmt.Sprintf("User: %s is not authorized to perform: sts:AssumeRole on resource: %s", c.sessionARN(), roleARN)}
	role, ok := s.roles(roleARN)
	if !ok || !roleARNPattern.MatchString(roleARN) {
		return nil, denied
	}
	ctx := map[string][]string{
		"aws:PrincipalArn":     {c.role},
		"aws:PrincipalAccount": {c.account},
		"aws:PrincipalType":    {"AssumedRole"},
		"aws:SecureTransport":  {strconv.FormatBool(c.tls)},
		"sts:RoleSessionName":  {name},
	}
	if c.region != "" {
		ctx["aws:RequestedRegion"] = []string{c.region}
	}
	if hasExternal {
		ctx["sts:ExternalId"] = []string{externalID}
	}
	who := iampolicy.Caller{"AWS": {c.role, c.sessionARN(), "arn:aws:iam::" + c.account + ":root"}}
	if d := role.Trust.Evaluate(who, iampolicy.Request{Action: "sts:AssumeRole", Resource: roleARN, Context: ctx}); !d.Allowed {
		return nil, denied
	}

	longest := role.MaxSessionDuration
	if longest == 0 {
		longest = DefaultMaxSessionDuration
	}
	if duration > longest {
		e := validation("The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
		return nil, &e
	}
	// Every caller here is a role session: this is role chaining.
	if duration > ChainedMax {
		e := validation("The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining.")
		return nil, &e
	}

	var sessionPolicies []iampolicy.Policy
	packed := 0
	if hasPolicy {
		p, size, e := sessionPolicy(policy)
		if e != nil {
			return nil, e
		}
		sessionPolicies, packed = []iampolicy.Policy{p}, size
	}

	p := s.issue(role, name, duration, sessionPolicies)
	out := &assumeRoleResponse{Xmlns: Namespace, RequestID: awswire.UUID()}
	out.Result.Credentials.AccessKeyID = p.AccessKeyID
	out.Result.Credentials.SecretAccessKey = p.SecretAccessKey
	out.Result.Credentials.SessionToken = p.SessionToken
	out.Result.Credentials.Expiration = p.Expires.UTC().Format(time.RFC3339)
	out.Result.AssumedRoleUser.Arn = p.SessionARN()
	out.Result.AssumedRoleUser.AssumedRoleID = roleID(role.ARN) + ":" + name
	if hasPolicy {
		out.Result.PackedPolicySize = &packed
	}
	return out, nil
}

// policyChars: a policy's characters are tab, line feed, carriage return
// and U+0020 to U+00FF.
func policyChars(s string) bool {
	for _, r := range s {
		if r != '\t' && r != '\n' && r != '\r' && (r < 0x20 || r > 0xFF) {
			return false
		}
	}
	return s != ""
}

// sessionPolicy parses a session policy and measures its packed size in
// percent of the limit.
func sessionPolicy(doc string) (iampolicy.Policy, int, *apiError) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(doc)); err != nil {
		e := apiError{http.StatusBadRequest, "MalformedPolicyDocument", "The policy is not in the valid JSON format."}
		return iampolicy.Policy{}, 0, &e
	}
	p, err := iampolicy.Parse([]byte(doc))
	if err != nil {
		// iampolicy refuses what it cannot evaluate as well as what AWS
		// refuses: either way the session cannot be granted here.
		e := apiError{http.StatusBadRequest, "MalformedPolicyDocument", "Syntax errors in policy. (aws-local: " + err.Error() + ")"}
		return iampolicy.Policy{}, 0, &e
	}
	size := (utf8.RuneCount(compact.Bytes())*100 + PackedBudget - 1) / PackedBudget
	if size > 100 {
		e := apiError{http.StatusBadRequest, "PackedPolicyTooLarge",
			fmt.Sprintf("Packed policy consumes %d%% of allotted space, please use smaller policy.", size)}
		return iampolicy.Policy{}, 0, &e
	}
	return p, size, nil
}
