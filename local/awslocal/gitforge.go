package awslocal

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/local/cfntemplate"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// templateRepository is the house repository the template names
// (GALLEY_REPOSITORY of its functions, a literal context value).
func templateRepository(t *cfntemplate.Template) (string, error) {
	for _, id := range t.OfType("AWS::Lambda::Function") {
		vars, _ := asMap(asMap(t.Resources[id].Properties["Environment"])["Variables"])[contract.EnvRepository].(string)
		if vars != "" {
			return vars, nil
		}
	}
	return "", fmt.Errorf("the template sets no %s on any function: synthesize with -c repository=https://...", contract.EnvRepository)
}

// localRepositoryURL is where the local git server serves the template's
// repository: the same path on the server's address. This one
// substitution stands in for DNS: the template's host is not reachable
// from this machine.
func localRepositoryURL(repoURL, addr string) string {
	path := "/house.git"
	if u, err := url.Parse(repoURL); err == nil && u.Path != "" {
		path = u.Path
	}
	return "http://" + addr + path
}

// gitServer is the house repository's forge: smart HTTP requiring the
// git credential, whose value and user name it reads from the deployment
// (the git-credential secret's current value; the user name the task
// definition gives the worker) at every request, so a rotation applies.
type gitServer struct{ stack *Stack }

func (g *gitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := g.stack
	if s.deploy == nil {
		http.Error(w, "not deployed yet", http.StatusServiceUnavailable)
		return
	}
	user, secretArn := s.gitCredentialNames()
	check := func(u, p string) bool {
		out, err := s.admin.GetSecretValue(r.Context(), &secretsmanager.GetSecretValueInput{SecretId: aws.String(secretArn)})
		if err != nil {
			return false
		}
		return subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1 &&
			subtle.ConstantTimeCompare([]byte(p), []byte(aws.ToString(out.SecretString))) == 1
	}
	gitserve.BasicAuth("galley house repository", check, gitserve.Backend(s.repo)).ServeHTTP(w, r)
}

// gitCredentialNames reads the git user name the worker presents (its
// task definition's GALLEY_GIT_USERNAME, else the harness's default) and
// the git credential's secret (the effects function's GALLEY_SECRET_GIT).
// The functions present the same pair; a template where they differ fails
// the forge's check for one of them, as a real forge would.
func (s *Stack) gitCredentialNames() (user, secretArn string) {
	user = harness.DefaultGitUsername
	for _, p := range s.deploy.props {
		for _, c := range asList(p["ContainerDefinitions"]) {
			for _, kv := range asList(asMap(c)["Environment"]) {
				if str(asMap(kv), "Name") == harness.EnvGitUsername && str(asMap(kv), "Value") != "" {
					user = str(asMap(kv), "Value")
				}
			}
		}
	}
	return user, s.model.functions[s.kinds[lambdaapp.Effects]].Env[contract.EnvSecretGit]
}

// syncToken keeps kitchn's token across restarts: a token file that exists
// becomes the bearer-token secret's current value; otherwise the
// deployment's generated value is written to it (mode 600).
func (s *Stack) syncToken(ctx context.Context) error {
	arn := s.model.functions[s.kinds[lambdaapp.Effects]].Env[contract.EnvTokenSecretArn]
	if arn == "" {
		return fmt.Errorf("the effects function has no %s", contract.EnvTokenSecretArn)
	}
	if b, err := os.ReadFile(s.tokenFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
		_, err := s.sm.Put(arn, string(bytes.TrimSpace(b)))
		return err
	}
	out, err := s.admin.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.tokenFile), 0o700); err != nil {
		return err
	}
	return os.WriteFile(s.tokenFile, []byte(aws.ToString(out.SecretString)+"\n"), 0o600)
}

// syncOperatorToken keeps the operator token's secret and the operator
// token file in step, as syncToken does kitchn's: the file (written from
// the generated secret on first start) is what the galley commands read.
func (s *Stack) syncOperatorToken(ctx context.Context) error {
	arn := s.model.functions[s.kinds[lambdaapp.Operator]].Env[contract.EnvOperatorTokenSecretArn]
	if arn == "" {
		return fmt.Errorf("the operator function has no %s", contract.EnvOperatorTokenSecretArn)
	}
	if b, err := os.ReadFile(s.operatorTokenFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
		_, err := s.sm.Put(arn, string(bytes.TrimSpace(b)))
		return err
	}
	out, err := s.admin.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.operatorTokenFile), 0o700); err != nil {
		return err
	}
	return os.WriteFile(s.operatorTokenFile, []byte(aws.ToString(out.SecretString)+"\n"), 0o600)
}
