package awslocal

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/gateway"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/cfntemplate"
	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
)

// DefaultTemplate is the template `make synth-local` writes: the one
// *.template.json under cdk.out (relative to the working directory).
func DefaultTemplate() (string, error) {
	matches, _ := filepath.Glob(filepath.Join("cdk.out", "*.template.json"))
	switch len(matches) {
	case 0:
		return "", errors.New("no stack template under cdk.out: synthesize it with `make synth-local`, or pass --template")
	case 1:
		return matches[0], nil
	}
	return "", fmt.Errorf("several stack templates under cdk.out (%s): pass --template", strings.Join(matches, ", "))
}

func fillDefaults(cfg *Config) error {
	o := &cfg.Options
	// The house, backend and credential come from the template: only a
	// value the caller set is compared with it (checkOptions).
	house, backend, credential := o.House, o.Backend, o.Credential
	o.Defaults()
	o.House, o.Backend, o.Credential = house, backend, credential
	if cfg.Bin == (Binaries{}) {
		dir := os.Getenv(EnvBin)
		if dir == "" {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			dir = filepath.Dir(exe)
		}
		cfg.Bin = BinariesIn(dir)
	}
	if o.WorkerBin != "" {
		cfg.Bin.Harness = o.WorkerBin
	}
	if err := cfg.Bin.Check(); err != nil {
		return err
	}
	if cfg.Template == "" {
		t, err := DefaultTemplate()
		if err != nil {
			return err
		}
		cfg.Template = t
	}
	if cfg.WorkerGrace <= 0 {
		cfg.WorkerGrace = 10 * time.Second
	}
	if cfg.WorkerImage == "" {
		cfg.WorkerImage = os.Getenv(EnvWorkerImage)
	}
	return nil
}

// checkOptions refuses local server options that contradict the template:
// the template is the deployment, and aws-local does not override it.
func (s *Stack) checkOptions() error {
	o := s.cfg.Options
	for _, fn := range lambdaapp.Functions {
		if _, ok := s.kinds[fn]; !ok {
			return fmt.Errorf("aws-local: the template has no %s function", fn)
		}
	}
	env := s.model.functions[s.kinds[lambdaapp.Effects]].Env
	var errs []string
	// What the local stack itself reads from the template (the git
	// server's credential, kitchn's token, the binding).
	for _, name := range []string{lambdaapp.EnvHouse, lambdaapp.EnvBackend, lambdaapp.EnvCredential,
		lambdaapp.EnvTokenSecretArn, lambdaapp.EnvSecretGit, lambdaapp.EnvRepository} {
		if env[name] == "" {
			errs = append(errs, fmt.Sprintf("the template's effects function sets no %s", name))
		}
	}
	check := func(flag, have, name string) {
		if have != "" && env[name] != have {
			errs = append(errs, fmt.Sprintf("%s %q: the template sets %s=%q (synthesize with the value you want)", flag, have, name, env[name]))
		}
	}
	check("--house", o.House, lambdaapp.EnvHouse)
	check("--backend", o.Backend, lambdaapp.EnvBackend)
	check("--credential", o.Credential, lambdaapp.EnvCredential)
	if len(errs) > 0 {
		return errors.New("aws-local: " + strings.Join(errs, "; "))
	}
	return nil
}

// principals are the roles' sessions: one access key each, as Lambda and
// ECS hand a role's temporary credentials to what runs with it.
type principals struct {
	mu     sync.Mutex
	byKey  map[string]iamgate.Principal
	byRole map[string]iamgate.Principal
}

