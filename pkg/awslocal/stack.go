package awslocal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/gateway"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// EnvBin names the folder of the stack's binaries when Config.Bin is not
// set (default: the folder of the running executable, bin/).
const EnvBin = "GALLEY_AWSLOCAL_BIN"

// Config is the stack's configuration: the local server's options (the
// same flags), and where the stack's own parts are.
type Config struct {
	localserver.Options

	// Bin locates the binaries; default BinariesIn($GALLEY_AWSLOCAL_BIN, or
	// the folder of this executable).
	Bin Binaries
	// StandinsScript is scripts/standins.sh, which installs and starts
	// DynamoDB Local and fauxqs when AWS_ENDPOINT_URL_DYNAMODB and
	// AWS_ENDPOINT_URL_SQS are not set already (a LocalStack, say); default
	// <Bin's parent>/scripts/standins.sh, else ./scripts/standins.sh.
	StandinsScript string
	// Table and QueuePrefix name the deployment's table and doorbell
	// queues; default galley-<house>.
	Table       string
	QueuePrefix string
	// FunctionOutput, when set, receives every emulator's and function's
	// output; by default each function writes <data>/aws-local/logs/<fn>.log.
	FunctionOutput io.Writer
	// WorkerGrace is how long a stopped worker task gets before SIGKILL
	// (default 10 s).
	WorkerGrace time.Duration
}

// Stack is a running aws-local galley.
type Stack struct {
	cfg       Config
	endpoint  string
	tokenFile string

	gatewaySrv *http.Server
	ecsSrv     *http.Server
	ecs        *ecsstandin.Server
	pools      map[lambdaapp.Function]*gateway.Pool
	envs       map[lambdaapp.Function]map[string]string

	mu     sync.Mutex
	procs  []*gateway.EmulatorProcess
	closed bool

	logs        []*os.File
	stopStandin func()
}

