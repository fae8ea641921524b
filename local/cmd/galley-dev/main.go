// Command galley-dev is galley serve for development and testing, beside
// the stand-ins it starts: the product's `galley serve` (cmd/galley) with
// two shapes the product must not link.
//
//	galley-dev serve --stack aws-local [--template FILE] [--secret NAME=...]
//	    the AWS shape on this machine: the synthesized template deployed
//	    onto DynamoDB Local, fauxqs, the ECS, Secrets Manager, STS and IAM
//	    stand-ins and the functions under the Lambda emulator (make
//	    run-aws-local; docs/aws-local.md)
//	galley-dev serve --store dynamodb --doorbell sqs --inject-aws-faults PLAN
//	    galley serve with faults injected into its DynamoDB and SQS clients
//	    at seeded rates (docs/RELIABILITY.md)
//
// Every other flag is galley serve's. The other commands (conformance,
// workers, ...) are galley's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/awsfault"
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
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "galley-dev: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: galley-dev serve [flags]

galley serve's flags, and for development and testing:
  --stack aws-local         the AWS shape on this machine, from the synthesized template (make run-aws-local)
  --inject-aws-faults PLAN  faults in the DynamoDB and SQS clients (with --store dynamodb or --doorbell sqs)
galley-dev serve -h lists them all; the other commands are galley's.
`)
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("galley-dev serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := localserver.AddFlags(fs)
	stack := fs.String("stack", "local", "local (one process) or aws-local (the AWS shape on this machine: gateway, functions under the Lambda emulator, DynamoDB Local, fauxqs, the ECS stand-in)")
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
		fmt.Fprintf(stderr, "galley-dev serve: --inject-aws-faults works with --stack local only\n")
		return 2
	}
	switch *stack {
	case "local":
	case "aws-local":
		return serveAWSLocal(ctx, fs, flags.Options, *template, secrets, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "galley-dev serve: --stack must be local or aws-local\n")
		return 2
	}
	var opens []localserver.OpenOption
	var plan *awsfault.Plan
	if *faultSpec != "" {
		var err error
		if plan, opens, err = faultedBackends(flags, *faultSpec); err != nil {
			fmt.Fprintf(stderr, "galley-dev serve: %v\n", err)
			return 2
		}
	}
	o, err := flags.Open(ctx, opens...)
	if err != nil {
		fmt.Fprintf(stderr, "galley-dev serve: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	if plan != nil {
		log.Warn("injecting AWS faults into the DynamoDB and SQS clients (testing only)", "faults", plan.Spec)
	}
	err = localserver.Serve(ctx, o, stdout)
	if plan != nil {
		// After the shutdown, so that the counts hold every call the
		// server made (the event log's last appends among them).
		plan.LogCounts(log, "AWS faults injected")
		c := plan.Counts()
		fmt.Fprintf(stdout, "galley: %d AWS faults injected %v; calls that reached AWS %v; SQS as AWS %+v\n", c.Total(), c.Injected, c.Calls, c.SQS)
	}
	if err != nil {
		fmt.Fprintf(stderr, "galley-dev serve: %v\n", err)
		return 1
	}
	return 0
}

// serveAWSLocal runs the stack of the template. The template is the
// deployment: flags that would change what it sets are refused, and those
// left at their defaults say nothing.
func serveAWSLocal(ctx context.Context, fs *flag.FlagSet, o localserver.Options, template string, secrets []string, stdout, stderr io.Writer) int {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"default-agent", "families", "await-cap", "max-workers", "store", "doorbell", "table", "queue-prefix", "repository",
		"anthropic-base-url", "openai-base-url"} {
		if set[name] {
			fmt.Fprintf(stderr, "galley-dev serve --stack aws-local: --%s comes from the template; synthesize with the value you want (make synth-local)\n", name)
			return 2
		}
	}
	for name, v := range map[string]*string{"house": &o.House, "backend": &o.Backend, "credential": &o.Credential} {
		if !set[name] {
			*v = ""
		}
	}
	if err := awslocal.ServeAWSLocal(ctx, awslocal.Config{Options: o, Template: template, Secrets: secrets}, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "galley-dev serve --stack aws-local: %v\n", err)
		return 1
	}
	return 0
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