func newPrincipals() *principals {
	return &principals{byKey: map[string]iamgate.Principal{}, byRole: map[string]iamgate.Principal{}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (p *principals) add(r *role) {
	pr := iamgate.Principal{
		AccessKeyID:     "ASIA" + strings.ToUpper(randomHex(8)),
		SecretAccessKey: randomHex(20), SessionToken: randomHex(32),
		RoleARN: r.Arn, SessionName: r.Name, Policies: r.Policies,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byKey[pr.AccessKeyID] = pr
	p.byRole[r.Arn] = pr
}

// Lookup implements iamgate.Principals.
func (p *principals) Lookup(key string) (iamgate.Principal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.byKey[key]
	return pr, ok
}

func (p *principals) role(arn string) (iamgate.Principal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.byRole[arn]
	return pr, ok
}

// clientOptions are an SDK client's options for a role's session, trusting
// the stack's CA.
func (s *Stack) clientOptions(p iamgate.Principal, caPEM []byte) secretsmanager.Options {
	return secretsmanager.Options{Region: localRegion,
		Credentials: credentials.NewStaticCredentialsProvider(p.AccessKeyID, p.SecretAccessKey, p.SessionToken),
		HTTPClient:  tlsClient(caPEM)}
}

func tlsClient(caPEM []byte) *http.Client {
	pool, _ := x509Pool(caPEM)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// serveTLS serves h on ln over TLS.
func (s *Stack) serveTLS(ln net.Listener, h http.Handler, cfg *tls.Config) {
	// No write deadline: SQS's ReceiveMessage holds up to 20 s. A body
	// must arrive within the read deadline (cleared once it is read).
	srv := &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	s.servers = append(s.servers, srv)
	lim := connlimit.Wrap(ln, connlimit.Limits{}, s.cfg.Options.Logger)
	lim.Install(srv)
	go srv.Serve(tls.NewListener(lim, cfg))
}

// handlerClient is an HTTP client that serves every request with h in
// process: the deployment's own calls to a stand-in.
func handlerClient(h http.Handler) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result(), nil
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// taskDefinition tells the ECS gate which roles a task of a task
// definition gets (for RunTask's implied iam:PassRole).
func (s *Stack) taskDefinition(ref string) (iamgate.TaskDefinition, bool) {
	if s.deploy == nil {
		return iamgate.TaskDefinition{}, false
	}
	for _, id := range s.deploy.t.OfType("AWS::ECS::TaskDefinition") {
		arn := s.deploy.phys[id]
		family := str(s.deploy.props[id], "Family")
		if ref == arn || ref == family || strings.HasPrefix(arn, "arn:aws:ecs:"+localRegion+":"+localAccount+":task-definition/"+ref) {
			p := s.deploy.props[id]
			return iamgate.TaskDefinition{ARN: arn, TaskRoleARN: str(p, "TaskRoleArn"), ExecutionRoleARN: str(p, "ExecutionRoleArn")}, true
		}
	}
	return iamgate.TaskDefinition{}, false
}

// isWorkerImage matches the worker image: a CDK container asset in the
// bootstrap's ECR repository. The template names it by its hash only.
func isWorkerImage(ref string) bool {
	return strings.Contains(ref, ".dkr.ecr.") && strings.Contains(ref, "/cdk-") && strings.Contains(ref, "-container-assets-")
}

// workerImage is what the worker image holds on this machine: the
// harness as its entrypoint and the stand-in agent CLIs on its PATH, with
// the image's own environment (worker/Dockerfile's ENV, the same names:
// TestWorkerImageMatchesDockerfile) pointing at them.
//
// Its tasks also reach SQS through the stack's gate (AWS_ENDPOINT_URL_SQS,
// trusting the stack's CA): on AWS the SDK's default endpoint is right.
// The harness waits on its own queue with the credentials its wake grant
// carries; nothing else in the task calls AWS.
func (s *Stack) workerImage() ecsstandin.Image {
	img := WorkerImage(s.cfg.Bin, s.dir)
	img.Env["AWS_ENDPOINT_URL_SQS"] = s.gateURLs[iamgate.SQS]
	img.Env["AWS_CA_BUNDLE"] = s.CAFile()
	return img
}

// WorkerImage is the local worker image for the binaries b, with its home
// folder under dir.
func WorkerImage(b Binaries, dir string) ecsstandin.Image {
	return ecsstandin.Image{
		Entrypoint: []string{mustAbs(b.Harness)},
		Env: map[string]string{
			"PATH":                 mustAbs(b.Agents) + ":/usr/local/bin:/usr/bin:/bin",
			"HOME":                 filepath.Join(dir, "home"),
			"GALLEY_AGENT_BIN_DIR": mustAbs(b.Agents),
			"GALLEY_WORKSPACE":     "/workspace",
			"DISABLE_AUTOUPDATER":  "1",
		},
	}
}

// templateRepository is the house repository the template names
// (GALLEY_REPOSITORY of its functions, a literal context value).
func templateRepository(t *cfntemplate.Template) (string, error) {
	for _, id := range t.OfType("AWS::Lambda::Function") {
		vars, _ := asMap(asMap(t.Resources[id].Properties["Environment"])["Variables"])[lambdaapp.EnvRepository].(string)
		if vars != "" {
			return vars, nil
		}
	}
	return "", fmt.Errorf("the template sets no %s on any function: synthesize with -c repository=https://...", lambdaapp.EnvRepository)
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
	return user, s.model.functions[s.kinds[lambdaapp.Effects]].Env[lambdaapp.EnvSecretGit]
}

// syncToken keeps kitchn's token across restarts: a token file that exists
// becomes the bearer-token secret's current value; otherwise the
// deployment's generated value is written to it (mode 600).
func (s *Stack) syncToken(ctx context.Context) error {
	arn := s.model.functions[s.kinds[lambdaapp.Effects]].Env[lambdaapp.EnvTokenSecretArn]
	if arn == "" {
		return fmt.Errorf("the effects function has no %s", lambdaapp.EnvTokenSecretArn)
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

// spawner starts a function's emulators with its environment.
func (s *Stack) spawner(f *function, env []string, out io.Writer) func(context.Context) (gateway.Invoker, error) {
	return func(ctx context.Context) (gateway.Invoker, error) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errors.New("the stack is shutting down")
		}
		p, err := gateway.StartEmulator(context.WithoutCancel(ctx), gateway.EmulatorConfig{
			RIE: s.cfg.Bin.RIE, Bootstrap: f.Bootstrap, Env: env,
			Timeout: f.Timeout, Name: f.Name, Output: out,
		})
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			p.Close()
			return nil, errors.New("the stack is shutting down")
		}
		s.procs = append(s.procs, p)
		return p, nil
	}
}

// NewInstance starts one more emulator of fn outside its pool, with fn's
// environment and its output to out: a fresh instance whose first
// invocation is a cold start (the benchmarks measure it). The caller
// closes it; Close closes it too.
func (s *Stack) NewInstance(ctx context.Context, fn lambdaapp.Function, out io.Writer) (*gateway.EmulatorProcess, error) {
	id, ok := s.kinds[fn]
	if !ok {
		return nil, fmt.Errorf("no function %q", fn)
	}
	inv, err := s.spawner(s.model.functions[id], s.envs[id], out)(ctx)
	if err != nil {
		return nil, err
	}
	return inv.(*gateway.EmulatorProcess), nil
}

func (s *Stack) output(fn string) (io.Writer, error) {
	if s.cfg.FunctionOutput != nil {
		return s.cfg.FunctionOutput, nil
	}
	f, err := os.OpenFile(filepath.Join(s.dir, "logs", fn+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	s.logs = append(s.logs, f)
	return f, nil
}

// invoke invokes a function by its logical id.
func (s *Stack) invoke(ctx context.Context, id string, payload []byte) ([]byte, error) {
	s.mu.Lock()
	p := s.pools[id]
	s.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("function %s is not running", id)
	}
	return p.Invoke(ctx, payload)
}

// Endpoint is the gateway's URL, the endpoint of the kitchn binding.
func (s *Stack) Endpoint() string { return s.endpoint }

// TokenFile is where the bearer token lives.
func (s *Stack) TokenFile() string { return s.tokenFile }

// ECS is the ECS stand-in (tests inspect its tasks and requests).
func (s *Stack) ECS() *ecsstandin.Server { return s.ecs }

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
	return localserver.Binding(env[lambdaapp.EnvBackend], env[lambdaapp.EnvCredential], s.endpoint)
}

// Close stops everything, in the order that lets the last events land: the
// gateway stops taking requests, the ECS stand-in stops the worker tasks
// and delivers their final state changes to the reconciler, then the
// functions and the stand-ins stop. Stand-ins that were running before
// Start keep running.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.mu.Lock()
	if s.stopped != nil {
		select {
		case <-s.stopped:
		default:
			close(s.stopped)
		}
	}
	s.mu.Unlock()
	if len(s.servers) > 0 {
		_ = s.servers[0].Shutdown(ctx) // the gateway
	}
	if s.ecs != nil {
		_ = s.ecs.Close()
	}
	if err := s.ctrs.close(); err != nil {
		s.cfg.Logger.Error("aws-local: cannot remove the container network", "err", err)
	}
	s.ctrs = nil
	for _, srv := range s.servers[min(1, len(s.servers)):] {
		_ = srv.Shutdown(ctx)
	}
	s.mu.Lock()
	s.closed = true
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close()
		}()
	}
	wg.Wait()
	for _, f := range s.logs {
		f.Close()
	}
	s.logs = nil
	if s.stopStandin != nil {
		s.stopStandin()
		s.stopStandin = nil
	}
	return nil
}

