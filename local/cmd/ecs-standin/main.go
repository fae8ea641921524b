// Command ecs-standin serves the ECS stand-in (package ecsstandin) on an
// address until SIGTERM or SIGINT, then stops its tasks. It also serves as
// its own tasks' init, so it must be the binary that runs.
//
//	ecs-standin -listen 127.0.0.1:4599 -dir .galley/ecs \
//	    -image 'REF=/abs/bin/galley-worker' [-image-env PATH=/usr/bin:/bin]... \
//	    [-grace 30s] [-events-url URL] [-task-endpoint 127.0.0.1:0]
//
// Clusters and task definitions are made through the ECS API
// (CreateCluster, RegisterTaskDefinition). Each -image maps an image
// reference (a trailing * matches any reference with that prefix) to a
// local image whose entrypoint is the program; -image-env sets the
// environment of every such image (the container gets nothing of this
// process's). Secrets and task roles need the Go API (WithSecrets,
// WithTaskCredentials): here a task whose definition names either fails
// to start.
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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/local/ecsstandin"
)

type listFlag []string

func (e *listFlag) String() string     { return strings.Join(*e, ",") }
func (e *listFlag) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	ecsstandin.Entrypoint() // returns unless this process is a task's init
	listen := flag.String("listen", "127.0.0.1:4599", "address to serve the ECS API on")
	dir := flag.String("dir", "", "folder for task storage and process records (required)")
	grace := flag.Duration("grace", ecsstandin.DefaultGrace, "stop timeout: SIGTERM to SIGKILL")
	region := flag.String("region", ecsstandin.DefaultRegion, "region the ARNs name")
	account := flag.String("account", ecsstandin.DefaultAccount, "account the ARNs name")
	eventsURL := flag.String("events-url", "", "POST each task state change event here (the reconciler)")
	taskEndpoint := flag.String("task-endpoint", "", "loopback address of the tasks' credentials and metadata endpoint (default: a free port)")
	var images, imageEnv listFlag
	flag.Var(&images, "image", "REF=PROGRAM: run image REF (a trailing * matches a prefix) as PROGRAM (repeatable)")
	flag.Var(&imageEnv, "image-env", "NAME=VALUE of every -image's environment (repeatable)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	opts := []ecsstandin.Option{
		ecsstandin.WithGrace(*grace), ecsstandin.WithRegion(*region), ecsstandin.WithAccount(*account),
		ecsstandin.WithLogger(log), ecsstandin.WithTaskEndpoint(*taskEndpoint),
	}
	imgOpts, err := imageOptions(images, imageEnv)
	if err == nil {
		err = run(log, *listen, *dir, *eventsURL, append(opts, imgOpts...))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ecs-standin:", err)
		os.Exit(1)
	}
}

// imageOptions reads the -image and -image-env flags.
func imageOptions(images, imageEnv []string) ([]ecsstandin.Option, error) {
	env := map[string]string{}
	for _, kv := range imageEnv {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-image-env %q is not NAME=VALUE", kv)
		}
		env[name] = value
	}
	var opts []ecsstandin.Option
	for _, m := range images {
		ref, program, ok := strings.Cut(m, "=")
		if !ok || ref == "" || !filepath.IsAbs(program) {
			return nil, fmt.Errorf("-image %q is not REF=/absolute/program", m)
		}
		img := ecsstandin.Image{Entrypoint: []string{program}, Env: env}
		if prefix, ok := strings.CutSuffix(ref, "*"); ok {
			opts = append(opts, ecsstandin.WithImageFunc(func(r string) bool { return strings.HasPrefix(r, prefix) }, img))
		} else {
			opts = append(opts, ecsstandin.WithImage(ref, img))
		}
	}
	return opts, nil
}

func run(log *slog.Logger, listen, dir, eventsURL string, opts []ecsstandin.Option) error {
	if dir == "" {
		return errors.New("-dir is required")
	}
	opts = append(opts, ecsstandin.WithDir(dir))
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
