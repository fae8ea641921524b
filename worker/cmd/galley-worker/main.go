// Command galley-worker runs one galley worker: by default the harness
// (package harness), configured from the environment; with the
// script-agent subcommand, the scripted agent (package scriptagent) that
// the harness's script driver starts.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/scriptagent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	switch {
	case len(args) == 0:
		log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
		cfg, err := harness.ConfigFromEnv(os.Getenv)
		if err != nil {
			log.Error("bad configuration", "err", err)
			return 2
		}
		cfg.Logger = log
		if err := harness.Run(ctx, cfg); err != nil {
			log.Error("harness failed", "err", err)
			return 1
		}
		return 0
	case len(args) == 1 && args[0] == harness.ScriptAgentCommand:
		cfg, err := scriptagent.ConfigFromEnv(os.Getenv)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		code, err := scriptagent.Run(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "script-agent:", err)
		}
		return code
	default:
		fmt.Fprintf(os.Stderr, "usage: galley-worker [%s]\n", harness.ScriptAgentCommand)
		return 2
	}
}
