// Package cmd holds the product's binaries: galley (the local server, the
// conformance checks, the operator's commands, stop-workers) and
// galley-worker (the harness every worker runs). The Lambda entry points
// are the product's binaries too, under functions/. Its test holds the
// line between them and the test bench (local/, the fault injectors, the
// test kits), as Tailscale's tstest/deptest does: by the closure
// `go list -deps` reports.
package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/galley-run/galley"

// productPatterns are the product's binaries: every main package they
// match.
var productPatterns = []string{"./cmd/...", "./functions/..."}

// builds are the settings a product binary is built with: this machine's,
// and the deployment's (`make lambdas` and the worker image: linux/arm64,
// the functions' lambda.norpc tag).
var builds = []struct{ name, goos, goarch, tags string }{
	{name: "host"},
	{name: "linux/arm64", goos: "linux", goarch: "arm64", tags: "lambda.norpc"},
}

// forbidden says why a product binary must not link pkg, or "" when it
// may. The kinds are told by rule, not listed, so that a new stand-in,
// fault injector or test kit is refused without a change here.
func forbidden(pkg string, standard bool) string {
	rel, ours := strings.CutPrefix(pkg, module+"/")
	elems := strings.Split(pkg, "/")
	last := elems[len(elems)-1]
	switch {
	case ours && (rel == "local" || strings.HasPrefix(rel, "local/")):
		return "the test bench (local/: stand-ins, emulators, aws-local, the development binary)"
	case ours && slices.ContainsFunc(strings.Split(rel, "/"), func(e string) bool { return strings.Contains(e, "fault") }):
		return "a fault injector"
	case ours && strings.HasPrefix(last, "fake"):
		return "a fake (a test kit)"
	// The standard library's own internals (internal/synctest) are no kit;
	// its `testing` is linked by a third party's LRU cache
	// (hashicorp/golang-lru, under smokescreen) and is not refused here.
	case standard && slices.Contains(elems, "internal"):
		return ""
	case strings.HasSuffix(last, "test"):
		return "a test kit (storetest, httptest, ...)"
	}
	return ""
}

type listed struct {
	ImportPath string
	Name       string
	Standard   bool
	Deps       []string
	Error      *struct{ Err string }
}

// goList runs `go list -deps -json` on patterns from the module's root
// with the build's settings and returns every package it lists.
func goList(t *testing.T, goos, goarch, tags string, patterns ...string) []listed {
	t.Helper()
	args := append([]string{"list", "-deps", "-json", "-tags=" + tags}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	cmd.Env = os.Environ()
	if goos != "" {
		cmd.Env = append(cmd.Env, "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// violation is a forbidden package a binary links, and why.
type violation struct{ binary, pkg, why string }

// violations are the forbidden packages each main package among
// patterns links, and the main packages checked.
func violations(t *testing.T, goos, goarch, tags string, patterns ...string) (bad []violation, binaries []string) {
	t.Helper()
	pkgs := goList(t, goos, goarch, tags, patterns...)
	standard := map[string]bool{}
	for _, p := range pkgs {
		standard[p.ImportPath] = p.Standard
	}
	for _, p := range pkgs {
		if p.Name != "main" || !strings.HasPrefix(p.ImportPath, module+"/") {
			continue
		}
		binaries = append(binaries, p.ImportPath)
		for _, d := range p.Deps {
			if why := forbidden(d, standard[d]); why != "" {
				bad = append(bad, violation{p.ImportPath, d, why})
			}
		}
	}
	return bad, binaries
}

// TestProductLinksNoTestBench: no product binary (cmd/..., functions/...)
// links anything under local/, a fault injector or a test kit, built for
// this machine or for the deployment.
func TestProductLinksNoTestBench(t *testing.T) {
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			bad, binaries := violations(t, b.goos, b.goarch, b.tags, productPatterns...)
			for _, want := range []string{"cmd/galley", "cmd/galley-worker", "functions/effects"} {
				if !slices.Contains(binaries, module+"/"+want) {
					t.Errorf("the product's binaries %v lack %s: the patterns no longer find them", binaries, want)
				}
			}
			for _, v := range bad {
				t.Errorf("%s links %s: %s", strings.TrimPrefix(v.binary, module+"/"), v.pkg, v.why)
			}
			t.Logf("%d product binaries checked: %v", len(binaries), binaries)
		})
	}
}

// TestForbiddenRule: the rule refuses the test bench the module holds
// today (each kind by at least one real package) and passes what the
// product is made of, so a rule that drifted to refuse nothing, or
// everything, fails here.
func TestForbiddenRule(t *testing.T) {
	pkgs := goList(t, "", "", "", "./...")
	kinds := map[string][]string{}
	for _, p := range pkgs {
		if why := forbidden(p.ImportPath, p.Standard); why != "" {
			kinds[why] = append(kinds[why], p.ImportPath)
		}
	}
	for _, want := range []string{"local/awslocal", "local/ecsstandin", "pkg/awsfault", "pkg/store/faultstore",
		"pkg/store/storetest", "pkg/runtime/runtimetest", "pkg/doorbell/doorbelltest", "pkg/service/servicetest"} {
		found := false
		for _, ps := range kinds {
			found = found || slices.Contains(ps, module+"/"+want)
		}
		if !found {
			t.Errorf("the rule lets %s through", want)
		}
	}
	for _, ok := range []string{module + "/pkg/service", module + "/pkg/localserver", module + "/pkg/harness",
		module + "/pkg/store/dynamostore", module + "/pkg/conformance", "internal/synctest", "testing"} {
		if why := forbidden(ok, !strings.Contains(ok, ".")); why != "" {
			t.Errorf("the rule refuses %s (%s)", ok, why)
		}
	}
	for why, ps := range kinds {
		t.Logf("%s: %d packages, e.g. %s", why, len(ps), path.Base(ps[0]))
	}
}

// TestDevBinaryCaught: the check fails on a binary that crosses the line.
// galley-dev (local/cmd/galley-dev) links aws-local, its stand-ins and
// the fault injector on purpose: checked as if it were a product binary,
// it is refused, naming them.
func TestDevBinaryCaught(t *testing.T) {
	bad, binaries := violations(t, "", "", "", "./local/cmd/galley-dev")
	if len(binaries) != 1 {
		t.Fatalf("checked %v, want galley-dev alone", binaries)
	}
	var pkgs []string
	for _, v := range bad {
		pkgs = append(pkgs, strings.TrimPrefix(v.pkg, module+"/"))
	}
	for _, want := range []string{"local/awslocal", "local/ecsstandin", "pkg/awsfault"} {
		if !slices.Contains(pkgs, want) {
			t.Errorf("galley-dev's violations %v lack %s", pkgs, want)
		}
	}
}