// Start starts the whole stack: DynamoDB Local and fauxqs (unless their
// endpoints are set), the table, the ECS stand-in, the local gateway on
// cfg.Listen with the five functions under the emulator behind it. It
// returns once the gateway listens; functions start on their first
// request, as Lambda's do.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	o := &cfg.Options
	o.Defaults()
	if cfg.Bin == (Binaries{}) {
		dir := os.Getenv(EnvBin)
		if dir == "" {
			exe, err := os.Executable()
			if err != nil {
				return nil, err
			}
			dir = filepath.Dir(exe)
		}
		cfg.Bin = BinariesIn(dir)
	}
	if err := cfg.Bin.Check(); err != nil {
		return nil, err
	}
	if o.WorkerBin != "" {
		cfg.Bin.Harness = o.WorkerBin
	}
	if cfg.Table == "" {
		cfg.Table = "galley-" + o.House
	}
	if cfg.QueuePrefix == "" {
		cfg.QueuePrefix = "galley-" + o.House
	}
	if cfg.WorkerGrace <= 0 {
		cfg.WorkerGrace = 10 * time.Second
	}
	s := &Stack{cfg: cfg, pools: map[lambdaapp.Function]*gateway.Pool{}, envs: map[lambdaapp.Function]map[string]string{}}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()

	data, err := filepath.Abs(o.Data)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(data, "aws-local", "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if s.tokenFile, err = filepath.Abs(o.TokenFile); err != nil {
		return nil, err
	}
	if _, err := localserver.SecretFile(s.tokenFile, 32); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	workerSecret := filepath.Join(data, "worker-secret")
	if _, err := localserver.SecretFile(workerSecret, 32); err != nil {
		return nil, fmt.Errorf("worker secret: %w", err)
	}
	repo := o.Repository
	if repo == "" {
		if repo, err = githost.InitBare(ctx, filepath.Join(data, "repository.git")); err != nil {
			return nil, fmt.Errorf("repository: %w", err)
		}
	}
	repoPath, err := githost.LocalPath(repo)
	if err != nil {
		return nil, fmt.Errorf("repository: %w (the aws-local stack serves a local repository only)", err)
	}

	awsEnv, stop, err := standins(ctx, cfg.StandinsScript, cfg.Bin)
	if err != nil {
		return nil, err
	}
	s.stopStandin = stop
	if err := ensureTable(ctx, awsEnv, cfg.Table); err != nil {
		return nil, fmt.Errorf("table %s: %w", cfg.Table, err)
	}

	// The gateway's listener first: its address is the workers' endpoint.
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s.endpoint = "http://" + localserver.LoopbackAddr(ln.Addr().String())

	// The ECS stand-in, its events going to the reconciler.
	var taskEnv []ecsstandin.Option
	for _, k := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY"} {
		// On AWS the task reads provider keys from Secrets Manager; here
		// they are the task definition's environment when set.
		if v := os.Getenv(k); v != "" {
			taskEnv = append(taskEnv, ecsstandin.WithTaskEnv(k, v))
		}
	}
	s.ecs, err = ecsstandin.New(append(taskEnv,
		ecsstandin.WithDir(filepath.Join(data, "aws-local", "ecs")),
		ecsstandin.WithHarness(mustAbs(cfg.Bin.Harness)),
		ecsstandin.WithEntrypoint(mustAbs(cfg.Bin.ECS)),
		ecsstandin.WithGrace(cfg.WorkerGrace),
		ecsstandin.WithLogger(o.Logger),
		ecsstandin.WithSink(func(ctx context.Context, ev []byte) error {
			s.mu.Lock()
			p := s.pools[lambdaapp.Reconciler]
			s.mu.Unlock()
			if p == nil {
				return errors.New("the reconciler is not running")
			}
			_, err := p.Invoke(ctx, ev)
			return err
		}),
	)...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("ECS stand-in: %w", err)
	}
	ecsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.ecsSrv = &http.Server{Handler: s.ecs, ReadHeaderTimeout: 10 * time.Second}
	go s.ecsSrv.Serve(ecsLn)
	awsEnv["AWS_ENDPOINT_URL_ECS"] = "http://" + ecsLn.Addr().String()

	env := map[string]string{
		lambdaapp.EnvTable: cfg.Table, lambdaapp.EnvHouse: o.House, lambdaapp.EnvBackend: o.Backend,
		lambdaapp.EnvCredential: o.Credential, lambdaapp.EnvQueuePrefix: cfg.QueuePrefix,
		lambdaapp.EnvCluster: "galley-" + o.House, lambdaapp.EnvTaskDefinition: "galley-worker:1",
		lambdaapp.EnvSubnets: "subnet-local", lambdaapp.EnvSecurityGroup: "sg-local",
		lambdaapp.EnvWorkerContainer: ecsstandin.DefaultContainer, lambdaapp.EnvAssignPublicIP: "DISABLED",
		lambdaapp.EnvRepository: repoPath, lambdaapp.EnvWorkerEndpoint: s.endpoint,
		lambdaapp.EnvWorkspace: lambdaapp.DefaultWorkspace, lambdaapp.EnvDefaultAgent: o.DefaultAgent,
		lambdaapp.EnvAgentFamilies:        strings.Join(o.Families, ","),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
	}
	if o.AwaitCap > 0 {
		env[lambdaapp.EnvAwaitCapMs] = strconv.FormatInt(o.AwaitCap.Milliseconds(), 10)
	}
	if o.MaxWorkers > 0 {
		env[lambdaapp.EnvMaxWorkers] = strconv.Itoa(o.MaxWorkers)
	}
	for k, v := range awsEnv {
		env[k] = v
	}
	invokers := map[string]gateway.Invoker{}
	for _, fn := range lambdaapp.Functions {
		fenv := map[string]string{}
		for k, v := range env {
			fenv[k] = v
		}
		switch fn {
		case lambdaapp.Effects, lambdaapp.Reads, lambdaapp.Mailbox:
			fenv[lambdaapp.EnvTokenFile] = s.tokenFile
		}
		switch fn {
		case lambdaapp.Effects, lambdaapp.WorkerAPI:
			fenv[lambdaapp.EnvWorkerSecretFile] = workerSecret
		}
		out, err := s.output(data, fn)
		if err != nil {
			ln.Close()
			return nil, err
		}
		p := gateway.NewPool(Functions[fn].MaxInstances, s.spawner(fn, fenv, out))
		s.mu.Lock()
		s.pools[fn] = p
		s.envs[fn] = fenv
		s.mu.Unlock()
		invokers[string(fn)] = p
	}
	gw, err := gateway.New(Routes, invokers, gateway.WithLogger(o.Logger))
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.gatewaySrv = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second,
		MaxHeaderBytes: 64 << 10}
	go func() {
		if err := s.gatewaySrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Logger.Error("gateway", "err", err)
		}
	}()
	ok = true
	return s, nil
}

