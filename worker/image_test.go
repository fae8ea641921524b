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
	"strings"
	"testing"
)

// The image scripts/worker-image.sh built (make test exports it). Checked
// as Fargate would run it: its entry point and user, its pinned CLIs, and
// its layers as a pull fetches them.
func workerImage(t *testing.T) string {
	t.Helper()
	ref := os.Getenv("GALLEY_WORKER_IMAGE")
	if ref == "" {
		if os.Getenv("GALLEY_REQUIRE_STANDINS") == "1" {
			t.Fatal("GALLEY_WORKER_IMAGE is unset: build the worker image with `make image` (scripts/worker-image.sh build) and export its ref")
		}
		t.Skip("GALLEY_WORKER_IMAGE unset: no worker image to check (make image)")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("GALLEY_WORKER_IMAGE=%s but podman is missing: %v", ref, err)
	}
	return ref
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
	ref := workerImage(t)
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
		t.Errorf("entrypoint %q, want [/usr/local/bin/galley-worker]", c.Entrypoint)
	}
	// The harness starts as root so that the agent can run under a uid of
	// its own; the task definition names no user.
	if c.User != "0:0" && c.User != "0" {
		t.Errorf("user %q, want 0:0", c.User)
	}
	if c.WorkingDir != "/workspace" {
		t.Errorf("working directory %q, want /workspace", c.WorkingDir)
	}
}

// The agent runs under a uid of its own: the CLIs and the harness must run
// for any user, and at the versions worker/agent-clis pins.
func TestWorkerImageCLIs(t *testing.T) {
	ref := workerImage(t)
	raw, err := os.ReadFile("agent-clis/package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pins struct{ Dependencies map[string]string }
	if err := json.Unmarshal(raw, &pins); err != nil {
		t.Fatal(err)
	}
	for cli, pkg := range map[string]string{"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex"} {
		want := pins.Dependencies[pkg]
		if want == "" {
			t.Fatalf("agent-clis/package.json pins no %s", pkg)
		}
		for _, user := range []string{"0:0", "12345:12345"} {
			args := append(runFlags(), "--user", user, "--entrypoint", cli, ref, "--version")
			out, stderr, err := podman(t, args...)
			if err != nil {
				t.Errorf("%s --version as %s: %v: %s%s", cli, user, err, out, stderr)
				continue
			}
			if !strings.Contains(out, want) {
				t.Errorf("%s --version as %s printed %q, want the pinned %s", cli, user, strings.TrimSpace(out), want)
			}
		}
	}
	// With no configuration the harness refuses to start (exit 2, "bad
	// configuration"): it ran. A uid that cannot execute it gets 126.
	args := append(runFlags(), "--user", "12345:12345", ref)
	_, stderr, err := podman(t, args...)
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 || !strings.Contains(stderr, "bad configuration") {
		t.Errorf("galley-worker as uid 12345: %v, stderr %q; want exit 2 and its configuration error", err, stderr)
	}
}

// Every layer is pulled by every Fargate start: none may only rewrite the
// modes or owners of files a lower layer already holds, and none may hold
// the build machine's egress CA (the build mounts it as a secret).
func TestWorkerImageLayers(t *testing.T) {
	ref := workerImage(t)
	dir := filepath.Join(t.TempDir(), "oci")
	// Uncompressed: the layers as they are stored, without podman
	// gzipping 1.3 GB for the test to gunzip (about 20 CPU-s of make test).
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
