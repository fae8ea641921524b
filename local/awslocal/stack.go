package awslocal

import (
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/gateway"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/s3standin"
	"github.com/galley-run/galley/local/smstandin"
	"github.com/galley-run/galley/local/stsstandin"
	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
)

// EnvBin names the folder of the stack's binaries when Config.Bin is not
// set (default: the folder of the running executable, bin/).
const EnvBin = "GALLEY_AWSLOCAL_BIN"

// Config is the stack's configuration. Everything the deployment itself
// sets comes from the template; Config says only where things are on this
// machine.
type Config struct {
	// Options are the local server's: Listen, Data, TokenFile and Logger
	// are used; House, Backend, Credential, DefaultAgent, Families,
	// AwaitCap and MaxWorkers come from the template, and a value set here
	// that differs from the template's is an error.
	localserver.Options

	// Template is the synthesized stack template (cdk.out/<stack>.template.json);
	// default: DefaultTemplate().
	Template string
	// Secrets seed secret values, as NAME=file:PATH or NAME=env:VARIABLE
	// (smstandin.ParseSeedSpec): the provider keys an operator fills in.
	Secrets []string

	// Bin locates the local binaries; default BinariesIn($GALLEY_AWSLOCAL_BIN,
	// or the folder of this executable).
	Bin Binaries
	// StandinsScript is scripts/standins.sh, which installs and starts
	// DynamoDB Local and fauxqs when AWS_ENDPOINT_URL_DYNAMODB and
	// AWS_ENDPOINT_URL_SQS are not set already.
	StandinsScript string
	// FunctionOutput, when set, receives every emulator's and function's
	// output; by default each function writes <data>/aws-local/logs/<fn>.log.
	FunctionOutput io.Writer
	// WorkerGrace is how long a stopped worker task gets before SIGKILL
	// (default 10 s).
	WorkerGrace time.Duration
	// ECS are more options of the ECS stand-in, after the stack's own: a
	// test's account limits (ecsstandin.WithVCPUQuota: a fresh account) or
	// clock.
	ECS []ecsstandin.Option
	// WorkerImage names the local container images the worker task
	// definitions' images run as (default $GALLEY_WORKER_IMAGE), one per
	// agent family, claude=<ref>,codex=<ref> (ParseWorkerImages; one ref
	// alone serves every family): each family's tasks then run as
	// containers of its image on a network of the stack's own
	// (containers.go). Empty: as host programs.
	WorkerImage string
	// ImageAgentCLIs runs the worker image's own Claude Code and Codex
	// CLIs in its containers instead of the stand-in CLIs mounted over
	// them. They call the provider the template's base URLs name
	// (anthropicBaseUrl, openaiBaseUrl): a WorkerServices entry, since a
	// worker container reaches nothing else. Needs a worker image.
	ImageAgentCLIs bool
	// WorkerServices are services outside AWS that the template names by
	// URL and worker tasks call (an LLM gateway or proxy, as
	// anthropicBaseUrl and openaiBaseUrl name one), by origin
	// ("https://llm-gateway.example"). Each handler is served where worker
	// tasks reach the stack (workerservices.go: over TLS with the stack's CA on the
	// container network, its port admitted through the network's
	// firewall), and every URL of the template with that origin is
	// rewritten to that address, as DNS would point it there.
	WorkerServices map[string]http.Handler
}

// Stack is a running aws-local galley.
type Stack struct {
	cfg       Config
	endpoint  string
	tokenFile string
	// operatorTokenFile holds the operator token (the operator routes).
	operatorTokenFile string
	dir               string // <data>/aws-local

	model  *model
	deploy *deployment
	kinds  map[lambdaapp.Function]string // galley's function → logical id
	gates  map[iamgate.Service]*iamgate.Gate
	// gateURLs are the IAM gates' endpoints, by service.
	gateURLs map[iamgate.Service]string
	// harshSQS stands between the SQS gate and fauxqs.
	harshSQS *awsfault.HarshSQS
	sm       *smstandin.Server
	ecs      *ecsstandin.Server
	sts      *stsstandin.Server
	// s3 holds the template's buckets (the worktree snapshots'), behind
	// the S3 gate.
	s3 *s3standin.Server
	// principals are the sessions of the template's roles.
	principals *principals
	admin      *secretsmanager.Client
	repo       string // the local bare repository
	gitURL     string // where the git server serves it

	servers []*http.Server
	pools   map[string]*gateway.Pool // by function logical id
	gateway *gateway.Gateway
	envs    map[string][]string
	metrics *metricSink

	mu      sync.Mutex
	procs   []*gateway.EmulatorProcess
	closed  bool
	stopped chan struct{}

	logs        []*os.File
	stopStandin func()
	ctrs        *workerContainers // nil: workers run as host programs
	egress      *egressService    // nil: no egress service (host programs, or none in the template)
}
