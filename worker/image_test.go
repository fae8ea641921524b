package worker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The images scripts/worker-image.sh built, one per agent family (make
// test exports GALLEY_WORKER_IMAGE as the script prints it:
// claude=<ref>,codex=<ref>). Checked as Fargate would run them: their entry
// point and user, their pinned CLI, and their layers as a pull fetches
// them.
func workerImages(t *testing.T) map[string]string {
	t.Helper()
	v := os.Getenv("GALLEY_WORKER_IMAGE")
	if v == "" {
		if os.Getenv("GALLEY_REQUIRE_STANDINS") == "1" {
			t.Fatal("GALLEY_WORKER_IMAGE is unset: build the worker images with `make image` (scripts/worker-image.sh build) and export the refs it prints")
		}
		t.Skip("GALLEY_WORKER_IMAGE unset: no worker image to check (make image)")
	}
	images := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		family, ref, ok := strings.Cut(pair, "=")
		if !ok || ref == "" {
			t.Fatalf("GALLEY_WORKER_IMAGE=%s: %q is not family=ref", v, pair)
		}
		images[family] = ref
	}
	for _, family := range families {
		if images[family] == "" {
			t.Fatalf("GALLEY_WORKER_IMAGE=%s names no %s image", v, family)
		}
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("GALLEY_WORKER_IMAGE=%s but podman is missing: %v", v, err)
	}
	return images
}

// families are the agent families with an image each (worker/Dockerfile's
// targets worker-<family>), and the CLI and npm package of each.
var families = []string{"claude", "codex"}

var clis = map[string]struct{ bin, pkg string }{
	"claude": {"claude", "@anthropic-ai/claude-code"},
	"codex":  {"codex", "@openai/codex"},
}

