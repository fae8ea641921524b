package awslocal

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/local/cfntemplate"
	"github.com/galley-run/galley/pkg/iampolicy"
)

// function is one Lambda function as the template declares it.
type function struct {
	ID      string // logical id
	Name    string // physical name
	Arn     string
	Env     map[string]string
	Timeout time.Duration
	Memory  int
	Role    string // role ARN
	Arch    string // x86_64 or arm64
	// Reserved is the function's ReservedConcurrentExecutions; nil when
	// the template reserves none.
	Reserved *int
	// Bootstrap is the function's executable: <asset folder>/bootstrap.
	Bootstrap string
}

// role is one IAM role with the statements the template gives it.
type role struct {
	ID, Name, Arn string
	// Trusts lists the services its trust policy lets assume it.
	Trusts []string
	// Trust is the trust policy itself (the STS stand-in checks callers
	// of AssumeRole against it); MaxSession the role's
	// MaxSessionDuration (0: STS's default hour).
	Trust      iampolicy.TrustPolicy
	MaxSession time.Duration
	Policies   []iampolicy.Policy
}

// rule is one EventBridge rule with its function targets.
type rule struct {
	ID       string
	Pattern  map[string]any // nil for a schedule
	Schedule string         // rate(...) or cron(...)
	Targets  []string       // function logical ids
}

// model is what aws-local runs, read from the deployed template.
type model struct {
	functions map[string]*function // by logical id
	byArn     map[string]string    // function ARN → logical id
	roles     map[string]*role     // by ARN
	routes    []route
	rules     []rule
	// throttles are the API stage's: "" for its default route settings,
	// else a route key.
	throttles map[string]throttle
}

// throttle is one route's (or the stage default's) throttling settings.
type throttle struct {
	Rate  float64
	Burst int
}

// route is one HTTP API route and its function's logical id.
type route struct {
	Key      string // "POST /v1/effects"
	Function string
}

// Lambda's reserved environment variables: a function may not set them
// (CreateFunction refuses), and the runtime sets them itself.
var reservedEnv = []string{"_HANDLER", "_X_AMZN_TRACE_ID", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_EXECUTION_ENV",
	"AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION",
	"AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME",
	"AWS_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR"}

// maxEnvBytes is Lambda's limit on a function's environment variables.
const maxEnvBytes = 4 << 10

// hostArch is this machine's architecture in Lambda's words.
func hostArch() string {
	if runtime.GOARCH == "arm64" {
		return "arm64"
	}
	return "x86_64"
}

