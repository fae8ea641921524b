package awslocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/galley-run/galley/local/gateway"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// spawner starts a function's emulators with its environment.
func (s *Stack) spawner(f *function, env []string, out io.Writer) func(context.Context) (gateway.Invoker, error) {
	return func(ctx context.Context) (gateway.Invoker, error) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errors.New("the stack is shutting down")
		}
		p, err := gateway.StartEmulator(context.WithoutCancel(ctx), gateway.EmulatorConfig{
			RIE: s.cfg.Bin.RIE, Bootstrap: f.Bootstrap, Env: env,
			Timeout: f.Timeout, Name: f.Name, Output: out,
		})
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			p.Close()
			return nil, errors.New("the stack is shutting down")
		}
		s.procs = append(s.procs, p)
		return p, nil
	}
}

// NewInstance starts one more emulator of fn outside its pool, with fn's
// environment and its output to out: a fresh instance whose first
// invocation is a cold start (the benchmarks measure it). The caller
// closes it; Close closes it too.
func (s *Stack) NewInstance(ctx context.Context, fn lambdaapp.Function, out io.Writer) (*gateway.EmulatorProcess, error) {
	id, ok := s.kinds[fn]
	if !ok {
		return nil, fmt.Errorf("no function %q", fn)
	}
	inv, err := s.spawner(s.model.functions[id], s.envs[id], out)(ctx)
	if err != nil {
		return nil, err
	}
	return inv.(*gateway.EmulatorProcess), nil
}

func (s *Stack) output(fn string) (io.Writer, error) {
	if s.cfg.FunctionOutput != nil {
		return s.cfg.FunctionOutput, nil
	}
	f, err := os.OpenFile(filepath.Join(s.dir, "logs", fn+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	s.logs = append(s.logs, f)
	return f, nil
}

// invoke invokes a function by its logical id.
func (s *Stack) invoke(ctx context.Context, id string, payload []byte) ([]byte, error) {
	s.mu.Lock()
	p := s.pools[id]
	s.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("function %s is not running", id)
	}
	return p.Invoke(ctx, payload)
}
