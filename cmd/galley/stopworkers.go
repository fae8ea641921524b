package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/galley-run/galley/pkg/teardown"
)

// stopWorkers stops every task of a deployment's worker cluster and waits
// until they have stopped (`make destroy` runs it before cdk destroy).
func stopWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("galley stop-workers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cluster := fs.String("cluster", "", "the worker cluster (the stack's ClusterName output); required")
	wait := fs.Duration("wait", 15*time.Minute, "longest wait for the tasks to stop")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cluster == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "galley stop-workers: --cluster NAME is required, and nothing else")
		return 2
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "galley stop-workers: %v\n", err)
		return 1
	}
	n, err := teardown.StopWorkers(ctx, ecs.NewFromConfig(cfg), *cluster, teardown.Options{Wait: *wait})
	if err != nil {
		fmt.Fprintf(stderr, "galley stop-workers: %v (after stopping %d tasks)\n", err, n)
		return 1
	}
	fmt.Fprintf(stdout, "galley: %d worker tasks of %s stopped\n", n, *cluster)
	return 0
}
