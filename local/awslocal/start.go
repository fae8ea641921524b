package awslocal

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/local/cfntemplate"
	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/gateway"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/s3standin"
	"github.com/galley-run/galley/local/smstandin"
	"github.com/galley-run/galley/local/stsstandin"
	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
)

// Start deploys the template onto this machine's stand-ins and starts the
// stack: DynamoDB Local and fauxqs (unless their endpoints are set), the
// Secrets Manager and ECS stand-ins, an IAM gate in front of each AWS
// endpoint, the authenticated git server, and the local gateway on
// cfg.Listen with each function under the emulator. It returns once the
// gateway listens; functions start on their first request, as Lambda's do.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if err := fillDefaults(&cfg); err != nil {
		return nil, err
	}
	tpl, err := cfntemplate.Load(cfg.Template)
	if err != nil {
		return nil, fmt.Errorf("%w (synthesize it with `make synth-local`)", err)
	}
	data, err := filepath.Abs(cfg.Data)
	if err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, dir: filepath.Join(data, "aws-local"), pools: map[string]*gateway.Pool{},
		envs: map[string][]string{}, gates: map[iamgate.Service]*iamgate.Gate{}, kinds: map[lambdaapp.Function]string{},
		stopped: make(chan struct{}), metrics: newMetricSink()}
	st := &startup{s: s, tpl: tpl, data: data}
	ok := false
	defer func() {
		if !ok {
			st.abandon()
		}
	}()
	for _, phase := range []func(context.Context) error{
		st.prepareDataDir,
		st.startStoreStandins,
		st.startContainerNetwork,
		st.listenForAPI,
		st.makeCA,
		st.startSecretsAndSTS,
		st.reserveGateAddresses,
		st.startECSStandin,
		st.startGates,
		st.startGitForge,
		st.prepareDeployment,
		st.reserveEgress,
		st.deployResources,
		st.startEgressService,
		st.seedSecrets,
		st.startFunctionsAndGateway,
		st.startSchedules,
	} {
		if err := phase(ctx); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// startup is one Start under way: the stack it builds, and what a phase
// hands on to the later ones.
type startup struct {
	s    *Stack
	tpl  *cfntemplate.Template
	data string // the data directory, absolute

	awsEnv map[string]string // DynamoDB's and SQS's endpoints
	// ln is the gateway's listener, whose address is the API's endpoint;
	// apiLn where worker tasks reach the API (ln, or one on the container
	// network's host side), at apiURL.
	ln, apiLn net.Listener
	apiURL    string
	gwSrv     *http.Server

	serverTLS *tls.Config
	caPEM     []byte
	caFile    string
	gateLns   map[iamgate.Service]net.Listener
	gitLn     net.Listener
	d         *deployment
	repoURL   string       // the template's repository
	egressLn  net.Listener // nil: no egress service
}

// abandon undoes a start that failed: the listeners no server serves on
// yet, then everything the stack started.
func (st *startup) abandon() {
	if st.egressLn != nil && st.s.egress == nil {
		st.egressLn.Close() // once the egress service serves on it, s.Close closes it
	}
	if st.ln != nil {
		st.ln.Close()
	}
	st.s.Close()
}

// prepareDataDir makes the stack's folder and resolves the token files.
func (st *startup) prepareDataDir(context.Context) error {
	s, o := st.s, &st.s.cfg.Options
	var err error
	if err := os.MkdirAll(filepath.Join(s.dir, "logs"), 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	// Workers' agents run under uids of their own (docs/security.md): they
	// may pass through the data folder and the stack's folder to their
	// worktree on the file system's folder, and list and read nothing else.
	for _, d := range []string{st.data, s.dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	if s.tokenFile, err = filepath.Abs(o.TokenFile); err != nil {
		return err
	}
	if s.operatorTokenFile, err = filepath.Abs(o.OperatorTokenFile); err != nil {
		return err
	}
	return nil
}

// startStoreStandins starts DynamoDB Local and fauxqs, unless their
// endpoints are set.
func (st *startup) startStoreStandins(ctx context.Context) error {
	awsEnv, stop, err := standins(ctx, st.s.cfg.StandinsScript, st.s.cfg.Bin)
	if err != nil {
		return err
	}
	st.awsEnv = awsEnv
	st.s.stopStandin = stop
	return nil
}

// startContainerNetwork starts the worker containers' network, when
// workers run as containers of the worker image.
func (st *startup) startContainerNetwork(ctx context.Context) error {
	s, o := st.s, &st.s.cfg.Options
	var err error
	if s.ctrs, err = startContainers(ctx, s.cfg.WorkerImage, s.dir, st.data, o.Logger); err != nil {
		return err
	}
	if s.ctrs == nil {
		o.Logger.Warn(HostProgramsNotice)
	}
	return nil
}

// listenForAPI opens the gateway's listener, whose address is the API's
// endpoint, and the one worker tasks reach the API on.
func (st *startup) listenForAPI(context.Context) error {
	s, o := st.s, &st.s.cfg.Options
	if n, err := connlimit.RaiseNoFile(); err != nil {
		o.Logger.Warn("could not raise the open-file limit", "limit", n, "err", err)
	}
	// The gateway's listener first: its address is the API's endpoint.
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	st.ln = ln
	s.endpoint = "http://" + localserver.LoopbackAddr(ln.Addr().String())
	st.gwSrv = &http.Server{}
	gateway.ServerLimits(st.gwSrv)
	s.servers = append(s.servers, st.gwSrv)
	// Worker tasks reach the API here: the same listener, or one on the
	// container network's host side.
	st.apiURL, st.apiLn = s.endpoint, ln
	if s.ctrs != nil {
		if st.apiLn, err = s.ctrs.listenClosed(); err != nil {
			return err
		}
		st.apiURL = "http://" + st.apiLn.Addr().String()
	}
	return nil
}

// makeCA makes the stack's certificate authority: the stand-ins and the
// IAM gates in front of them serve over TLS, so that aws:SecureTransport
// means what it means on AWS.
func (st *startup) makeCA(context.Context) error {
	serverTLS, caPEM, err := iamgate.NewLocalCA(st.s.ctrs.caIPs()...)
	if err != nil {
		return err
	}
	st.serverTLS, st.caPEM = serverTLS, caPEM
	st.caFile = filepath.Join(st.s.dir, "ca.pem")
	return os.WriteFile(st.caFile, caPEM, 0o644)
}

// startSecretsAndSTS starts the Secrets Manager and STS stand-ins.
func (st *startup) startSecretsAndSTS(context.Context) error {
	s, o := st.s, &st.s.cfg.Options
	var err error
	if s.sm, err = smstandin.New(smstandin.WithRegion(localRegion), smstandin.WithAccount(localAccount),
		smstandin.WithLogger(o.Logger)); err != nil {
		return err
	}
	s.principals = newPrincipals()
	// STS issues sessions of the template's roles (the worker API grants
	// each harness one, scoped to its queue); every gate knows them.
	s.sts, err = stsstandin.New(func(arn string) (stsstandin.Role, bool) {
		if s.model == nil {
			return stsstandin.Role{}, false
		}
		r, ok := s.model.roles[arn]
		if !ok {
			return stsstandin.Role{}, false
		}
		return stsstandin.Role{ARN: r.Arn, Trust: r.Trust, MaxSessionDuration: r.MaxSession, Policies: r.Policies}, true
	}, stsstandin.WithAccount(localAccount), stsstandin.WithLogger(o.Logger))
	if err != nil {
		return err
	}
	// S3, for the template's buckets (deploy.go makes them): as strict as
	// the snapshot bucket's policy, which denies a put without SSE-S3.
	s.s3, err = s3standin.New(nil, s3standin.WithEncryption("AES256"))
	return err
}

// reserveGateAddresses opens the IAM gates' listeners before anything uses
// their addresses: the worker image names the SQS gate (its harness waits
// on its own queue).
func (st *startup) reserveGateAddresses(context.Context) error {
	st.gateLns = map[iamgate.Service]net.Listener{}
	gateURLs := map[iamgate.Service]string{}
	for _, svc := range iamgate.Services {
		listen := st.s.ctrs.listenClosed
		if svc == iamgate.S3 {
			// A worker task reaches S3 itself, as on AWS through the VPC's
			// gateway endpoint (the harness keeps its worktree's
			// snapshots there), not through the egress service.
			listen = st.s.ctrs.listen
		}
		ln, err := listen()
		if err != nil {
			return err
		}
		st.gateLns[svc], gateURLs[svc] = ln, "https://"+ln.Addr().String()
	}
	st.s.gateURLs = gateURLs
	return nil
}

// startECSStandin starts the ECS stand-in with the template's file
// systems, running worker tasks as containers or host programs.
func (st *startup) startECSStandin(context.Context) error {
	s, o, cfg, tpl := st.s, &st.s.cfg.Options, &st.s.cfg, st.tpl
	principals, caPEM := s.principals, st.caPEM
	fileSystems, err := accessPoints(tpl)
	if err != nil {
		return err
	}
	ctrOpts, err := s.ctrs.ecsOptions(s, st.serverTLS)
	if err != nil {
		return err
	}
	fileSystems = append(fileSystems, ctrOpts...)
	for _, id := range tpl.OfType("AWS::EFS::FileSystem") {
		dir := filepath.Join(s.dir, "efs", efsID(id))
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
			return err
		}
		fileSystems = append(fileSystems, ecsstandin.WithFileSystem(efsID(id), dir))
	}
	s.ecs, err = ecsstandin.New(append(append(fileSystems,
		ecsstandin.WithDir(filepath.Join(s.dir, "ecs")),
		ecsstandin.WithEntrypoint(mustAbs(cfg.Bin.ECS)),
		ecsstandin.WithGrace(cfg.WorkerGrace),
		ecsstandin.WithLogger(o.Logger),
		ecsstandin.WithRegion(localRegion), ecsstandin.WithAccount(localAccount),
		ecsstandin.WithImageFunc(isWorkerImage, s.workerImage()),
		ecsstandin.WithSink(s.deliverEvent),
		ecsstandin.WithSecrets(func(ctx context.Context, executionRole string) (ecsstandin.SecretsGetter, error) {
			p, ok := principals.role(executionRole)
			if !ok {
				return nil, fmt.Errorf("the execution role %s is not a role of the template", executionRole)
			}
			return secretsmanager.New(s.clientOptions(p, caPEM), func(o *secretsmanager.Options) {
				o.BaseEndpoint = aws.String(s.GateURL(iamgate.SecretsManager))
			}), nil
		}),
		ecsstandin.WithTaskCredentials(func(taskRole string) (aws.Credentials, error) {
			p, ok := principals.role(taskRole)
			if !ok {
				return aws.Credentials{}, fmt.Errorf("the task role %s is not a role of the template", taskRole)
			}
			return aws.Credentials{AccessKeyID: p.AccessKeyID, SecretAccessKey: p.SecretAccessKey,
				SessionToken: p.SessionToken, CanExpire: true, Expires: time.Now().Add(6 * time.Hour)}, nil
		}),
	), cfg.ECS...)...)
	if err != nil {
		return fmt.Errorf("ECS stand-in: %w", err)
	}
	return nil
}

// startGates serves an IAM gate in front of each AWS endpoint, on the
// listeners reserveGateAddresses opened.
func (st *startup) startGates(context.Context) error {
	s, o := st.s, &st.s.cfg.Options
	allPrincipals := iamgate.Chain(s.principals, s.sts)
	ddbUp, err := iamgate.Proxy(st.awsEnv["AWS_ENDPOINT_URL_DYNAMODB"])
	if err != nil {
		return err
	}
	// fauxqs as AWS's SQS behaves where fauxqs is kinder: a deleted name
	// refused for 60 s, short polls that miss, expired receipt handles
	// (docs/aws-local.md).
	s.harshSQS = awsfault.NewHarshSQS(nil, 1)
	sqsUp, err := iamgate.ProxyVia(st.awsEnv["AWS_ENDPOINT_URL_SQS"], s.harshSQS)
	if err != nil {
		return err
	}
	taskDefs := func(ref string) (iamgate.TaskDefinition, bool) { return s.taskDefinition(ref) }
	for svc, up := range map[iamgate.Service]http.Handler{
		iamgate.DynamoDB: ddbUp, iamgate.SQS: sqsUp, iamgate.SecretsManager: s.sm, iamgate.ECS: s.ecs, iamgate.STS: s.sts,
		iamgate.S3: s.s3,
	} {
		g, err := iamgate.New(svc, up, allPrincipals, iamgate.WithRegion(localRegion), iamgate.WithAccount(localAccount),
			iamgate.WithLogger(o.Logger), iamgate.WithSecretResolver(s.sm.Resolve), iamgate.WithTaskDefinitions(taskDefs),
			iamgate.WithUsage(s.metrics.call))
		if err != nil {
			return err
		}
		s.gates[svc] = g
		s.serveTLS(st.gateLns[svc], g, st.serverTLS)
	}
	return nil
}

// startGitForge serves the house repository by the git server that
// requires the git credential, as a forge would.
func (st *startup) startGitForge(ctx context.Context) error {
	s, o := st.s, &st.s.cfg.Options
	var err error
	if s.repo, err = githost.InitBare(ctx, filepath.Join(st.data, "repository.git")); err != nil {
		return fmt.Errorf("repository: %w", err)
	}
	if err := os.Chmod(s.repo, 0o700); err != nil { // the forge's storage: the git server's alone
		return fmt.Errorf("repository: %w", err)
	}
	gitLn, err := s.ctrs.listenClosed()
	if err != nil {
		return err
	}
	st.gitLn = gitLn
	gitHandler := &gitServer{stack: s}
	// No body deadline: a push may be large; the header and idle bounds
	// stand.
	gitSrv := &http.Server{Handler: gitHandler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		MaxHeaderBytes: 64 << 10}
	s.servers = append(s.servers, gitSrv)
	// Over TLS, as a forge is, when workers are containers: the harness's
	// push gate takes an http upstream only on loopback, which a
	// container's is not. The bound counts the connections under TLS.
	var gitL net.Listener = gitLn
	if s.ctrs != nil {
		gitL = tls.NewListener(gitLn, st.serverTLS)
	}
	gitLim := connlimit.Wrap(gitL, connlimit.Limits{}, o.Logger)
	gitLim.Install(gitSrv)
	go gitSrv.Serve(gitLim)
	return nil
}

// prepareDeployment sets up the deployment, which creates every resource
// through the stand-ins' own APIs with the deployment's
// (CloudFormation's) rights, not through the gates, and the URLs it
// rewrites: the template's repository to the git server, the worker
// services' origins to where they are served.
func (st *startup) prepareDeployment(context.Context) error {
	s, cfg, tpl, awsEnv := st.s, &st.s.cfg, st.tpl, st.awsEnv
	stackName := strings.TrimSuffix(filepath.Base(cfg.Template), ".template.json")
	d := newDeployment(tpl, stackName, st.apiURL)
	st.d = d
	d.salt = st.data
	admin := credentials.NewStaticCredentialsProvider("cloudformation", "cloudformation", "")
	d.ddb = dynamodb.New(dynamodb.Options{Region: localRegion, Credentials: admin,
		BaseEndpoint: aws.String(awsEnv["AWS_ENDPOINT_URL_DYNAMODB"]), DisableValidateResponseChecksum: true})
	d.sqs = sqs.New(sqs.Options{Region: localRegion, Credentials: admin, BaseEndpoint: aws.String(awsEnv["AWS_ENDPOINT_URL_SQS"])})
	s.admin = secretsmanager.New(secretsmanager.Options{Region: localRegion, Credentials: admin,
		BaseEndpoint: aws.String("http://secretsmanager.local"), HTTPClient: handlerClient(s.sm)})
	d.secrets = s.admin
	d.ecs = ecs.New(ecs.Options{Region: localRegion, Credentials: admin, BaseEndpoint: aws.String("http://ecs.local"),
		HTTPClient: handlerClient(s.ecs)})
	d.s3 = s.s3
	repoURL, err := templateRepository(tpl)
	if err != nil {
		return err
	}
	st.repoURL = repoURL
	s.gitURL = localRepositoryURL(repoURL, st.gitLn.Addr().String())
	if s.ctrs != nil {
		s.gitURL = "https://" + strings.TrimPrefix(s.gitURL, "http://")
	}
	d.substitute = map[string]string{repoURL: s.gitURL}
	if d.origins, err = s.serveWorkerServices(st.serverTLS); err != nil {
		return err
	}
	return nil
}

// reserveEgress opens the listener of the worker task's way out, when the
// template gives it one: the egress service, where worker containers
// reach it.
func (st *startup) reserveEgress(context.Context) error {
	s, o, d := st.s, &st.s.cfg.Options, st.d
	upstream := workerEgressUpstream(d)
	switch {
	case upstream != "" && s.ctrs != nil:
		egressLn, err := s.ctrs.listen()
		if err != nil {
			return err
		}
		st.egressLn = egressLn
		d.substitute[upstream] = "http://" + egressLn.Addr().String()
	case upstream != "":
		// A host program's network is this machine's, whatever the
		// template says: its harness calls the stack directly.
		o.Logger.Warn("aws-local: worker tasks run as host programs, whose network nothing confines: their harness calls the stack directly, not through the egress service")
		d.substitute[upstream] = ""
	}
	return nil
}

// deployResources creates every resource of the template in order, reads
// the deployed model (roles, functions, routes) and checks the options
// against it.
func (st *startup) deployResources(ctx context.Context) error {
	s, d, tpl := st.s, st.d, st.tpl
	if err := d.deploy(ctx); err != nil {
		return err
	}
	s.deploy = d
	var err error
	if s.model, err = readModel(d, filepath.Dir(s.cfg.Template)); err != nil {
		return err
	}
	for _, r := range s.model.roles {
		s.principals.add(r)
	}
	for id := range s.model.functions {
		kind := lambdaapp.Function(functionKind(tpl, id))
		if _, ok := Functions[kind]; !ok {
			return fmt.Errorf("function %s: its construct path names no galley function (want one of %v)", id, lambdaapp.Functions)
		}
		s.kinds[kind] = id
	}
	if err := s.checkOptions(); err != nil {
		return err
	}
	return s.checkWorkerImages()
}

// startEgressService starts the egress service on the listener
// reserveEgress opened, if it opened one.
func (st *startup) startEgressService(ctx context.Context) error {
	s := st.s
	if st.egressLn == nil {
		return nil
	}
	// The harness's destinations, named as on AWS, are where this
	// machine serves them.
	hosts := map[string]string{
		"sqs." + localRegion + ".amazonaws.com": hostOf(s.gateURLs[iamgate.SQS]),
	}
	if u, err := url.Parse(st.repoURL); err == nil {
		hosts[strings.ToLower(u.Hostname())] = hostOf(s.gitURL)
	}
	for from, to := range st.d.origins {
		if u, err := url.Parse(from); err == nil {
			hosts[strings.ToLower(u.Hostname())] = hostOf(to)
		}
	}
	var err error
	s.egress, err = s.startEgress(ctx, st.egressLn, hosts)
	return err
}

// seedSecrets seeds the operator's secrets (provider keys), then kitchn's
// and the operator's tokens: kept across restarts in their token files, as
// an operator reads them once after a deploy.
func (st *startup) seedSecrets(ctx context.Context) error {
	s := st.s
	specs, err := smstandin.ParseSeedSpecs(s.cfg.Secrets)
	if err != nil {
		return err
	}
	if err := s.sm.Seed(specs...); err != nil {
		return err
	}
	if err := s.syncToken(ctx); err != nil {
		return err
	}
	return s.syncOperatorToken(ctx)
}

// startFunctionsAndGateway puts each function, under the emulator with its
// role's session and the stack's endpoints, behind the gateway, and serves
// the gateway on the API's listeners.
func (st *startup) startFunctionsAndGateway(context.Context) error {
	invokers, err := st.functionPools()
	if err != nil {
		return err
	}
	return st.serveGateway(invokers)
}

// functionPools makes each function's pool of emulator instances; they
// start on their first request, as Lambda's do.
func (st *startup) functionPools() (map[string]gateway.Invoker, error) {
	s, tpl := st.s, st.tpl
	invokers := map[string]gateway.Invoker{}
	for id, f := range s.model.functions {
		p, _ := s.principals.role(f.Role)
		env := map[string]string{}
		for k, v := range f.Env {
			env[k] = v
		}
		for k, v := range map[string]string{
			"AWS_REGION": localRegion, "AWS_DEFAULT_REGION": localRegion,
			"AWS_ACCESS_KEY_ID": p.AccessKeyID, "AWS_SECRET_ACCESS_KEY": p.SecretAccessKey, "AWS_SESSION_TOKEN": p.SessionToken,
			"AWS_LAMBDA_FUNCTION_NAME": f.Name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(f.Memory),
			"AWS_LAMBDA_FUNCTION_VERSION": "$LATEST", "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/" + f.Name,
			"TZ": ":UTC", "AWS_CA_BUNDLE": st.caFile,
			"AWS_ENDPOINT_URL_DYNAMODB":        s.gateURLs[iamgate.DynamoDB],
			"AWS_ENDPOINT_URL_SQS":             s.gateURLs[iamgate.SQS],
			"AWS_ENDPOINT_URL_SECRETS_MANAGER": s.gateURLs[iamgate.SecretsManager],
			"AWS_ENDPOINT_URL_ECS":             s.gateURLs[iamgate.ECS],
			"AWS_ENDPOINT_URL_STS":             s.gateURLs[iamgate.STS],
			"AWS_ENDPOINT_URL_S3":              s.gateURLs[iamgate.S3],
		} {
			env[k] = v
		}
		if s.ctrs != nil {
			env["SSL_CERT_FILE"] = st.caFile // go-git to the forge over TLS
		}
		out, err := s.output(functionKind(tpl, id))
		if err != nil {
			return nil, err
		}
		out = s.metrics.capture(functionKind(tpl, id), out)
		kv := make([]string, 0, len(env))
		for k, v := range env {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		s.envs[id] = kv
		pool := gateway.NewPool(Functions[lambdaapp.Function(functionKind(tpl, id))].MaxInstances, s.spawner(f, kv, out))
		if f.Reserved != nil {
			// Lambda refuses an invoke beyond the reserved concurrency at
			// once (API Gateway answers 500), where the pool would queue.
			pool = gateway.NewReservedPool(*f.Reserved, s.spawner(f, kv, out))
		}
		s.mu.Lock()
		s.pools[id] = pool
		s.mu.Unlock()
		invokers[id] = pool
	}
	return invokers, nil
}

// serveGateway routes the template's routes, with its throttles, to the
// functions' invokers and serves them on the API's listeners.
func (st *startup) serveGateway(invokers map[string]gateway.Invoker) error {
	s, o := st.s, &st.s.cfg.Options
	var routes []gateway.Route
	for _, r := range s.model.routes {
		method, path, ok := strings.Cut(r.Key, " ")
		if !ok {
			return fmt.Errorf("route key %q: want METHOD /path", r.Key)
		}
		routes = append(routes, gateway.Route{Method: method, Path: path, Function: r.Function})
	}
	gwOpts := []gateway.Option{gateway.WithLogger(o.Logger)}
	for key, th := range s.model.throttles {
		gwOpts = append(gwOpts, gateway.WithThrottle(key, gateway.Throttle{RateLimit: th.Rate, BurstLimit: th.Burst}))
	}
	gw, err := gateway.New(routes, invokers, gwOpts...)
	if err != nil {
		return err
	}
	gwSrv := st.gwSrv
	gwSrv.Handler = gw
	s.gateway = gw
	// Every server here bounds its connections per peer (per uid on
	// loopback) and in all: a worker's agent cannot take the descriptors
	// kitchn's calls need.
	for _, l := range slices.Compact([]net.Listener{st.ln, st.apiLn}) {
		lim := connlimit.Wrap(l, o.Conns, o.Logger)
		lim.Install(gwSrv)
		go func() {
			if err := gwSrv.Serve(lim); err != nil && !errors.Is(err, http.ErrServerClosed) {
				o.Logger.Error("gateway", "err", err)
			}
		}()
	}
	return nil
}

// startSchedules runs the template's schedule rules at their rates.
func (st *startup) startSchedules(context.Context) error { return st.s.startSchedules() }