// spawner starts fn's emulators with its environment.
func (s *Stack) spawner(fn lambdaapp.Function, env map[string]string, out io.Writer) func(context.Context) (gateway.Invoker, error) {
	kv := make([]string, 0, len(env))
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	return func(ctx context.Context) (gateway.Invoker, error) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errors.New("the stack is shutting down")
		}
		p, err := gateway.StartEmulator(context.WithoutCancel(ctx), gateway.EmulatorConfig{
			RIE: s.cfg.Bin.RIE, Bootstrap: s.cfg.Bin.Bootstrap(fn), Env: kv,
			Timeout: Functions[fn].Timeout, Name: "galley-" + string(fn), Output: out,
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
	s.mu.Lock()
	env := s.envs[fn]
	s.mu.Unlock()
	if env == nil {
		return nil, fmt.Errorf("no function %q", fn)
	}
	inv, err := s.spawner(fn, env, out)(ctx)
	if err != nil {
		return nil, err
	}
	return inv.(*gateway.EmulatorProcess), nil
}

func (s *Stack) output(data string, fn lambdaapp.Function) (io.Writer, error) {
	if s.cfg.FunctionOutput != nil {
		return s.cfg.FunctionOutput, nil
	}
	f, err := os.OpenFile(filepath.Join(data, "aws-local", "logs", string(fn)+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	s.logs = append(s.logs, f)
	return f, nil
}

// Endpoint is the gateway's URL, the endpoint of the kitchn binding.
func (s *Stack) Endpoint() string { return s.endpoint }

// TokenFile is where the bearer token lives.
func (s *Stack) TokenFile() string { return s.tokenFile }

// ECS is the ECS stand-in (tests inspect its tasks and requests).
func (s *Stack) ECS() *ecsstandin.Server { return s.ecs }

// Instances reports how many emulators each function runs.
func (s *Stack) Instances() map[lambdaapp.Function]int {
	m := map[lambdaapp.Function]int{}
	for fn, p := range s.pools {
		m[fn] = p.Size()
	}
	return m
}

// Binding is the kitchn backend binding for the stack.
func (s *Stack) Binding() string {
	return localserver.Binding(s.cfg.Backend, s.cfg.Credential, s.endpoint)
}

// Close stops everything, in the order that lets the last events land: the
// gateway stops taking requests, the ECS stand-in stops the worker tasks
// and delivers their final state changes to the reconciler, then the
// functions and the stand-ins stop. Stand-ins that were running before
// Start keep running.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.gatewaySrv != nil {
		_ = s.gatewaySrv.Shutdown(ctx)
	}
	if s.ecs != nil {
		_ = s.ecs.Close()
	}
	if s.ecsSrv != nil {
		_ = s.ecsSrv.Shutdown(ctx)
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
// with the local server's options, prints what `galley serve` prints, and
// stops everything when ctx ends (SIGTERM).
func ServeAWSLocal(ctx context.Context, o localserver.Options, stdout, stderr io.Writer) error {
	o.Defaults()
	fmt.Fprintln(stderr, "galley: starting the aws-local stack (DynamoDB Local, fauxqs, the ECS stand-in, five functions under the Lambda emulator)")
	s, err := Start(ctx, Config{Options: o})
	if err != nil {
		return err
	}
	localserver.PrintReady(stdout, o, s.Endpoint(), s.TokenFile())
	<-ctx.Done()
	fmt.Fprintln(stdout, "galley: shutting down")
	return s.Close()
}

// standins returns the AWS variables that point the functions at DynamoDB
// and SQS stand-ins: those of this process when both endpoints are set (a
// LocalStack, or stand-ins started by make test), else those of
// scripts/standins.sh, which it starts; stop stops them again only if
// they were not running before.
func standins(ctx context.Context, script string, bin Binaries) (map[string]string, func(), error) {
	env := map[string]string{
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "standin", "AWS_SECRET_ACCESS_KEY": "standin",
	}
	ddb, sqs := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), os.Getenv("AWS_ENDPOINT_URL_SQS")
	if ddb != "" && sqs != "" {
		env["AWS_ENDPOINT_URL_DYNAMODB"], env["AWS_ENDPOINT_URL_SQS"] = ddb, sqs
		for _, k := range []string{"AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
			"AWS_ENDPOINT_URL_SECRETS_MANAGER"} {
			if v := os.Getenv(k); v != "" {
				env[k] = v
			}
		}
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
		if k, v, found := strings.Cut(line, "="); ok && found {
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

// ensureTable makes the deployment's table (the CDK app does on AWS).
func ensureTable(ctx context.Context, env map[string]string, table string) error {
	c := dynamodb.New(dynamodb.Options{
		Region:                          env["AWS_REGION"],
		BaseEndpoint:                    aws.String(env["AWS_ENDPOINT_URL_DYNAMODB"]),
		Credentials:                     credentials.NewStaticCredentialsProvider(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_SESSION_TOKEN"]),
		DisableValidateResponseChecksum: true,
	})
	return dynamostore.New(c, table).EnsureTable(ctx)
}

func mustAbs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
