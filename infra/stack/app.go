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
	"github.com/galley-run/galley/pkg/contract"
)

// Build reads the app's context into a Config, resolves the asset paths
// against the repository root, builds the stack and applies cdk-nag's
// AwsSolutions checks to the whole app (their errors fail synth).
//
// What only a deploy needs (the house repository, the built functions) is
// checked late: without it Build makes a placeholder stack of the same name
// (Galley.Missing says why) that carries the problems as error annotations,
// which fail `cdk synth` and `cdk deploy`, and a template rule that
// CloudFormation refuses should it be deployed anyway (--ignore-errors).
// `cdk bootstrap` and `cdk destroy`, which synthesize the app only to find
// its stacks and their environments, then work from a fresh clone without
// either. A context value that is present but wrong stays an error at once.
func Build(app awscdk.App, root string) (*Galley, error) {
	get := func(key string) any { return app.Node().TryGetContext(jsii.String(key)) }
	cfg, err := FromContext(get)
	var missing []string
	if err != nil && cfg.Repository == "" && strings.Contains(err.Error(), "repository: required") {
		// Only the missing repository is deferred (a context value that
		// did not parse fails FromContext before it validates): validate
		// the rest with a stand-in URL, which is never built into anything.
		probe := cfg
		probe.Repository = "https://repository.invalid/"
		if err := probe.Validate(); err != nil {
			return nil, err
		}
		missing = append(missing, MissingRepository)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(cfg.AssetDir) {
		cfg.AssetDir = filepath.Join(root, cfg.AssetDir)
	}
	for _, name := range contract.FunctionNames {
		if _, err := os.Stat(filepath.Join(cfg.AssetDir, name, "bootstrap")); err != nil {
			missing = append(missing, fmt.Sprintf("galley: function %s: %s/%s/bootstrap is missing: build the functions first (make lambdas) or set -c assetDir=", name, cfg.AssetDir, name))
		}
	}
	if len(missing) > 0 {
		return placeholder(app, cfg, missing), nil
	}
	cfg.WorkerContext = root
	g, err := NewGalleyStack(app, cfg.StackName(), cfg, nil)
	if err != nil {
		return nil, err
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	return g, nil
}

// MissingRepository is the placeholder's annotation when no repository
// was given.
const MissingRepository = "repository: required, the house repository's https:// URL (-c repository=https://...; make REPOSITORY=...)"

// PlaceholderRule is the logical ID of the placeholder's failing rule.
const PlaceholderRule = "GalleyIsNotBuilt"

// placeholder is the stack Build makes when what a deploy needs is missing:
// the galley stack's name and nothing of it, so that `cdk destroy` finds the
// stack it deletes and `cdk bootstrap` the app's environment.
func placeholder(app awscdk.App, cfg Config, missing []string) *Galley {
	// With cdk.json's annotationsInValidationReport an error annotation
	// fails synthesis itself, so bootstrap and destroy too. Off for this
	// app only (no stack exists yet, so the context may still change): the
	// CLI then checks the errors where they matter, in synth and deploy,
	// which refuse the stack.
	app.Node().SetContext(jsii.String("@aws-cdk/core:annotationsInValidationReport"), false)
	s := awscdk.NewStack(app, jsii.String(cfg.StackName()), &awscdk.StackProps{
		Description: jsii.String("galley placeholder, not deployable: synthesized without the repository or the built functions"),
	})
	for _, m := range missing {
		awscdk.Annotations_Of(s).AddError(jsii.String(m))
	}
	// CloudFormation evaluates a template's rules before it changes any
	// resource: this one always fails, so a placeholder forced past the
	// annotations never replaces a deployed stack with an empty one.
	awscdk.NewCfnRule(s, jsii.String(PlaceholderRule), &awscdk.CfnRuleProps{
		Assertions: &[]*awscdk.CfnRuleAssertion{{
			Assert:            awscdk.Fn_ConditionEquals(jsii.String("placeholder"), jsii.String("deployable")),
			AssertDescription: jsii.String("this template is galley's placeholder, synthesized without the repository or the built functions"),
		}},
	})
	// The rule's assertion is meant to be false (cfn-lint's W8003).
	s.AddMetadata(jsii.String("cfn-lint"), map[string]any{"config": map[string]any{"ignore_checks": []string{"W8003"}}})
	// A template needs a resource: a wait condition handle costs nothing
	// and does nothing.
	awscdk.NewCfnWaitConditionHandle(s, jsii.String("Placeholder"), &awscdk.CfnWaitConditionHandleProps{})
	return &Galley{Stack: s, Config: cfg, Missing: missing}
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