// ServeAWSLocal is `galley serve --stack aws-local`: it starts the stack
// from the template, prints what `galley serve` prints, and stops
// everything when ctx ends (SIGTERM).
func ServeAWSLocal(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if err := fillDefaults(&cfg); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "galley: deploying %s onto this machine (DynamoDB Local, fauxqs, Secrets Manager and ECS stand-ins, IAM gates, the functions under the Lambda emulator)\n", cfg.Template)
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	if img := s.WorkerImageRef(); img != "" {
		fmt.Fprintf(stderr, "galley: worker tasks run as containers of %s (podman, runc) on the stack's own network\n", img)
	} else {
		fmt.Fprintln(stderr, "galley: "+HostProgramsNotice)
	}
	o := cfg.Options
	env := s.FunctionEnv(lambdaapp.Effects)
	o.House, o.Backend, o.Credential = env[lambdaapp.EnvHouse], env[lambdaapp.EnvBackend], env[lambdaapp.EnvCredential]
	localserver.PrintReady(stdout, o, s.Endpoint(), s.TokenFile())
	<-ctx.Done()
	fmt.Fprintln(stdout, "galley: shutting down")
	return s.Close()
}

// standins returns the AWS variables that point at DynamoDB and SQS
// stand-ins: those of this process when both endpoints are set (a
// LocalStack, or stand-ins started by make test), else those of
// scripts/standins.sh, which it starts; stop stops them again only if
// they were not running before.
func standins(ctx context.Context, script string, bin Binaries) (map[string]string, func(), error) {
	env := map[string]string{}
	ddb, sqs := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), os.Getenv("AWS_ENDPOINT_URL_SQS")
	if ddb != "" && sqs != "" {
		env["AWS_ENDPOINT_URL_DYNAMODB"], env["AWS_ENDPOINT_URL_SQS"] = ddb, sqs
		return env, func() {}, nil
	}
	if script == "" {
		script = filepath.Join(filepath.Dir(filepath.Dir(mustAbs(bin.ECS))), "scripts", "standins.sh")
		if _, err := os.Stat(script); err != nil {
			script = filepath.Join("scripts", "standins.sh")
		}
	}
	if _, err := os.Stat(script); err != nil {
		return nil, nil, fmt.Errorf("cannot find scripts/standins.sh to start DynamoDB Local and fauxqs (or set AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS): %w", err)
	}
	running := exec.CommandContext(ctx, script, "status").Run() == nil
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, script, "start")
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("scripts/standins.sh start: %w", err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if k, v, found := strings.Cut(line, "="); ok && found && slices.Contains([]string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"}, k) {
			env[k] = v
		}
	}
	if env["AWS_ENDPOINT_URL_DYNAMODB"] == "" || env["AWS_ENDPOINT_URL_SQS"] == "" {
		return nil, nil, errors.New("scripts/standins.sh start printed no endpoints")
	}
	stop := func() {}
	if !running {
		stop = func() {
			c := exec.Command(script, "stop")
			c.Stdout, c.Stderr = os.Stderr, os.Stderr
			_ = c.Run()
		}
	}
	return env, stop, nil
}

func mustAbs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
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
