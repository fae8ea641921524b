package awslocal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// DefaultTemplate is the template `make synth-local` writes: the one
// *.template.json under cdk.out (relative to the working directory).
func DefaultTemplate() (string, error) {
	matches, _ := filepath.Glob(filepath.Join("cdk.out", "*.template.json"))
	switch len(matches) {
	case 0:
		return "", errors.New("no stack template under cdk.out: synthesize it with `make synth-local`, or pass --template")
	case 1:
		return matches[0], nil
	}
	return "", fmt.Errorf("several stack templates under cdk.out (%s): pass --template", strings.Join(matches, ", "))
}

func fillDefaults(cfg *Config) error {
	o := &cfg.Options
	// The house, backend and credential come from the template: only a
	// value the caller set is compared with it (checkOptions).
	house, backend, credential := o.House, o.Backend, o.Credential
	o.Defaults()
	o.House, o.Backend, o.Credential = house, backend, credential
	if cfg.Bin == (Binaries{}) {
		dir := os.Getenv(EnvBin)
		if dir == "" {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			dir = filepath.Dir(exe)
		}
		cfg.Bin = BinariesIn(dir)
	}
	if o.WorkerBin != "" {
		cfg.Bin.Harness = o.WorkerBin
	}
	if err := cfg.Bin.Check(); err != nil {
		return err
	}
	if cfg.Template == "" {
		t, err := DefaultTemplate()
		if err != nil {
			return err
		}
		cfg.Template = t
	}
	if cfg.WorkerGrace <= 0 {
		cfg.WorkerGrace = 10 * time.Second
	}
	if cfg.WorkerImage == "" {
		cfg.WorkerImage = os.Getenv(EnvWorkerImage)
	}
	if cfg.ImageAgentCLIs && cfg.WorkerImage == "" {
		return fmt.Errorf("aws-local: the image's agent CLIs need a worker image (%s)", EnvWorkerImage)
	}
	return nil
}

// checkOptions refuses local server options that contradict the template:
// the template is the deployment, and aws-local does not override it.
func (s *Stack) checkOptions() error {
	o := s.cfg.Options
	for _, fn := range lambdaapp.Functions {
		if _, ok := s.kinds[fn]; !ok {
			return fmt.Errorf("aws-local: the template has no %s function", fn)
		}
	}
	env := s.model.functions[s.kinds[lambdaapp.Effects]].Env
	var errs []string
	// What the local stack itself reads from the template (the git
	// server's credential, kitchn's token, the binding).
	for _, name := range []string{contract.EnvHouse, contract.EnvBackend, contract.EnvCredential,
		contract.EnvTokenSecretArn, contract.EnvSecretGit, contract.EnvRepository} {
		if env[name] == "" {
			errs = append(errs, fmt.Sprintf("the template's effects function sets no %s", name))
		}
	}
	check := func(flag, have, name string) {
		if have != "" && env[name] != have {
			errs = append(errs, fmt.Sprintf("%s %q: the template sets %s=%q (synthesize with the value you want)", flag, have, name, env[name]))
		}
	}
	for flag, set := range map[string]bool{"--egress-allow (context egressAllowlist)": o.EgressAllow != "",
		"--model-cap-tokens (context modelCapTokens)": o.ModelCapTokens != 0, "--model-cap-usd (context modelCapUsd)": o.ModelCapUSD != ""} {
		if set {
			errs = append(errs, flag+": the template sets it (synthesize with the value you want)")
		}
	}
	check("--house", o.House, contract.EnvHouse)
	check("--backend", o.Backend, contract.EnvBackend)
	check("--credential", o.Credential, contract.EnvCredential)
	if len(errs) > 0 {
		return errors.New("aws-local: " + strings.Join(errs, "; "))
	}
	return nil
}
