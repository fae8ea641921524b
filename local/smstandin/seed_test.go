package smstandin

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

func TestParseSeedSpec(t *testing.T) {
	for spec, want := range map[string]SeedSpec{
		"galley/main/anthropic=env:ANTHROPIC_API_KEY": {"galley/main/anthropic", "env", "ANTHROPIC_API_KEY"},
		"galley/main/git-credential=file:/run/x:y":    {"galley/main/git-credential", "file", "/run/x:y"},
		"a=file:rel/path": {"a", "file", "rel/path"},
	} {
		got, err := ParseSeedSpec(spec)
		if err != nil || got != want || got.String() != spec {
			t.Errorf("ParseSeedSpec(%q) = %+v %v", spec, got, err)
		}
	}
	for _, spec := range []string{"", "noequals", "=env:X", "bad name=env:X", "a=env:", "a=file:", "a=vault:x", "a=X"} {
		if _, err := ParseSeedSpec(spec); err == nil {
			t.Errorf("ParseSeedSpec(%q) succeeded", spec)
		}
	}
	if _, err := ParseSeedSpecs([]string{"a=env:A", "b"}); err == nil {
		t.Error("ParseSeedSpecs accepted a bad spec")
	}
}

func writeSecretFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func TestSeedPutsNewCurrentVersions(t *testing.T) {
	h := newHarness(t)
	generated := GenerateSecretString{PasswordOptions: PasswordOptions{PasswordLength: 32}}
	for _, n := range []string{"galley/main/anthropic", "galley/main/git-credential"} {
		if _, err := h.srv.CreateGenerated(n, generated); err != nil {
			t.Fatal(err)
		}
	}
	placeholder := aws.ToString(h.get(t, "galley/main/anthropic").SecretString)
	key, cred := value(), value()
	t.Setenv("SMSTANDIN_TEST_KEY", key)
	file := writeSecretFile(t, t.TempDir(), "cred", cred+"\n", 0o600)
	specs, err := ParseSeedSpecs([]string{"galley/main/anthropic=env:SMSTANDIN_TEST_KEY", "galley/main/git-credential=file:" + file})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Seed(specs...); err != nil {
		t.Fatal(err)
	}
	if got := h.get(t, "galley/main/anthropic"); aws.ToString(got.SecretString) != key {
		t.Error("the anthropic secret does not hold the variable's value")
	}
	if got := h.get(t, "galley/main/git-credential"); aws.ToString(got.SecretString) != cred {
		t.Error("the git credential does not hold the file's value without its newline")
	}
	prev, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("galley/main/anthropic"), VersionStage: aws.String(StagePrevious)})
	if err != nil || aws.ToString(prev.SecretString) != placeholder {
		t.Errorf("the generated placeholder is not AWSPREVIOUS: %v", err)
	}
}

func TestSeedRefusals(t *testing.T) {
	h := newHarness(t)
	if _, err := h.srv.Create("s", value()); err != nil {
		t.Fatal(err)
	}
	before := aws.ToString(h.get(t, "s").SecretString)
	dir := t.TempDir()
	v := value()
	good := writeSecretFile(t, dir, "good", v, 0o600)
	open := writeSecretFile(t, dir, "open", v, 0o644)
	big := writeSecretFile(t, dir, "big", strings.Repeat("x", MaxSeedFile+1), 0o600)
	empty := writeSecretFile(t, dir, "empty", "\n", 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SMSTANDIN_TEST_EMPTY", "")
	for spec, want := range map[string]string{
		"s=file:" + link:                            "symbolic link",
		"s=file:" + open:                            "open to others",
		"s=file:" + big:                             "larger than",
		"s=file:" + empty:                           "empty",
		"s=file:" + sub:                             "not a regular file",
		"s=file:" + filepath.Join(dir, "none"):      "no such file",
		"s=env:SMSTANDIN_TEST_UNSET_" + rand.Text(): "not set",
		"s=env:SMSTANDIN_TEST_EMPTY":                "empty",
		"undefined=file:" + good:                    "no such secret",
	} {
		sp, err := ParseSeedSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		err = h.srv.Seed(sp)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Seed(%s) = %v, want an error saying %q", spec, err, want)
			continue
		}
		// The error names the secret and the source, never the value.
		if !strings.Contains(err.Error(), sp.Secret) || !strings.Contains(err.Error(), sp.Source+":"+sp.Ref) || strings.Contains(err.Error(), v) {
			t.Errorf("Seed(%s) error %q does not name its secret and source, or holds the value", spec, err)
		}
	}
	// One bad spec puts nothing, not even the good ones before it.
	if err := h.srv.Seed(SeedSpec{"s", "file", good}, SeedSpec{"s", "file", open}); err == nil {
		t.Fatal("Seed with a bad spec succeeded")
	}
	if got := aws.ToString(h.get(t, "s").SecretString); got != before {
		t.Fatal("a failed Seed changed the secret")
	}
}
