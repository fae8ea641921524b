package awslocal

import (
	"context"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/s3standin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
)

// Endpoint is the gateway's URL, the endpoint of the kitchn binding.
func (s *Stack) Endpoint() string { return s.endpoint }

// TokenFile is where the bearer token lives.
func (s *Stack) TokenFile() string { return s.tokenFile }

// OperatorTokenFile is where the operator token lives (the operator
// routes, /operator/: the galley commands' --token-file).
func (s *Stack) OperatorTokenFile() string { return s.operatorTokenFile }

// ECS is the ECS stand-in (tests inspect its tasks and requests).
func (s *Stack) ECS() *ecsstandin.Server { return s.ecs }

// S3 is the S3 stand-in holding the template's buckets (tests read the
// worktree snapshots there).
func (s *Stack) S3() *s3standin.Server { return s.s3 }

// Gate is the IAM gate of one service (tests read its decisions).
func (s *Stack) Gate(svc iamgate.Service) *iamgate.Gate { return s.gates[svc] }

// Metrics are the metric data the functions emitted (EMF lines in their
// output), in order.
func (s *Stack) Metrics() []Metric { return s.metrics.all() }

// GitURL is where the local git server serves the house repository, and
// Repository the bare repository behind it.
func (s *Stack) GitURL() string     { return s.gitURL }
func (s *Stack) Repository() string { return s.repo }

// SecretValue reads a secret's current value by name or ARN (tests).
func (s *Stack) SecretValue(ctx context.Context, id string) (string, error) {
	out, err := s.admin.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.SecretString), nil
}

// FunctionEnv is one of galley's functions' environment as the template
// sets it (tests).
func (s *Stack) FunctionEnv(fn lambdaapp.Function) map[string]string {
	if id, ok := s.kinds[fn]; ok {
		return s.model.functions[id].Env
	}
	return nil
}

// FunctionCredentials are the session credentials fn runs with (its role's),
// for a test to act as the function does.
func (s *Stack) FunctionCredentials(fn lambdaapp.Function) aws.Credentials {
	f, ok := s.model.functions[s.kinds[fn]]
	if !ok {
		return aws.Credentials{}
	}
	p, _ := s.principals.role(f.Role)
	return aws.Credentials{AccessKeyID: p.AccessKeyID, SecretAccessKey: p.SecretAccessKey, SessionToken: p.SessionToken}
}

// Region is the stack's region.
func (s *Stack) Region() string { return localRegion }

// Instances reports how many emulators each function runs.
func (s *Stack) Instances() map[lambdaapp.Function]int {
	m := map[lambdaapp.Function]int{}
	for fn, id := range s.kinds {
		m[fn] = s.pools[id].Size()
	}
	return m
}

// Binding is the kitchn backend binding for the stack.
func (s *Stack) Binding() string {
	env := s.model.functions[s.kinds[lambdaapp.Effects]].Env
	return localserver.Binding(env[contract.EnvBackend], env[contract.EnvCredential], s.endpoint)
}

// PutSecret puts a new current value of a template's secret (by name or
// ARN), as an operator's `aws secretsmanager put-secret-value` does.
func (s *Stack) PutSecret(ctx context.Context, id, value string) error {
	_, err := s.admin.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(id), SecretString: aws.String(value)})
	return err
}

// Resources are the deployed template's resources of one type: their
// properties as resolved at deployment, by logical id (tests, tools).
func (s *Stack) Resources(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, id := range s.deploy.t.OfType(typ) {
		if p, ok := s.deploy.props[id]; ok {
			out[id] = p
		}
	}
	return out
}

// PhysicalID is what a deployed resource's Ref gives (a table's name, a
// queue's URL, a function's name).
func (s *Stack) PhysicalID(logicalID string) string { return s.deploy.phys[logicalID] }

// Attribute is a deployed resource's Fn::GetAtt attribute.
func (s *Stack) Attribute(logicalID, attr string) (any, error) {
	return s.deploy.GetAtt(logicalID, attr)
}

// GateURL is the endpoint of svc's IAM gate, and CAFile the PEM file of
// the certificate authority its TLS certificate chains to: what a client
// of the stack's AWS endpoints needs (AWS_ENDPOINT_URL_*, AWS_CA_BUNDLE).
func (s *Stack) GateURL(svc iamgate.Service) string { return s.gateURLs[svc] }
func (s *Stack) CAFile() string                     { return filepath.Join(s.dir, "ca.pem") }

// DataDir is the stack's own folder (<data>/aws-local): the stand-ins'
// state and the tasks' files.
func (s *Stack) DataDir() string { return s.dir }

// EgressAddress is where worker containers reach the stack's egress
// service (host:port), or "" when it runs none.
func (s *Stack) EgressAddress() string {
	if s.egress == nil {
		return ""
	}
	return s.egress.ln.Addr().String()
}
