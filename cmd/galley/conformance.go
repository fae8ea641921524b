package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/conformance"
)

// runConformance is `galley conformance`: it runs galley's conformance
// suite against a deployment the way kitchn's client would call it, prints
// one line per check and a closing count, and answers 0 only when no check
// failed (1 when one did, 2 for a usage error).
func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("galley conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       conformance.Config
		tokenFile string
		only      string
		list      bool
	)
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "the endpoint kitchn would be bound to (https, or http to 127.0.0.1, localhost or [::1])")
	fs.StringVar(&tokenFile, "token-file", "", "file holding the bearer token (mode 600, at most 16 KiB)")
	fs.StringVar(&cfg.House, "house", "", "the house the deployment must serve")
	fs.StringVar(&cfg.Backend, "backend", "", "the backend namespace the deployment must serve")
	fs.StringVar(&cfg.Credential, "credential", "", "the credential name effects are sent with")
	fs.StringVar(&only, "only", "", "comma-separated names of the checks to run (default all)")
	fs.BoolVar(&cfg.NoEffects, "no-effects", false, "skip every check that launches, messages, cancels or releases a real worker")
	fs.DurationVar(&cfg.Timeout, "timeout", conformance.DefaultTimeout, "client deadline of each call, 1s to 25s (await gets waitMs on top)")
	fs.DurationVar(&cfg.Wait, "wait", conformance.DefaultWait, "how long a check waits for a worker or a mailbox message")
	fs.BoolVar(&list, "list", false, "list the checks and whether each performs real effects, then exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: galley conformance --endpoint URL --token-file PATH --house ID --backend ID --credential NAME [--only NAME,...] [--no-effects] [--timeout 5s] [--wait 30s] [--list]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "galley conformance: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if only != "" {
		for _, n := range strings.Split(only, ",") {
			if n = strings.TrimSpace(n); n != "" {
				cfg.Only = append(cfg.Only, n)
			}
		}
	}
	if list {
		if err := conformance.ValidateOnly(cfg.Only); err != nil {
			fmt.Fprintln(stderr, "galley conformance:", err)
			return 2
		}
		_ = conformance.WriteChecks(stdout, conformance.Selected(cfg), cfg.NoEffects)
		return 0
	}
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"--endpoint", cfg.Endpoint}, {"--token-file", tokenFile}, {"--house", cfg.House},
		{"--backend", cfg.Backend}, {"--credential", cfg.Credential},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "galley conformance: missing %s\n", strings.Join(missing, ", "))
		fs.Usage()
		return 2
	}
	tok, err := conformance.ReadTokenFile(tokenFile)
	if err != nil {
		fmt.Fprintln(stderr, "galley conformance:", err)
		return 2
	}
	cfg.Token = tok
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "galley conformance:", err)
		return 2
	}

	fmt.Fprintf(stdout, "galley conformance: %s (house %s, backend %s, credential %s, deadline %s per call)\n",
		cfg.Endpoint, cfg.House, cfg.Backend, cfg.Credential, cfg.Timeout)
	fmt.Fprintln(stdout, "checks marked EFFECTS launch, message, cancel and release real workers and create branches galley-conformance/<random>:")
	_ = conformance.WriteChecks(stdout, conformance.Selected(cfg), cfg.NoEffects)
	cfg.OnResult = func(r conformance.Result) { fmt.Fprintln(stdout, r) }
	start := time.Now()
	rep := conformance.Run(ctx, cfg)
	if rep.Err != nil {
		fmt.Fprintln(stderr, "galley conformance:", rep.Err)
		return 2
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	fmt.Fprintf(stderr, "took %s\n", time.Since(start).Round(time.Millisecond))
	fmt.Fprintln(stdout, rep.Summary())
	if !rep.OK() {
		return 1
	}
	return 0
}
