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
	"os"
	"os/signal"
	"syscall"

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

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("galley serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := localserver.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o, err := flags.Open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "galley serve: %v\n", err)
		return 2
	}
	if err := localserver.Serve(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "galley serve: %v\n", err)
		return 1
	}
	return 0
}
