package awslocal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
)

// Close stops everything, in the order that lets the last events land: the
// gateway stops taking requests, the ECS stand-in stops the worker tasks
// and delivers their final state changes to the reconciler, then the
// functions and the stand-ins stop. Stand-ins that were running before
// Start keep running.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.mu.Lock()
	if s.stopped != nil {
		select {
		case <-s.stopped:
		default:
			close(s.stopped)
		}
	}
	s.mu.Unlock()
	if len(s.servers) > 0 {
		_ = s.servers[0].Shutdown(ctx) // the gateway
	}
	if s.ecs != nil {
		_ = s.ecs.Close()
	}
	s.egress.close()
	if err := s.ctrs.close(); err != nil {
		s.cfg.Logger.Error("aws-local: cannot remove the container network", "err", err)
	}
	s.ctrs = nil
	for _, srv := range s.servers[min(1, len(s.servers)):] {
		_ = srv.Shutdown(ctx)
	}
	s.mu.Lock()
	s.closed = true
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close()
		}()
	}
	wg.Wait()
	for _, f := range s.logs {
		f.Close()
	}
	s.logs = nil
	if s.stopStandin != nil {
		s.stopStandin()
		s.stopStandin = nil
	}
	return nil
}

// ServeAWSLocal is `galley-dev serve --stack aws-local` (the development
// binary, local/cmd/galley-dev): it starts the stack from the template,
// prints what `galley serve` prints, and stops everything when ctx ends
// (SIGTERM or Ctrl-C).
func ServeAWSLocal(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if err := fillDefaults(&cfg); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "galley: deploying %s onto this machine (DynamoDB Local, fauxqs, Secrets Manager and ECS stand-ins, IAM gates, the functions under the Lambda emulator)\n", cfg.Template)
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	if imgs := s.WorkerImageRefs(); len(imgs) > 0 {
		fmt.Fprintf(stderr, "galley: worker tasks run as containers of %v (by agent family; podman, runc) on the stack's own network\n", imgs)
	} else {
		fmt.Fprintln(stderr, "galley: "+HostProgramsNotice)
	}
	o := cfg.Options
	env := s.FunctionEnv(lambdaapp.Effects)
	o.House, o.Backend, o.Credential = env[contract.EnvHouse], env[contract.EnvBackend], env[contract.EnvCredential]
	o.OperatorTokenFile = s.OperatorTokenFile()
	localserver.PrintReady(stdout, o, s.Endpoint(), s.TokenFile())
	<-ctx.Done()
	fmt.Fprintln(stdout, "galley: shutting down")
	return s.Close()
}

// standins returns the AWS variables that point at DynamoDB and SQS
// stand-ins: those of this process when both endpoints are set (a
// LocalStack, or stand-ins started by make test), else those of
// scripts/standins.sh, which it starts; stop stops them again only if
// they were not running before.
func standins(ctx context.Context, script string, bin Binaries) (map[string]string, func(), error) {
	env := map[string]string{}
	ddb, sqs := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), os.Getenv("AWS_ENDPOINT_URL_SQS")
	if ddb != "" && sqs != "" {
		env["AWS_ENDPOINT_URL_DYNAMODB"], env["AWS_ENDPOINT_URL_SQS"] = ddb, sqs
		return env, func() {}, nil
	}
	if script == "" {
		script = filepath.Join(filepath.Dir(filepath.Dir(mustAbs(bin.ECS))), "scripts", "standins.sh")
		if _, err := os.Stat(script); err != nil {
			script = filepath.Join("scripts", "standins.sh")
		}
	}
	if _, err := os.Stat(script); err != nil {
		return nil, nil, fmt.Errorf("cannot find scripts/standins.sh to start DynamoDB Local and fauxqs (or set AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS): %w", err)
	}
	running := exec.CommandContext(ctx, script, "status").Run() == nil
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, script, "start")
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("scripts/standins.sh start: %w", err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if k, v, found := strings.Cut(line, "="); ok && found && slices.Contains([]string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"}, k) {
			env[k] = v
		}
	}
	if env["AWS_ENDPOINT_URL_DYNAMODB"] == "" || env["AWS_ENDPOINT_URL_SQS"] == "" {
		return nil, nil, errors.New("scripts/standins.sh start printed no endpoints")
	}
	stop := func() {}
	if !running {
		stop = func() {
			c := exec.Command(script, "stop")
			c.Stdout, c.Stderr = os.Stderr, os.Stderr
			_ = c.Run()
		}
	}
	return env, stop, nil
}

func mustAbs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
