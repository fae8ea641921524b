// Command infra is galley's CDK app: `npx cdk synth` (cdk.json at the
// repository root runs it here) synthesizes the stack package's stack
// with cdk-nag's AwsSolutions checks. Configuration is CDK context: see
// docs/deploy.md.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/galley-run/galley/infra/stack"
)

func main() {
	defer jsii.Close()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	// cdk.json's app runs in infra/, but the CLI passes paths (output
	// dir, error and counter files) relative to its own directory, the
	// root: work from there.
	if err := os.Chdir(root); err != nil {
		return err
	}
	app := awscdk.NewApp(nil)
	if _, err := stack.Build(app, root); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}

// repoRoot is the nearest directory at or above the working directory
// holding cdk.json.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cdk.json")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("galley infra: no cdk.json at or above the working directory")
		}
		dir = parent
	}
}
