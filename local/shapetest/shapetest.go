// Package shapetest holds the scenarios that run against both of galley's
// shapes, written once as storetest is for the stores: the local shape
// (galley serve, its workers local processes under the harness's
// confinement) and aws-local (the stack deployed from its template, its
// workers containers of the worker image). They are the adversarial agent
// (Adversarial), the operator console in a browser (Console) and the
// operator API with its commands (Operator).
//
// A shape's test supplies what differs, as data and a few methods: how to
// start the shape, where the attacks' targets are as an agent names them,
// how to read a worker's files and processes from this machine, which
// attacks apply, how its network and file system refuse them, how its
// runtime records a worker's compute. The flow, the attacks and the checks
// common to both are here. kitchn's side (effects, the mailbox, observe)
// is the shape's own client behind Kitchn.
//
// The scenarios never assert speed: every wait is a generous bound against
// a hang.
package shapetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/local/testnet"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
	"github.com/galley-run/galley/pkg/store"
)

// Kitchn is kitchn's side of a started shape: one run's effects and its
// coordinator's mailbox, and what the operator side needs to reach it.
type Kitchn interface {
	// Effect applies the worker effect (its JSON) under key and answers
	// its status ("applied", or the status and reason it was not) and its
	// receipt.
	Effect(t *testing.T, key, effect string) (status string, receipt protocol.Receipt)
	// Next answers the first row of the run's mailbox from now on that
	// match accepts, acknowledging what it reads. It fails the test when
	// a worker-done comes first (unless what names one) or after the
	// shape's patience.
	Next(t *testing.T, what string, match func(protocol.MailMessage) bool) protocol.MailMessage
	// Observe answers kitchn's observation of a worker.
	Observe(t *testing.T, handle string) protocol.Observation
	// Endpoint is galley's URL as kitchn calls it; Token is kitchn's
	// bearer token, House the house it names.
	Endpoint() string
	Token() string
	House() string
	// OperatorToken is the operator's bearer token.
	OperatorToken() string
}

// Kind matches a mailbox row of kind whose body starts with prefix.
func Kind(kind, prefix string) func(protocol.MailMessage) bool {
	return func(r protocol.MailMessage) bool { return r.Kind == kind && strings.HasPrefix(r.Body, prefix) }
}

// WorkerRes is the JSON of a worker resource.
func WorkerRes(handle string) string {
	return fmt.Sprintf(`{"kind":"worker","backend":"galley","handle":%q}`, handle)
}

// apply applies a worker effect and fails the test unless it was applied.
func apply(t *testing.T, k Kitchn, key, effect string) protocol.Receipt {
	t.Helper()
	st, rc := k.Effect(t, key, effect)
	if st != "applied" {
		t.Fatalf("effect %s: %s", key, st)
	}
	return rc
}

// launch launches a worker of the claude family on branch (isolated) or,
// with worktree set, in that existing worktree, and answers the worker's
// and the worktree's handles.
func launch(t *testing.T, k Kitchn, key, worktree, branch, brief string) (worker, wt string) {
	t.Helper()
	b, _ := json.Marshal(brief)
	ws, br := `{"type":"isolated"}`, fmt.Sprintf(`,"branch":%q`, branch)
	if worktree != "" {
		ws, br = `{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"`+worktree+`"}}`, ""
	}
	rc := apply(t, k, key, fmt.Sprintf(`{"type":"launch-worker","role":"station-cook","workspace":%s,"brief":%s%s,"agent":{"agent":"claude"}}`, ws, b, br))
	worker, wt = rc.CreatedHandle(protocol.KindWorker), rc.CreatedHandle(protocol.KindWorktree)
	if worker == "" {
		t.Fatalf("launch %s created no worker: %+v", key, rc)
	}
	return worker, wt
}

// Events reads a worker's whole retained event log through the operator
// API.
func Events(t *testing.T, k Kitchn, handle string) []store.Event {
	t.Helper()
	client := operator.NewClient(k.Endpoint(), k.OperatorToken())
	var out []store.Event
	var after int64
	for {
		a, err := client.Events(t.Context(), handle, after, 0)
		if err != nil {
			t.Fatalf("the events of %s: %v", handle, err)
		}
		if len(a.Events) == 0 {
			return out
		}
		out = append(out, a.Events...)
		after = a.Next
	}
}

