package localserver

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// Flags are `galley serve`'s command line: the server's Options and where
// its records and its doorbell live. The development binary (galley-dev
// serve) defines the same flags and adds its own to the set.
type Flags struct {
	Options
	families                            string
	store, doorbell, table, queuePrefix string
}

// AddFlags defines galley serve's flags on fs; parsing fs fills the Flags
// returned.
func AddFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	o := &f.Options
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "address to serve on")
	fs.StringVar(&o.House, "house", "local", "the kitchn house this server serves")
	fs.StringVar(&o.Backend, "backend", contract.DefaultBackend, "the backend namespace of the binding")
	fs.StringVar(&o.Credential, "credential", contract.DefaultCredential, "the binding's credential name")
	fs.StringVar(&o.Data, "data", ".galley", "directory for all state")
	fs.StringVar(&o.TokenFile, "token-file", "", "bearer token file, created (mode 600) when absent (default <data>/private/token)")
	fs.StringVar(&o.OperatorTokenFile, "operator-token-file", "", "operator token file (the operator API and console), created (mode 600) when absent (default <data>/private/operator-token)")
	fs.StringVar(&o.Repository, "repository", "", "git repository branches are made in (default: a bare repository under <data>)")
	fs.StringVar(&o.DefaultAgent, "default-agent", "script", "agent for launches that name none: script, claude or codex")
	fs.StringVar(&f.families, "families", "", "agent families to declare, comma-separated (default: those whose CLI is found)")
	fs.StringVar(&o.AgentBinDir, "agent-bin-dir", "", "directory searched first for the claude and codex CLIs")
	fs.StringVar(&o.AnthropicBaseURL, "anthropic-base-url", "", "claude workers' Anthropic API base URL (an LLM gateway or proxy): https, or http to loopback (default: the public API)")
	fs.StringVar(&o.OpenAIBaseURL, "openai-base-url", "", "codex workers' OpenAI API base URL, e.g. https://gw.example/v1: https, or http to loopback (default: the public API)")
	fs.StringVar(&o.EgressAllow, "egress-allow", "", "hosts every agent may reach through its egress proxy, comma-separated names or *.domain (default: none)")
	fs.StringVar(&o.EgressResolver, "egress-resolver", "", "DNS server (host:port) the agents' egress proxies resolve names with (default: the system's)")
	fs.Int64Var(&o.ModelCapTokens, "model-cap-tokens", 0, "most tokens each worker's model calls may use, as the provider counts them (0: no cap)")
	fs.StringVar(&o.ModelCapUSD, "model-cap-usd", "", "most each worker's model calls may cost, in US dollars at galley's price table, e.g. 5 or 2.50 (default: no cap)")
	fs.StringVar(&o.WorkerBin, "worker-bin", "", "the galley-worker binary (default: beside galley, or on PATH)")
	fs.DurationVar(&o.AwaitCap, "await-cap", contract.AwaitCap, "longest hold of deliveries/await")
	fs.IntVar(&o.MaxWorkers, "max-workers", 0, "most unsettled workers; 0 for no bound")
	fs.IntVar(&o.Conns.PerPeer, "max-conns-per-peer", 0, "most connections held from one address, on loopback from one uid (0: 1024)")
	fs.IntVar(&o.Conns.Total, "max-conns", 0, "most connections held in all (0: 4096, at most half the open-file limit)")
	fs.Int64Var(&o.PushLimit, "push-limit", harness.DefaultPushLimit, "bytes of one push of a worker's")
	fs.Int64Var(&o.PushBudget, "push-budget", harness.DefaultPushBudget, "bytes of all of a worker's pushes")
	fs.DurationVar(&o.ParkAfter, "park-after", 0, "park a worker whose agent has waited on its coordinator this long (at least 1s; 0: never): its process ends until a reply or message resumes it")
	fs.Int64Var(&o.WorkerLogLimit, "worker-log-limit", harness.DefaultLogLimit, "each worker's log budget in bytes (<data>/workers/<handle>/harness.log)")
	fs.StringVar(&f.store, "store", "bolt", "record store: bolt (embedded, under --data) or dynamodb (AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION, ...)")
	fs.StringVar(&f.doorbell, "doorbell", "local", "await doorbell: local (in-process) or sqs (AWS_ENDPOINT_URL_SQS, AWS_REGION, ...)")
	fs.StringVar(&f.table, "table", "", "DynamoDB table with --store dynamodb, created when missing (default galley-<house>)")
	fs.StringVar(&f.queuePrefix, "queue-prefix", "", "SQS queue name prefix with --doorbell sqs (default galley-<house>)")
	return f
}