// podman runs podman with the runtime and ulimits this kind of machine
// needs (as scripts/worker-image.sh does).
func podman(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command("podman", args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func runFlags() []string {
	flags := []string{"--runtime", "runc", "run", "--rm", "--network", "none"}
	ulimits := os.Getenv("GALLEY_CONTAINER_ULIMITS")
	if ulimits == "" {
		ulimits = "nofile=4096:4096 nproc=1000:1000"
	}
	for _, u := range strings.Fields(ulimits) {
		flags = append(flags, "--ulimit", u)
	}
	return flags
}

type imageConfig struct {
	Config struct {
		Entrypoint []string
		Cmd        []string
		User       string
		WorkingDir string
	}
}

func TestWorkerImageConfig(t *testing.T) {
	for family, ref := range workerImages(t) {
		out, stderr, err := podman(t, "image", "inspect", ref)
		if err != nil {
			t.Fatalf("podman image inspect %s: %v: %s", ref, err, stderr)
		}
		var imgs []imageConfig
		if err := json.Unmarshal([]byte(out), &imgs); err != nil || len(imgs) != 1 {
			t.Fatalf("podman image inspect %s: %d images, %v", ref, len(imgs), err)
		}
		c := imgs[0].Config
		if strings.Join(c.Entrypoint, " ") != "/usr/local/bin/galley-worker" {
			t.Errorf("%s: entrypoint %q, want [/usr/local/bin/galley-worker]", family, c.Entrypoint)
		}
		// The harness starts as root so that the agent can run under a uid of
		// its own; the task definition names no user.
		if c.User != "0:0" && c.User != "0" {
			t.Errorf("%s: user %q, want 0:0", family, c.User)
		}
		if c.WorkingDir != "/workspace" {
			t.Errorf("%s: working directory %q, want /workspace", family, c.WorkingDir)
		}
	}
}

// MaxImageBytes is the most a worker image may hold uncompressed (issue
// 30: a Fargate task pulls all of it at every start).
const MaxImageBytes = 1_000_000_000

// Each family's image holds its own CLI alone: at most MaxImageBytes.
func TestWorkerImageSize(t *testing.T) {
	for family, ref := range workerImages(t) {
		out, stderr, err := podman(t, "image", "inspect", "--format", "{{.Size}}", ref)
		if err != nil {
			t.Fatalf("podman image inspect %s: %v: %s", ref, err, stderr)
		}
		size, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("podman image inspect %s: size %q: %v", ref, out, err)
		}
		t.Logf("%s: %.1f MB uncompressed", family, float64(size)/1e6)
		if size > MaxImageBytes {
			t.Errorf("the %s image is %.1f MB uncompressed, more than %.1f MB", family, float64(size)/1e6, float64(MaxImageBytes)/1e6)
		}
	}
}

// The agent runs under a uid of its own: its family's CLI and the harness
// must run for any user, at the version worker/agent-clis pins; the other
// family's CLI is not there, and Claude Code's image has no Node (its CLI
// is a native binary).
func TestWorkerImageCLIs(t *testing.T) {
	images := workerImages(t)
	raw, err := os.ReadFile("agent-clis/package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pins struct{ Dependencies map[string]string }
	if err := json.Unmarshal(raw, &pins); err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		ref := images[family]
		cli := clis[family]
		want := pins.Dependencies[cli.pkg]
		if want == "" {
			t.Fatalf("agent-clis/package.json pins no %s", cli.pkg)
		}
		for _, user := range []string{"0:0", "12345:12345"} {
			args := append(runFlags(), "--user", user, "--entrypoint", cli.bin, ref, "--version")
			out, stderr, err := podman(t, args...)
			if err != nil {
				t.Errorf("%s image: %s --version as %s: %v: %s%s", family, cli.bin, user, err, out, stderr)
				continue
			}
			if !strings.Contains(out, want) {
				t.Errorf("%s image: %s --version as %s printed %q, want the pinned %s", family, cli.bin, user, strings.TrimSpace(out), want)
			}
		}
		// What else is on the image's PATH: the other families' CLIs are
		// not, and node only where the CLI needs it (codex's launcher).
		probe := "for p in claude codex node npm; do command -v $p > /dev/null && echo $p; done; true"
		args := append(runFlags(), "--user", "12345:12345", "--entrypoint", "/bin/sh", ref, "-c", probe)
		out, stderr, err := podman(t, args...)
		if err != nil {
			t.Errorf("%s image: %v: %s", family, err, stderr)
		}
		wantOn := map[string]string{"claude": "claude", "codex": "codex node"}[family]
		if got := strings.Join(strings.Fields(out), " "); got != wantOn {
			t.Errorf("%s image: on PATH %q, want %q", family, got, wantOn)
		}
		// With no configuration the harness refuses to start (exit 2, "bad
		// configuration"): it ran. A uid that cannot execute it gets 126.
		args = append(runFlags(), "--user", "12345:12345", ref)
		_, stderr, err = podman(t, args...)
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 || !strings.Contains(stderr, "bad configuration") {
			t.Errorf("%s image: galley-worker as uid 12345: %v, stderr %q; want exit 2 and its configuration error", family, err, stderr)
		}
	}
}

// Every layer is pulled by every Fargate start: none may only rewrite the
// modes or owners of files a lower layer already holds, and none may hold
// the build machine's egress CA (the build mounts it as a secret).
func TestWorkerImageLayers(t *testing.T) {
	images := workerImages(t)
	for _, family := range families {
		t.Run(family, func(t *testing.T) { checkLayers(t, images[family]) })
	}
}

func checkLayers(t *testing.T, ref string) {
	dir := filepath.Join(t.TempDir(), "oci")
	// Uncompressed: the layers as they are stored, without podman
	// gzipping the image for the test to gunzip (about 20 CPU-s of make
	// test).
	if _, stderr, err := podman(t, "image", "save", "--uncompressed", "--format", "oci-dir", "-o", dir, ref); err != nil {
		t.Fatalf("podman image save %s: %v: %s", ref, err, stderr)
	}
	layers := ociLayers(t, dir)
	needles := egressCAs(t, ref)
	t.Logf("%d layers; looking for %d certificate(s) of the build machine's CA bundle that Debian does not ship", len(layers), len(needles))
	for _, n := range needles {
		t.Logf("looking for %q", n.subject)
	}

	type entry struct {
		hash string // regular files: content; symlinks: target; dirs: empty
		kind byte
	}
	lower := map[string]entry{}
	for i, blob := range layers {
		f, err := os.Open(blob)
		if err != nil {
			t.Fatal(err)
		}
		r, err := maybeGunzip(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(r)
		layer := map[string]entry{}
		var entries, fresh int
		var size int64
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			name := strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")
			entries++
			e := entry{kind: h.Typeflag}
			switch h.Typeflag {
			case tar.TypeReg:
				body, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				size += int64(len(body))
				sum := sha256.Sum256(body)
				e.hash = string(sum[:])
				for _, n := range needles {
					if n.matches(body) {
						t.Errorf("layer %d holds the build machine's CA %q in /%s", i, n.subject, name)
					}
				}
			case tar.TypeSymlink:
				e.hash = h.Linkname
			case tar.TypeLink:
				// A hard link is its target's content: a layer that
				// breaks links (overlayfs copy-up does) adds no content.
				target := strings.TrimPrefix(filepath.Clean("/"+h.Linkname), "/")
				if te, ok := layer[target]; ok {
					e = te
				} else {
					e.hash = h.Linkname
				}
			}
			if strings.HasPrefix(filepath.Base(name), ".wh.") {
				fresh++ // a deletion changes the tree
			} else if old, ok := lower[name]; !ok || old != e {
				fresh++
			}
			layer[name] = e
		}
		f.Close()
		t.Logf("layer %d: %d entries, %d new or changed, %.1f MB of file content", i, entries, fresh, float64(size)/1e6)
		if entries > 0 && fresh == 0 {
			t.Errorf("layer %d (%.1f MB) only rewrites the metadata (modes, owners, times) of %d paths a lower layer holds", i, float64(size)/1e6, entries)
		}
		for k, v := range layer {
			lower[k] = v
		}
	}
}

// ociLayers lists the image's layer blobs, lowest first.
func ociLayers(t *testing.T, dir string) []string {
	t.Helper()
	blob := func(digest string) string {
		return filepath.Join(dir, "blobs", strings.Replace(digest, ":", "/", 1))
	}
	var index struct{ Manifests []struct{ Digest string } }
	readJSON(t, filepath.Join(dir, "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("oci index holds %d manifests, want 1", len(index.Manifests))
	}
	var manifest struct{ Layers []struct{ Digest string } }
	readJSON(t, blob(index.Manifests[0].Digest), &manifest)
	var out []string
	for _, l := range manifest.Layers {
		out = append(out, blob(l.Digest))
	}
	if len(out) == 0 {
		t.Fatal("the image has no layers")
	}
	return out
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func maybeGunzip(f *os.File) (io.Reader, error) {
	var magic [2]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if magic == [2]byte{0x1f, 0x8b} {
		return gzip.NewReader(f)
	}
	return f, nil
}

// needle is one certificate to look for: its public key in DER, and one
// line from the middle of its PEM (a copied PEM file holds that line).
type needle struct {
	subject string
	spki    []byte
	pemLine []byte
}

func (n needle) matches(body []byte) bool {
	return bytes.Contains(body, n.spki) || bytes.Contains(body, n.pemLine)
}

// egressCAs are the certificates of the bundle the build trusted
// (GALLEY_BUILD_CA, default the host's) that Debian's ca-certificates,
// as the image ships it, does not hold: the build machine's own CAs, such
// as a TLS-inspecting proxy's.
func egressCAs(t *testing.T, ref string) []needle {
	t.Helper()
	bundle := os.Getenv("GALLEY_BUILD_CA")
	if bundle == "" {
		bundle = "/etc/ssl/certs/ca-certificates.crt"
	}
	host, err := os.ReadFile(bundle)
	if err != nil {
		t.Logf("no build CA bundle to look for: %v", err)
		return nil
	}
	args := append(runFlags(), "--entrypoint", "/bin/sh", ref, "-c", "cat /usr/share/ca-certificates/mozilla/*.crt")
	debian, stderr, err := podman(t, args...)
	if err != nil {
		t.Fatalf("reading the image's Debian CA sources: %v: %s", err, stderr)
	}
	shipped := map[string]bool{}
	for _, c := range pemCerts(t, []byte(debian)) {
		shipped[string(c.Raw)] = true
	}
	if len(shipped) < 50 {
		t.Fatalf("the image's Debian CA sources hold %d certificates; want the Mozilla set", len(shipped))
	}
	// The host's own ca-certificates may be another release of the
	// Mozilla set: its public roots are no build machine's CA either (and
	// programs such as claude embed public roots of their own).
	hostSources, _ := filepath.Glob("/usr/share/ca-certificates/*/*.crt")
	for _, f := range hostSources {
		if raw, err := os.ReadFile(f); err == nil {
			for _, c := range pemCerts(t, raw) {
				shipped[string(c.Raw)] = true
			}
		}
	}
	var out []needle
	for _, c := range pemCerts(t, host) {
		if shipped[string(c.Raw)] {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))), "\n")
		out = append(out, needle{
			subject: c.Subject.String(),
			spki:    c.RawSubjectPublicKeyInfo,
			pemLine: []byte(lines[len(lines)/2]),
		})
	}
	return out
}

func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Logf("skipping an unparsable certificate: %v", err)
			continue
		}
		out = append(out, c)
	}
}
