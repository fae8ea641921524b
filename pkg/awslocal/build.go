package awslocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/galley-run/galley/pkg/lambdaapp"
)

// Binaries are the programs the stack runs.
type Binaries struct {
	RIE     string // aws-lambda-rie (tools/rie)
	ECS     string // ecs-standin: the ECS stand-in's task init (local/cmd/ecs-standin)
	Harness string // galley-worker, the worker task's command (worker/cmd/galley-worker)
	// Functions holds <function>/bootstrap for each function, built for
	// this machine (bin/lambda-local; the AWS build for arm64 is
	// bin/lambda).
	Functions string
}

// BinariesIn is the layout make uses: everything in dir (bin/), the
// functions in dir/lambda-local.
func BinariesIn(dir string) Binaries {
	return Binaries{
		RIE: filepath.Join(dir, "aws-lambda-rie"), ECS: filepath.Join(dir, "ecs-standin"),
		Harness:   filepath.Join(dir, "galley-worker"),
		Functions: filepath.Join(dir, "lambda-local"),
	}
}

// Bootstrap is fn's binary.
func (b Binaries) Bootstrap(fn lambdaapp.Function) string {
	return filepath.Join(b.Functions, string(fn), "bootstrap")
}

// Check reports every missing binary.
func (b Binaries) Check() error {
	var missing []string
	paths := []string{b.RIE, b.ECS, b.Harness}
	for _, fn := range lambdaapp.Functions {
		paths = append(paths, b.Bootstrap(fn))
	}
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: build them with `make build-aws-local`", strings.Join(missing, ", "))
	}
	return nil
}

// Build builds every binary from the module at root (the repository), and
// installs the emulator from the tools/rie module when it is missing.
// Output of the builds goes to out.
func Build(ctx context.Context, root string, b Binaries, out io.Writer) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return errors.New("awslocal: the go command is needed to build the stack")
	}
	run := func(dir string, env []string, args ...string) error {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	for _, fn := range lambdaapp.Functions {
		if err := run(root, []string{"CGO_ENABLED=0", "GOOS=linux"}, "build", "-tags", "lambda.norpc",
			"-ldflags=-s -w", "-o", b.Bootstrap(fn), "./functions/"+string(fn)); err != nil {
			return err
		}
	}
	for path, pkg := range map[string]string{
		b.ECS: "./local/cmd/ecs-standin", b.Harness: "./worker/cmd/galley-worker",
	} {
		if err := run(root, nil, "build", "-o", path, pkg); err != nil {
			return err
		}
	}
	if _, err := os.Stat(b.RIE); err != nil {
		dir, err := filepath.Abs(filepath.Dir(b.RIE))
		if err != nil {
			return err
		}
		tmp, err := os.MkdirTemp(dir, ".rie-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := run(filepath.Join(root, "tools", "rie"), []string{"GOBIN=" + tmp}, "install", "tool"); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(tmp, "aws-lambda-rie"), b.RIE); err != nil {
			return err
		}
	}
	return nil
}
