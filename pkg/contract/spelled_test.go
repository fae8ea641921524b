package contract_test

import (
	"go/ast"
	"go/build"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// notCounted are the contract's values that are also ordinary words of the
// code in other senses; the test cannot tell those uses from a restated
// name, so it does not count them. Each says where else the word is used.
var notCounted = map[string]string{
	"effects":    "a history route's name, the local store's bucket",
	"reads":      "the load driver's scenario and the conformance output's mark",
	"mailbox":    "an event kind, a store item type",
	"workerapi":  "the worker API client's operation names",
	"reconciler": "a log component",
	"operator":   "a log component, the console's words",
	"worker":     "the protocol's resource kind, the executor's name, a log field",
	"task":       "a protocol field, the ECS word",
	"galley":     "the MCP server's name, codex's provider, git's author, the worker API's wake kind",
	"House":      "a word of messages",
}

// elsewhere are literals equal to a contract value that name another fact,
// by the file (slash-separated, from the repository's root) that holds
// them.
var elsewhere = map[string]map[string]string{
	"infra/stack/secrets.go": {
		"egress-proxy": "the egress secret's name, galley/<house>/egress-proxy (persisted)",
	},
	"infra/stack/egress.go": {
		"egress-proxy": "the egress proxy's container name in its task definition",
	},
}

// testSwitches are galley variables of test kits in product packages: no
// program of the deployment sets or reads them.
var testSwitches = map[string]bool{
	"GALLEY_REQUIRE_STANDINS": true, // pkg/standins: a test that needs a stand-in fails instead of skipping
	"GALLEY_PORCUPINE_HTML":   true, // pkg/history: where the checker writes its visualization
}

// TestEachNameSpelledOnce checks that no product file spells a name of the
// contract: every value of its string constants appears as a string
// literal nowhere in product code (every .go file of the repository and
// infra/ but tests, the contract itself, local/, scripts/ and test data),
// a route's path neither alone nor in a "METHOD path" pattern; and that no
// product file names a galley variable the contract does not hold.
func TestEachNameSpelledOnce(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	names := contractStrings(t)
	if len(names) < 100 {
		t.Fatalf("read only %d names from the contract", len(names))
	}
	byValue := map[string][]string{}
	for name, v := range names {
		byValue[v] = append(byValue[v], name)
	}
	for v := range notCounted {
		if byValue[v] == nil {
			t.Errorf("notCounted holds %q, which is no value of the contract", v)
		}
	}
	files := productFiles(t, root)
	if len(files) < 100 || !slices.Contains(files, "infra/stack/stack.go") || !slices.Contains(files, "pkg/lambdaapp/env.go") {
		t.Fatalf("found only %d product files, or not infra's and the functions'", len(files))
	}
	seen := map[string]bool{}
	for _, rel := range files {
		seen[rel] = true
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			v, ok := restated(s, byValue)
			switch {
			case ok && notCounted[v] == "" && elsewhere[rel][v] == "":
				t.Errorf("%s: %q restates the contract's %s", fset.Position(lit.Pos()), s, strings.Join(byValue[v], ", "))
			case !ok && strings.HasPrefix(s, "GALLEY_") && isEnvName(s) && !testSwitches[s]:
				t.Errorf("%s: %q is a galley variable the contract does not hold", fset.Position(lit.Pos()), s)
			}
			return true
		})
	}
	for rel := range elsewhere {
		if !seen[rel] {
			t.Errorf("elsewhere names %s, which is no product file", rel)
		}
	}
}

// restated reports which contract value s spells: s itself, or a route
// pattern "METHOD path".
func restated(s string, byValue map[string][]string) (string, bool) {
	if byValue[s] != nil {
		return s, true
	}
	method, path, ok := strings.Cut(s, " ")
	if ok && strings.HasPrefix(path, "/") && method == strings.ToUpper(method) && byValue[path] != nil {
		return path, true
	}
	return "", false
}

// isEnvName reports whether s is a whole variable name (not a message
// that begins with one).
func isEnvName(s string) bool {
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// contractStrings answers the contract's string constants by name, their
// values as the compiler computes them.
func contractStrings(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if build.Default.GOROOT == "" {
		// A -trimpath test binary (make test builds so) records no
		// GOROOT, and the source importer needs it for the standard
		// library: ask the go command.
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Fatalf("go env GOROOT: %v", err)
		}
		build.Default.GOROOT = strings.TrimSpace(string(out))
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("github.com/galley-run/galley/pkg/contract", fset, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if ok && c.Exported() && c.Val().Kind() == constant.String {
			out[name] = constant.StringVal(c.Val())
		}
	}
	return out
}

// productFiles lists the product's Go files, relative to root.
func productFiles(t *testing.T, root string) []string {
	t.Helper()
	skip := map[string]bool{"pkg/contract": true, "local": true, "scripts": true, "node_modules": true,
		"cdk.out": true, "bin": true, ".git": true}
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skip[rel] || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}