// AWS is the DynamoDB table of --store dynamodb and the SQS queue prefix
// of --doorbell sqs (each galley-<house> by default), each empty when the
// flags ask for the embedded store or the in-process doorbell.
func (f *Flags) AWS() (table, queuePrefix string, err error) {
	house := f.House
	if house == "" {
		house = "local"
	}
	switch f.store {
	case "bolt":
	case "dynamodb":
		table = f.table
		if table == "" {
			table = contract.ResourcePrefix(house)
		}
	default:
		return "", "", fmt.Errorf("--store must be bolt or dynamodb")
	}
	switch f.doorbell {
	case "local":
	case "sqs":
		queuePrefix = f.queuePrefix
		if queuePrefix == "" {
			queuePrefix = contract.ResourcePrefix(house)
		}
	default:
		return "", "", fmt.Errorf("--doorbell must be local or sqs")
	}
	return table, queuePrefix, nil
}

// An OpenOption changes how Open opens the AWS store and doorbell.
type OpenOption func(*openers)

type openers struct {
	dynamo func(ctx context.Context, table string) (store.Store, error)
	sqs    func(ctx context.Context, prefix string) (*sqsbell.Bell, error)
}

// WithDynamoDB opens --store dynamodb's table with open, instead of with a
// client from the AWS SDK's standard variables (dynamostore.Open).
func WithDynamoDB(open func(ctx context.Context, table string) (store.Store, error)) OpenOption {
	return func(o *openers) { o.dynamo = open }
}

// WithSQS opens --doorbell sqs's doorbell with open, instead of with a
// client from the AWS SDK's standard variables (sqsbell.Open).
func WithSQS(open func(ctx context.Context, prefix string) (*sqsbell.Bell, error)) OpenOption {
	return func(o *openers) { o.sqs = open }
}

// Open checks the flags and opens the store and the doorbell they name:
// the Options to Start. The SQS doorbell's queues of runs nobody waits on
// any more are removed after a day, swept every hour until ctx ends.
func (f *Flags) Open(ctx context.Context, opts ...OpenOption) (Options, error) {
	o := f.Options
	switch o.DefaultAgent {
	case "script", "claude", "codex":
	default:
		return o, fmt.Errorf("--default-agent must be script, claude or codex")
	}
	if f.families != "" {
		o.Families = strings.Split(f.families, ",")
	}
	table, prefix, err := f.AWS()
	if err != nil {
		return o, err
	}
	open := openers{
		dynamo: func(ctx context.Context, table string) (store.Store, error) { return dynamostore.Open(ctx, table) },
		sqs:    func(ctx context.Context, prefix string) (*sqsbell.Bell, error) { return sqsbell.Open(ctx, prefix) },
	}
	for _, opt := range opts {
		opt(&open)
	}
	if table != "" {
		if o.Store, err = open.dynamo(ctx, table); err != nil {
			return o, fmt.Errorf("dynamodb store (table %s): %w", table, err)
		}
	}
	if prefix != "" {
		bell, err := open.sqs(ctx, prefix)
		if err != nil {
			if o.Store != nil {
				_ = o.Store.Close()
			}
			return o, fmt.Errorf("sqs doorbell (prefix %s): %w", prefix, err)
		}
		o.Doorbell = bell
		go bell.SweepEvery(ctx, time.Hour, 24*time.Hour, slog.Default())
	}
	return o, nil
}

// serverGCPercent is the garbage collector's target for the server when
// GOGC is not set: its live heap is a few MiB and every request allocates a
// little, so a fivefold heap (tens of MiB) buys back the CPU a collection
// per few thousand requests costs (docs/BENCHMARKS.md).
const serverGCPercent = 400

// ShutdownGrace is how long Serve gives the calls in progress at shutdown
// to finish (held long polls answer at once: Shutdown).
const ShutdownGrace = 30 * time.Second

// Serve is `galley serve` once its flags are read: it starts the server
// o, tells stdout where it serves (PrintReady), serves until ctx ends and
// then shuts the server down (Shutdown, within ShutdownGrace).
func Serve(ctx context.Context, o Options, stdout io.Writer) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
	srv, err := Start(ctx, o)
	if err != nil {
		return err
	}
	o.OperatorTokenFile = srv.OperatorTokenFile()
	PrintReady(stdout, o, srv.Endpoint, srv.TokenFile())
	<-ctx.Done()
	fmt.Fprintln(stdout, "galley: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
