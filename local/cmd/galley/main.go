// Command galley runs galley on one machine and checks deployments.
//
//	galley serve        the local server, ready for a kitchn binding
//	galley conformance  kitchn's checks against any galley endpoint
//	galley stop-workers a deployment's worker tasks stopped, before teardown
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/localserver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "conformance":
		return runConformance(ctx, args[1:], stdout, stderr)
	case "stop-workers":
		return stopWorkers(ctx, args[1:], stdout, stderr)
	case "workers", "events", "cancel", "revoke":
		return runOperator(ctx, args[0], args[1:], stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "galley: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: galley <command> [flags]

commands:
  serve        run galley on this machine (galley serve -h for flags)
  conformance  run kitchn's conformance checks against an endpoint
  stop-workers stop a deployment's worker tasks and wait (make destroy runs it)
  workers      list the workers (the operator API; docs/operations.md)
  events       one worker's events: galley events HANDLE [--follow] [--after N]
  cancel       cancel a worker: galley cancel HANDLE
  revoke       revoke a worker's credential: galley revoke HANDLE
`)
}

// awsBackends opens the DynamoDB store and the SQS doorbell when asked,
// from the AWS SDK's standard variables, their clients injecting the
// faults of faultSpec when one is given (testing only).
func awsBackends(ctx context.Context, o *localserver.Options, storeKind, bellKind, table, prefix, faultSpec string) error {
	if faultSpec != "" {
		if storeKind != "dynamodb" && bellKind != "sqs" {
			return fmt.Errorf("--inject-aws-faults needs --store dynamodb or --doorbell sqs")
		}
		f, err := localserver.ParseAWSFaults(faultSpec)
		if err != nil {
			return fmt.Errorf("--inject-aws-faults: %w", err)
		}
		o.AWSFaults = f
	}
	house := o.House
	if house == "" {
		house = "local"
	}
	switch storeKind {
	case "bolt":
	case "dynamodb":
		if table == "" {
			table = "galley-" + house
		}
		st, err := localserver.OpenDynamoStore(ctx, table, o.AWSFaults)
		if err != nil {
			return fmt.Errorf("dynamodb store (table %s): %w", table, err)
		}
		o.Store = st
	default:
		return fmt.Errorf("--store must be bolt or dynamodb")
	}
	switch bellKind {
	case "local":
	case "sqs":
		if prefix == "" {
			prefix = "galley-" + house
		}
		bell, err := localserver.OpenSQSBell(ctx, prefix, o.AWSFaults)
		if err != nil {
			return fmt.Errorf("sqs doorbell (prefix %s): %w", prefix, err)
		}
		o.Doorbell = bell
		// Queues of runs nobody waits on any more are removed after a day.
		go bell.SweepEvery(ctx, time.Hour, 24*time.Hour, slog.Default())
	default:
		return fmt.Errorf("--doorbell must be local or sqs")
	}
	return nil
}

// serverGCPercent is the garbage collector's target for the server when
// GOGC is not set: its live heap is a few MiB and every request allocates a
// little, so a fivefold heap (tens of MiB) buys back the CPU a collection
// per few thousand requests costs (docs/BENCHMARKS.md).
const serverGCPercent = 400

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
	fs := flag.NewFlagSet("galley serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o localserver.Options
	var families string
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "address to serve on")
	fs.StringVar(&o.House, "house", "local", "the kitchn house this server serves")
	fs.StringVar(&o.Backend, "backend", "galley", "the backend namespace of the binding")
	fs.StringVar(&o.Credential, "credential", "galley-token", "the binding's credential name")
	fs.StringVar(&o.Data, "data", ".galley", "directory for all state")
	fs.StringVar(&o.TokenFile, "token-file", "", "bearer token file, created (mode 600) when absent (default <data>/private/token)")
	fs.StringVar(&o.OperatorTokenFile, "operator-token-file", "", "operator token file (the operator API and console), created (mode 600) when absent (default <data>/private/operator-token)")
	fs.StringVar(&o.Repository, "repository", "", "git repository branches are made in (default: a bare repository under <data>)")
	fs.StringVar(&o.DefaultAgent, "default-agent", "script", "agent for launches that name none: script, claude or codex")
	fs.StringVar(&families, "families", "", "agent families to declare, comma-separated (default: those whose CLI is found)")
	fs.StringVar(&o.AgentBinDir, "agent-bin-dir", "", "directory searched first for the claude and codex CLIs")
	fs.StringVar(&o.AnthropicBaseURL, "anthropic-base-url", "", "claude workers' Anthropic API base URL (an LLM gateway or proxy): https, or http to loopback (default: the public API)")
	fs.StringVar(&o.OpenAIBaseURL, "openai-base-url", "", "codex workers' OpenAI API base URL, e.g. https://gw.example/v1: https, or http to loopback (default: the public API)")
	fs.StringVar(&o.EgressAllow, "egress-allow", "", "hosts every agent may reach through its egress proxy, comma-separated names or *.domain (default: none)")
	fs.StringVar(&o.EgressResolver, "egress-resolver", "", "DNS server (host:port) the agents' egress proxies resolve names with (default: the system's)")
	fs.Int64Var(&o.ModelCapTokens, "model-cap-tokens", 0, "most tokens each worker's model calls may use, as the provider counts them (0: no cap)")
	fs.StringVar(&o.ModelCapUSD, "model-cap-usd", "", "most each worker's model calls may cost, in US dollars at galley's price table, e.g. 5 or 2.50 (default: no cap)")
	fs.StringVar(&o.WorkerBin, "worker-bin", "", "the galley-worker binary (default: beside galley, or on PATH)")
	fs.DurationVar(&o.AwaitCap, "await-cap", 25*time.Second, "longest hold of deliveries/await")
	fs.IntVar(&o.MaxWorkers, "max-workers", 0, "most unsettled workers; 0 for no bound")
	fs.IntVar(&o.Conns.PerPeer, "max-conns-per-peer", 0, "most connections held from one address, on loopback from one uid (0: 1024)")
	fs.IntVar(&o.Conns.Total, "max-conns", 0, "most connections held in all (0: 4096, at most half the open-file limit)")
	fs.Int64Var(&o.PushLimit, "push-limit", harness.DefaultPushLimit, "bytes of one push of a worker's")
	fs.Int64Var(&o.PushBudget, "push-budget", harness.DefaultPushBudget, "bytes of all of a worker's pushes")
	fs.Int64Var(&o.WorkerLogLimit, "worker-log-limit", harness.DefaultLogLimit, "each worker's log budget in bytes (<data>/workers/<handle>/harness.log)")
	storeKind := fs.String("store", "bolt", "record store: bolt (embedded, under --data) or dynamodb (AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION, ...)")
	bellKind := fs.String("doorbell", "local", "await doorbell: local (in-process) or sqs (AWS_ENDPOINT_URL_SQS, AWS_REGION, ...)")
	stack := fs.String("stack", "local", "local (one process) or aws-local (the AWS shape on this machine: gateway, functions under the Lambda emulator, DynamoDB Local, fauxqs, the ECS stand-in)")
	table := fs.String("table", "", "DynamoDB table with --store dynamodb, created when missing (default galley-<house>)")
	queuePrefix := fs.String("queue-prefix", "", "SQS queue name prefix with --doorbell sqs (default galley-<house>)")
	template := fs.String("template", "", "with --stack aws-local: the synthesized stack template (default: the one cdk.out/*.template.json, which `make synth-local` writes)")
	var secrets stringList
	fs.Var(&secrets, "secret", "with --stack aws-local, repeatable: seed a secret of the template, NAME=file:PATH or NAME=env:VARIABLE (e.g. galley/local/anthropic=env:ANTHROPIC_API_KEY)")
	faultSpec := fs.String("inject-aws-faults", "", "TESTING ONLY: inject faults into the DynamoDB and SQS clients at seeded rates, e.g. "+
		"'throttle=0.02,timeout=0.01,lost-response=0.02,delayed=0.01,condition-failed=0.01,seed=7' (also ops=ReceiveMessage+SendMessage, delay=50ms); "+
		"needs --store dynamodb or --doorbell sqs; the counts are logged at shutdown")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *faultSpec != "" && *stack != "local" {
		fmt.Fprintf(stderr, "galley serve: --inject-aws-faults works with --stack local only\n")
		return 2
	}
	switch *stack {
	case "local":
	case "aws-local":
		// The template is the deployment: flags that would change what it
		// sets are refused, and those left at their defaults say nothing.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"default-agent", "families", "await-cap", "max-workers", "store", "doorbell", "table", "queue-prefix", "repository",
			"anthropic-base-url", "openai-base-url"} {
			if set[name] {
				fmt.Fprintf(stderr, "galley serve --stack aws-local: --%s comes from the template; synthesize with the value you want (make synth-local)\n", name)
				return 2
			}
		}
		for name, v := range map[string]*string{"house": &o.House, "backend": &o.Backend, "credential": &o.Credential} {
			if !set[name] {
				*v = ""
			}
		}
		if err := awslocal.ServeAWSLocal(ctx, awslocal.Config{Options: o, Template: *template, Secrets: secrets}, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "galley serve --stack aws-local: %v\n", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintf(stderr, "galley serve: --stack must be local or aws-local\n")
		return 2
	}
	if err := awsBackends(ctx, &o, *storeKind, *bellKind, *table, *queuePrefix, *faultSpec); err != nil {
		fmt.Fprintf(stderr, "galley serve: %v\n", err)
		return 2
	}
	switch o.DefaultAgent {
	case "script", "claude", "codex":
	default:
		fmt.Fprintf(stderr, "galley serve: --default-agent must be script, claude or codex\n")
		return 2
	}
	if families != "" {
		o.Families = strings.Split(families, ",")
	}
	srv, err := localserver.Start(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "galley serve: %v\n", err)
		return 1
	}
	o.OperatorTokenFile = srv.OperatorTokenFile()
	localserver.PrintReady(stdout, o, srv.Endpoint, srv.TokenFile())
	<-ctx.Done()
	fmt.Fprintln(stdout, "galley: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if f := o.AWSFaults; f != nil {
		c := f.Counts()
		fmt.Fprintf(stdout, "galley: %d AWS faults injected %v; calls that reached AWS %v; SQS as AWS %+v\n", c.Total(), c.Injected, c.Calls, c.SQS)
	}
	if err != nil {
		fmt.Fprintf(stderr, "galley serve: shutdown: %v\n", err)
		return 1
	}
	return 0
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
