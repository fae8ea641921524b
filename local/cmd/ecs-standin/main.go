// Command ecs-standin serves the ECS stand-in (package ecsstandin) on an
// address until SIGTERM or SIGINT, then stops its tasks. It also serves as
// its own tasks' init, so it must be the binary that runs.
//
//	ecs-standin -listen 127.0.0.1:4599 -dir .galley/ecs -harness bin/galley-worker \
//	    [-container worker] [-grace 30s] [-events-url URL] [-env NAME=VALUE]...
//
// It prints "ecs-standin listening on http://ADDR" once it accepts
// connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/local/ecsstandin"
)

type envFlags []string

func (e *envFlags) String() string     { return strings.Join(*e, ",") }
func (e *envFlags) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	ecsstandin.Entrypoint() // returns unless this process is a task's init
	listen := flag.String("listen", "127.0.0.1:4599", "address to serve the ECS API on")
	dir := flag.String("dir", "", "folder for task storage and process records (required)")
	harness := flag.String("harness", "", "the worker container's command: the harness binary (required)")
	container := flag.String("container", ecsstandin.DefaultContainer, "the task definition's container name")
	grace := flag.Duration("grace", ecsstandin.DefaultGrace, "stop timeout: SIGTERM to SIGKILL")
	region := flag.String("region", ecsstandin.DefaultRegion, "region the ARNs name")
	account := flag.String("account", ecsstandin.DefaultAccount, "account the ARNs name")
	eventsURL := flag.String("events-url", "", "POST each task state change event here (the reconciler)")
	var env envFlags
	flag.Var(&env, "env", "NAME=VALUE of the task definition's container environment (repeatable)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log, *listen, *dir, *harness, *eventsURL, env, []ecsstandin.Option{
		ecsstandin.WithContainer(*container), ecsstandin.WithGrace(*grace),
		ecsstandin.WithRegion(*region), ecsstandin.WithAccount(*account), ecsstandin.WithLogger(log),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "ecs-standin:", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, listen, dir, harness, eventsURL string, env []string, opts []ecsstandin.Option) error {
	if dir == "" || harness == "" {
		return errors.New("-dir and -harness are required")
	}
	opts = append(opts, ecsstandin.WithDir(dir), ecsstandin.WithHarness(harness))
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return fmt.Errorf("-env %q is not NAME=VALUE", kv)
		}
		opts = append(opts, ecsstandin.WithTaskEnv(name, value))
	}
	if eventsURL != "" {
		opts = append(opts, ecsstandin.WithSink(ecsstandin.PostSink(&http.Client{Timeout: 30 * time.Second}, eventsURL)))
	}
	srv, err := ecsstandin.New(opts...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		srv.Close()
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Printf("ecs-standin listening on http://%s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	log.Info("stopping tasks")
	if cerr := srv.Close(); err == nil || errors.Is(err, http.ErrServerClosed) {
		err = cerr
	}
	return err
}
