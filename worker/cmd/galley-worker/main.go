// Command galley-worker runs one galley worker: by default the harness
// (package harness), configured from the environment, with drivers for the
// scripted agent and the claude and codex CLIs (package agents); with the
// script-agent subcommand, the scripted agent (package scriptagent) that
// the harness's script driver starts; with the agent-session subcommand,
// the session supervisor that the claude and codex drivers start.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/galley-run/galley/pkg/agents"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/scriptagent"
	"github.com/galley-run/galley/pkg/workerapi/client"
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
		cfg.Drivers = agents.Drivers(cfg.AgentBinDir)
		cfg.AppendMessages = appendsMessages(ctx, cfg)
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
	default:
		fmt.Fprintf(os.Stderr, "usage: galley-worker [%s | %s]\n", harness.ScriptAgentCommand, agents.SessionCommand)
		return 2
	}
}

// appendsMessages tells whether the worker's agent is a CLI, which cannot
// block in wait_message while it works: then the harness appends waiting
// messages to its tool results. The scripted agent takes messages only
// through wait_message. The family is known only from the worker's launch
// facts, which the harness reads again (an idempotent call); if they
// cannot be read here, the harness will fail on them itself.
func appendsMessages(ctx context.Context, cfg harness.Config) bool {
	self, err := client.New(cfg.Endpoint, cfg.Token, cfg.ClientOptions...).Self(ctx)
	if err != nil {
		return false
	}
	return self.Agent.Agent == agents.FamilyClaude || self.Agent.Agent == agents.FamilyCodex
}