// readModel reads functions, roles, routes and rules from the deployed
// template; dir is the template's folder (cdk.out), where assets live.
func readModel(d *deployment, dir string) (*model, error) {
	m := &model{functions: map[string]*function{}, byArn: map[string]string{}, roles: map[string]*role{}}
	t := d.t
	var errs []string
	for _, id := range t.OfType("AWS::IAM::Role") {
		if d.skipped(id) {
			continue
		}
		p := d.props[id]
		arn, _ := d.GetAtt(id, "Arn")
		r := &role{ID: id, Name: d.phys[id], Arn: arn.(string)}
		r.Trusts = trustedServices(p["AssumeRolePolicyDocument"])
		trust, err := iampolicy.TrustFromDocument(p["AssumeRolePolicyDocument"])
		if err != nil {
			errs = append(errs, fmt.Sprintf("role %s: trust policy: %v", id, err))
		}
		r.Trust = trust
		if v, ok := p["MaxSessionDuration"]; ok {
			n, err := strconv.Atoi(fmt.Sprint(v))
			if err != nil {
				errs = append(errs, fmt.Sprintf("role %s: MaxSessionDuration %v is not a number of seconds", id, v))
			}
			r.MaxSession = time.Duration(n) * time.Second
		}
		for _, inline := range asList(p["Policies"]) {
			pol, err := iampolicy.FromDocument(asMap(inline)["PolicyDocument"])
			if err != nil {
				errs = append(errs, fmt.Sprintf("role %s: inline policy: %v", id, err))
				continue
			}
			r.Policies = append(r.Policies, pol)
		}
		if arns := asList(p["ManagedPolicyArns"]); len(arns) > 0 {
			errs = append(errs, fmt.Sprintf("role %s: managed policies %v cannot be evaluated by the local stack", id, arns))
		}
		m.roles[r.Arn] = r
	}
	for _, id := range t.OfType("AWS::IAM::Policy") {
		if d.skipped(id) {
			continue
		}
		p := d.props[id]
		pol, err := iampolicy.FromDocument(p["PolicyDocument"])
		if err != nil {
			errs = append(errs, fmt.Sprintf("policy %s: %v", id, err))
			continue
		}
		for _, rn := range asList(p["Roles"]) {
			name, _ := rn.(string)
			found := false
			for _, r := range m.roles {
				if r.Name == name {
					r.Policies = append(r.Policies, pol)
					found = true
				}
			}
			if !found {
				errs = append(errs, fmt.Sprintf("policy %s: names role %q, which the template does not make", id, name))
			}
		}
	}
	for _, id := range t.OfType("AWS::Lambda::Function") {
		if d.skipped(id) {
			continue
		}
		p := d.props[id]
		arn, _ := d.GetAtt(id, "Arn")
		f := &function{ID: id, Name: d.phys[id], Arn: arn.(string), Env: map[string]string{}, Timeout: 3 * time.Second,
			Memory: 128, Role: str(p, "Role"), Arch: "x86_64"}
		if v, ok := p["Timeout"].(float64); ok {
			f.Timeout = time.Duration(v) * time.Second
		}
		if v, ok := p["MemorySize"].(float64); ok {
			f.Memory = int(v)
		}
		if v, ok := p["ReservedConcurrentExecutions"].(float64); ok {
			n := int(v)
			f.Reserved = &n
		}
		if archs := asList(p["Architectures"]); len(archs) == 1 {
			f.Arch, _ = archs[0].(string)
		}
		if f.Arch != hostArch() {
			errs = append(errs, fmt.Sprintf("function %s is built for %s and this machine runs %s: synthesize with -c lambdaArchitecture=%s",
				id, f.Arch, hostArch(), hostArch()))
		}
		if r, ok := m.roles[f.Role]; !ok {
			errs = append(errs, fmt.Sprintf("function %s: its role %q is not a role of the template", id, f.Role))
		} else if !slices.Contains(r.Trusts, "lambda.amazonaws.com") {
			errs = append(errs, fmt.Sprintf("function %s: role %s does not trust lambda.amazonaws.com, so Lambda cannot assume it", id, r.ID))
		}
		size := 0
		for k, v := range asMap(asMap(p["Environment"])["Variables"]) {
			s, ok := scalarString(v)
			if !ok {
				errs = append(errs, fmt.Sprintf("function %s: environment variable %s is not a string", id, k))
			}
			if slices.Contains(reservedEnv, k) {
				errs = append(errs, fmt.Sprintf("function %s: environment variable %s is reserved by Lambda", id, k))
			}
			f.Env[k] = s
			size += len(k) + len(s)
		}
		if size > maxEnvBytes {
			errs = append(errs, fmt.Sprintf("function %s: its environment is %d bytes, over Lambda's 4 KB", id, size))
		}
		asset, _ := t.Resources[id].Metadata["aws:asset:path"].(string)
		if asset == "" {
			errs = append(errs, fmt.Sprintf("function %s has no aws:asset:path metadata: the local stack runs only asset code", id))
		} else {
			f.Bootstrap = filepath.Join(dir, asset, "bootstrap")
		}
		m.functions[id] = f
		m.byArn[f.Arn] = id
	}
	// Routes: RouteKey and Target "integrations/<id>" → the integration's
	// IntegrationUri, a function ARN.
	integrations := map[string]string{}
	for _, id := range t.OfType("AWS::ApiGatewayV2::Integration") {
		p := d.props[id]
		if str(p, "IntegrationType") != "AWS_PROXY" {
			errs = append(errs, fmt.Sprintf("integration %s: type %s is not supported locally", id, str(p, "IntegrationType")))
			continue
		}
		if v := str(p, "PayloadFormatVersion"); v != "2.0" {
			errs = append(errs, fmt.Sprintf("integration %s: payload format %q: the local gateway sends 2.0", id, v))
		}
		fn, ok := m.byArn[str(p, "IntegrationUri")]
		if !ok {
			errs = append(errs, fmt.Sprintf("integration %s: %q is no function of the template", id, str(p, "IntegrationUri")))
			continue
		}
		integrations[d.phys[id]] = fn
	}
	for _, id := range t.OfType("AWS::ApiGatewayV2::Route") {
		p := d.props[id]
		target, ok := strings.CutPrefix(str(p, "Target"), "integrations/")
		fn, found := integrations[target]
		if !ok || !found {
			errs = append(errs, fmt.Sprintf("route %s (%s): target %q is no Lambda integration", id, str(p, "RouteKey"), str(p, "Target")))
			continue
		}
		m.routes = append(m.routes, route{Key: str(p, "RouteKey"), Function: fn})
	}
	sort.Slice(m.routes, func(i, j int) bool { return m.routes[i].Key < m.routes[j].Key })
	m.throttles = map[string]throttle{}
	for _, id := range t.OfType("AWS::ApiGatewayV2::Stage") {
		p := d.props[id]
		settings := map[string]any{"": p["DefaultRouteSettings"]}
		for key, rs := range asMap(p["RouteSettings"]) {
			settings[key] = rs
		}
		for key, rs := range settings {
			rate, okRate := asMap(rs)["ThrottlingRateLimit"].(float64)
			burst, okBurst := asMap(rs)["ThrottlingBurstLimit"].(float64)
			if okRate || okBurst {
				m.throttles[key] = throttle{Rate: rate, Burst: int(burst)}
			}
		}
	}
	for _, id := range t.OfType("AWS::Events::Rule") {
		p := d.props[id]
		if st := str(p, "State"); st != "" && st != "ENABLED" {
			continue
		}
		r := rule{ID: id, Schedule: str(p, "ScheduleExpression")}
		if pat, ok := p["EventPattern"].(map[string]any); ok {
			r.Pattern = pat
		}
		for _, tg := range asList(p["Targets"]) {
			fn, ok := m.byArn[str(asMap(tg), "Arn")]
			if !ok {
				errs = append(errs, fmt.Sprintf("rule %s: target %q is no function of the template", id, str(asMap(tg), "Arn")))
				continue
			}
			r.Targets = append(r.Targets, fn)
		}
		m.rules = append(m.rules, r)
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("the template cannot run here:\n  %s", strings.Join(errs, "\n  "))
	}
	return m, nil
}

// trustedServices lists the services a trust policy lets assume a role.
func trustedServices(doc any) []string {
	var out []string
	for _, st := range asList(asMap(doc)["Statement"]) {
		s := asMap(st)
		if s["Effect"] != "Allow" {
			continue
		}
		for _, svc := range asList(asMap(s["Principal"])["Service"]) {
			if v, ok := svc.(string); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// asList is v as a list; a single value is a list of one.
func asList(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	}
	return []any{v}
}

// functionKind names which of galley's functions a template function is,
// from its construct path (aws:cdk:path "<stack>/Effects/Resource").
func functionKind(t *cfntemplate.Template, id string) string {
	path, _ := t.Resources[id].Metadata["aws:cdk:path"].(string)
	parts := strings.Split(path, "/")
	if len(parts) >= 2 {
		return strings.ToLower(parts[1])
	}
	return strings.ToLower(id)
}