// HasEvent reports whether es holds an event of kind with fields (each
// field equal; nil fields: any event of kind).
func HasEvent(es []store.Event, kind string, fields map[string]string) bool {
	return slices.ContainsFunc(es, func(e store.Event) bool {
		if e.Kind != kind {
			return false
		}
		for k, v := range fields {
			if e.Fields[k] != v {
				return false
			}
		}
		return true
	})
}

// RandomHex is 16 random bytes in hex.
func RandomHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// SHA256Hex is the SHA-256 of v in hex.
func SHA256Hex(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

// RevParse is the commit ref names in the git directory repo, or "".
func RevParse(repo, ref string) string {
	out, err := exec.Command("git", "--git-dir", repo, "rev-parse", "--verify", "--quiet", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TreeBytes is the size of the regular files beneath dir.
func TreeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (a temporary file)
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// SnapshotOwned lists every entry beneath each of paths (itself included)
// with its mode, owner and content (a link's target), or that it is
// missing.
func SnapshotOwned(t *testing.T, paths ...string) string {
	t.Helper()
	var b strings.Builder
	for _, root := range paths {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				fmt.Fprintf(&b, "%s missing\n", p)
				return nil
			}
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			fmt.Fprintf(&b, "%s %v %d:%d", p, fi.Mode(), st.Uid, st.Gid)
			switch {
			case fi.Mode().IsRegular():
				c, _ := os.ReadFile(p)
				fmt.Fprintf(&b, " %q", c)
			case fi.Mode()&fs.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				fmt.Fprintf(&b, " -> %s", l)
			}
			b.WriteString("\n")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// plantFile writes content to dst (in an attacker's worktree, once it is
// made), readable by the attacker, as a thief who read it would hold it.
// The content is never logged.
func plantFile(t *testing.T, dst, content string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(filepath.Dir(dst)); err == nil && fi.IsDir() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not made", filepath.Dir(dst))
		}
	}
	if err := os.WriteFile(dst, []byte(content+"\n"), 0o644); err != nil {
		t.Fatalf("planting %s: %v", filepath.Base(dst), err)
	}
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
}

// HostBeyond makes a host of the internet for the test (local/testnet),
// listening on 443 (it says "beyond" and closes) and 80 (HTTP), reached
// from this machine's network (checked), so that a worker's failure to
// reach it is its own network's doing. Where none can be made (not root,
// no iproute2) it answers nil, unless required or under
// GALLEY_REQUIRE_STANDINS=1, where the test fails.
func HostBeyond(t *testing.T, required bool) *testnet.Host {
	t.Helper()
	h, err := testnet.New()
	if errors.Is(err, testnet.ErrUnavailable) && !required && os.Getenv("GALLEY_REQUIRE_STANDINS") != "1" {
		t.Logf("the attacks on a host beyond are left out: %v", err)
		return nil
	}
	if err != nil {
		t.Fatalf("a host beyond: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	tls, err := h.Listen(443)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := tls.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "beyond\n")
			c.Close()
		}
	}()
	web, err := h.Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = http.Serve(web, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "the host beyond, port 80\n")
		}))
	}()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(h.Addr.String(), "443"), 10*time.Second)
	if err != nil {
		t.Fatalf("the host beyond does not answer this machine: %v", err)
	}
	c.Close()
	return h
}

// kitchnCallsDuringFlood makes n kitchn calls (GET /v1/descriptor, each
// on a new connection, as a client without keep-alive) and answers how
// many it made and how many failed.
func kitchnCallsDuringFlood(t *testing.T, k Kitchn, n int) (calls, failures int) {
	t.Helper()
	kc := client.New(k.Endpoint(), k.Token(), client.WithTimeout(30*time.Second))
	for range n {
		calls++
		a, err := kc.Call(context.Background(), contract.RouteDescriptor, nil, "", 0)
		if err != nil {
			failures++
			t.Logf("kitchn's call %d during the flood: %v", calls, err)
			continue
		}
		if a.Status != 200 {
			failures++
			t.Logf("kitchn's call %d during the flood: status %d", calls, a.Status)
		}
	}
	return calls, failures
}

// runNode runs a playwright-core script of this package's testdata with
// node, in the module's root (where node_modules is), and decodes the one
// JSON object it prints into out.
func runNode(t *testing.T, root, script string, env []string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(root, "local", "shapetest", "testdata", script))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", script, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), out); err != nil {
		t.Fatalf("%s printed %q: %v", script, stdout.String(), err)
	}
}
