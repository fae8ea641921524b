// Command galley runs galley on one machine and checks deployments.
//
//	galley serve        the local server, ready for a kitchn binding
//	galley conformance  kitchn's checks against any galley endpoint
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

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
`)
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("galley serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o localserver.Options
	var families string
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "address to serve on")
	fs.StringVar(&o.House, "house", "local", "the kitchn house this server serves")
	fs.StringVar(&o.Backend, "backend", "galley", "the backend namespace of the binding")
	fs.StringVar(&o.Credential, "credential", "galley-token", "the binding's credential name")
	fs.StringVar(&o.Data, "data", ".galley", "directory for all state")
	fs.StringVar(&o.TokenFile, "token-file", "", "bearer token file, created (mode 600) when absent (default <data>/token)")
	fs.StringVar(&o.Repository, "repository", "", "git repository branches are made in (default: a bare repository under <data>)")
	fs.StringVar(&o.DefaultAgent, "default-agent", "script", "agent for launches that name none: script, claude or codex")
	fs.StringVar(&families, "families", "", "agent families to declare, comma-separated (claude,codex)")
	fs.StringVar(&o.WorkerBin, "worker-bin", "", "the galley-worker binary (default: beside galley, or on PATH)")
	fs.DurationVar(&o.AwaitCap, "await-cap", 25*time.Second, "longest hold of deliveries/await")
	fs.IntVar(&o.MaxWorkers, "max-workers", 0, "most unsettled workers; 0 for no bound")
	if err := fs.Parse(args); err != nil {
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
	fmt.Fprintf(stdout, "galley serving house %s (backend %s) at %s\n", o.House, o.Backend, srv.Endpoint)
	fmt.Fprintf(stdout, "bearer token: %s (mode 600; copy it to <registry>/private/%s/credentials/%s)\n",
		srv.TokenFile(), o.House, o.Credential)
	fmt.Fprintf(stdout, "kitchn binding for the house policy:\n%s\n", srv.Binding())
	<-ctx.Done()
	fmt.Fprintln(stdout, "galley: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "galley serve: shutdown: %v\n", err)
		return 1
	}
	return 0
}
