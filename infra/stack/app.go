package stack

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// Build reads the app's context into a Config, resolves the asset paths
// against the repository root, builds the stack and applies cdk-nag's
// AwsSolutions checks to the whole app (their errors fail synth).
func Build(app awscdk.App, root string) (*Galley, error) {
	cfg, err := FromContext(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(cfg.AssetDir) {
		cfg.AssetDir = filepath.Join(root, cfg.AssetDir)
	}
	for _, name := range FunctionNames {
		if _, err := os.Stat(filepath.Join(cfg.AssetDir, name, "bootstrap")); err != nil {
			return nil, fmt.Errorf("galley: function %s: %s/%s/bootstrap is missing: build the functions first (make lambdas) or set -c assetDir=", name, cfg.AssetDir, name)
		}
	}
	cfg.WorkerContext = root
	g, err := NewGalleyStack(app, cfg.StackName(), cfg, nil)
	if err != nil {
		return nil, err
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	return g, nil
}

// dockerIgnore reads a .dockerignore's patterns, so that CDK stages the
// same build context a `docker build` with that file would send.
func dockerIgnore(path string) ([]*string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("galley: worker image: %w (the build context is the repository root; the ignore file keeps it small)", err)
	}
	defer f.Close()
	var out []*string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, jsii.String(line))
	}
	return out, sc.Err()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
