// Command galley-worker runs one galley worker: by default the harness
// (package harness), configured from the environment, with drivers for the
// scripted agent and the claude and codex CLIs (package agents); with the
// script-agent subcommand, the scripted agent (package scriptagent) that
// the harness's script driver starts; with agent-exec, the confined start
// of an agent (harness.RunAgentExec); with the agent-session subcommand,
// the session supervisor that the claude and codex drivers start; with
// egress-proxy, the egress proxy service of the AWS stack (egress.RunService,
// configured from the environment).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/galley-run/galley/pkg/agents"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/scriptagent"
)

func main() {
	// agent-exec replaces itself with the agent at once: no signal
	// handling, no context.
	if len(os.Args) > 1 && os.Args[1] == harness.AgentExecCommand {
		os.Exit(harness.RunAgentExec(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	switch {
	case len(args) == 0:
		// Everything the harness writes (its lines and its agent's output)
		// stays within the worker's log budget: the local log file's, and
		// on AWS what reaches CloudWatch.
		limit, err := harness.LogLimitFromEnv(os.Getenv)
		if err != nil {
			fmt.Fprintln(os.Stderr, "galley-worker: bad configuration:", err)
			return 2
		}
		log := slog.New(slog.NewJSONHandler(harness.CappedWriter(os.Stderr, limit), nil))
		cfg, err := harness.ConfigFromEnv(os.Getenv)
		if err != nil {
			log.Error("bad configuration", "err", err)
			return 2
		}
		// The secrets now live in cfg alone: no child of the harness may
		// inherit them.
		harness.UnsetSecretEnv()
		cfg.Logger = log
		// Each driver says whether its agent takes messages on tool results
		// (harness.AgentNeeds), decided once the launch facts are read.
		cfg.Drivers = agents.Drivers(cfg.AgentBinDir)
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
	case len(args) == 1 && args[0] == agents.SessionCommand:
		cfg, err := agents.SessionConfigFromEnv(os.Getenv)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		return agents.RunSession(ctx, cfg, os.Stdout, os.Stderr)
	case len(args) == 1 && args[0] == egress.ServiceCommand:
		log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
		if err := egress.RunService(ctx, os.Getenv, log); err != nil {
			log.Error("egress proxy failed", "err", err)
			if galleyerr.Is(galleyerr.Invalid, err) {
				return 2
			}
			return 1
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "usage: galley-worker [%s | %s | %s]\n",
			harness.ScriptAgentCommand, agents.SessionCommand, egress.ServiceCommand)
		return 2
	}
}
