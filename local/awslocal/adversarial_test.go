package awslocal_test

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// openParents lets other users traverse the folders above dir (t.TempDir's
// are mode 0700), as an operator's data folder must be for agents that run
// under uids of their own.
func openParents(t *testing.T, dir string) {
	t.Helper()
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
}

// anthropicOrigin is the provider's base URL in the adversarial test's
// copy of the template (context anthropicBaseUrl), served by the provider
// stand-in.
const anthropicOrigin = "https://anthropic.llm-gateway.example"

// TestAdversarialAgentAWSLocal runs the adversarial scenario
// (shapetest.Adversarial) through the stack deployed from its template,
// its workers containers of the worker image: a worker task started from
// the task definition, its agent under a uid of its own, on the stack's
// network, which reaches the stack's egress service and its task endpoint
// alone (GALLEY_AGENT_NETWORK=task: the platform confines the task's
// network). Every attack fails, for the reason the verdict must show, and
// the honest path works.
//
// What the worker containers share is attacked as it appears in the
// attacker's container: the git object cache on the shared file system
// (EFS, mounted through its access point), the victim's worktree by the
// path it has in the victim's task (each worktree is on its task's own
// storage, which no other task has, as on Fargate), and the links the
// attacker plants in its .git (a root-only folder on the file system, the
// cache's mirror, the victim's git directory) before its worktree is
// reused and released: the reuse, a new task, is read in that task's own
// storage (Reusing), the release checked by that storage's removal with
// its container and the snapshot's deletion (Released). The network
// attacks aim at a host beyond (local/testnet) by address and by name
// (the egress service resolves names with the test's DNS server, where
// evil.example and allowed.example point at the host beyond), at every
// resolver, at the API and the gateway, at the raw stand-ins, and at the
// victim's model-proxy token; the controls that must answer are the
// egress service (for a dial), allowed.example through the egress proxy,
// and the attacker's own model-proxy token. The house's provider keys
// (set in Secrets Manager) are hunted for by hash. In this shape there
// is no signing key or store on disk (they are in the Secrets Manager
// stand-in and DynamoDB Local, reached only through the IAM gates); those
// two attacks aim at the house repository's storage instead, and
// task-credentials aims at the real task role's endpoint.
func TestAdversarialAgentAWSLocal(t *testing.T) {
	// Parallel: on its own stack; most of its time is the attacks' waits,
	// which the doc commands' builds and the idle minute can share.
	t.Parallel()
	if requireWorkerImage(t) == "" {
		// Workers as host programs share this machine's network: nothing
		// confines their agents' (docs/aws-local.md).
		t.Skipf("%s is not set: the adversarial agent runs in a container of the worker image", awslocal.EnvWorkerImage)
	}
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Fatalf("the uid confinement cannot run here (%s): agents would reach the stack's folders", why)
	}
	shapetest.Adversarial(t, shapetest.Adversary{
		RequireBeyond: true,
		LogLimit:      harness.DefaultLogLimit,
		Start:         startAdversarialStack,
	})
}

// stackAdversary is what the adversarial scenario's stack keeps between
// its steps.
type stackAdversary struct {
	w              shapetest.World
	tg             *standin.Targets
	victimTask     string // the victim's task's id
	mirror         string
	victimWS       string // in the containers
	workerEndpoint string
	victimCred     string
	stackPorts     map[uint64]bool
	fdsBefore      int
	socketsBefore  int
	attackerTask   string // the attacker's task's id

	// What Released checks is gone once the reuse's task ended and the
	// worktree was released: its task's storage, its container's record
	// in podman's storage, the worktree's snapshot.
	reuseLayer, reuseRecord string // on the host
	snapshotBucket          string
	snapshotKey             string
}

// startAdversarialStack deploys the stack for the scenario. The template's
// push caps (the harness's defaults, 100 MiB a push and 512 MiB a worker)
// are too large to flood on this machine; the test's copy sets smaller ones
// through the same task environment, so the flood meets the same gate and
// configuration path as on AWS; so does its model cap (what context key
// modelCapTokens would set). It also sets what context keys
// egressAllowlist and anthropicBaseUrl would: the allowlist in the
// worker's and the egress service's task definitions, the provider's base
// URL in the worker's and its host among the harness's destinations at the
// egress service. The house's keys go in Secrets Manager.
func startAdversarialStack(t *testing.T, w shapetest.World) shapetest.House {
	tpl := mutatedTemplate(t, func(res map[string]any) error {
		cs, err := workerContainers(res)
		if err != nil {
			return err
		}
		for _, c := range cs {
			setEnv(c, harness.EnvPushLimit, strconv.Itoa(shapetest.FloodPushLimit))
			setEnv(c, harness.EnvPushBudget, strconv.Itoa(shapetest.FloodPushBudget))
			setEnv(c, contract.EnvModelCapTokens, strconv.FormatInt(shapetest.ModelCapTokens, 10))
			setEnv(c, harness.EnvAnthropicBaseURL, anthropicOrigin)
			if envOf(c, egress.EnvAllow) == nil {
				return fmt.Errorf("the worker's task sets no %s", egress.EnvAllow)
			}
			setEnv(c, egress.EnvAllow, shapetest.AllowedName)
		}
		e, err := egressContainer(res)
		if err != nil {
			return err
		}
		setEnv(e, egress.EnvAllow, shapetest.AllowedName)
		dests := envOf(e, egress.EnvHarnessAllow)
		if dests == nil {
			return fmt.Errorf("the egress proxy's task sets no %s", egress.EnvHarnessAllow)
		}
		setEnv(e, egress.EnvHarnessAllow, map[string]any{"Fn::Join": []any{",", []any{dests, strings.TrimPrefix(anthropicOrigin, "https://")}}})
		return nil
	})
	s, token, _ := startStackLogged(t, func(c *awslocal.Config) {
		openParents(t, c.Data)
		c.Template = tpl
		c.WorkerServices = map[string]http.Handler{anthropicOrigin: w.Provider.Config.Handler}
		c.Options.EgressResolver = w.DNS.Addr
	})
	if netName, _ := s.WorkerNetwork(); netName == "" || s.EgressAddress() == "" {
		t.Fatal("the stack runs no container network or no egress service although a worker image is set")
	}
	h := newStackHouse(t, s, token, "run-adv")
	// The key hunt reads the image's files before its verdict: a bound
	// against a hang, not a time to meet.
	h.k.patience = 5 * time.Minute
	for name, key := range map[string]string{"anthropic": w.AnthropicKey, "openai": w.OpenAIKey} {
		if err := s.PutSecret(t.Context(), "galley/"+h.House()+"/"+name, key); err != nil {
			t.Fatal(err)
		}
	}
	h.adv = &stackAdversary{w: w, workerEndpoint: s.FunctionEnv(lambdaapp.Effects)[contract.EnvWorkerEndpoint]}
	return h
}

func (h *stackHouse) Repository() string { return h.s.Repository() }

// ProcessEnv finds the process by its pid in its container's namespace
// and its working folder, the worker's worktree.
func (h *stackHouse) ProcessEnv(t *testing.T, worker, hang string) map[string]string {
	return processEnv(t, hangingPid(t, hang), workerTask(t, h.s, worker).Workspace)
}

func (h *stackHouse) Workspace(t *testing.T, worker string) string {
	return workerTask(t, h.s, worker).Workspace
}

// Aim: the house's secrets as this shape holds them (kitchn's token file,
// the house repository's storage for the signing key and the store, which
// are in Secrets Manager and DynamoDB Local here), the victim's token in
// its container's configuration, its worktree (at its path in the
// victim's task) and branch, the git object cache as the containers see
// it on the shared file system, the links' targets, and the network: the raw stand-ins at
// the addresses a worker container would name them, the API and the
// gateway, more resolvers; the egress service, which a worker container
// does reach, is every dial's control. The host side answers each from
// this machine (checked), so a refusal in the container is the stack
// network's.
func (h *stackHouse) Aim(t *testing.T, v shapetest.Victim, tg *standin.Targets) shapetest.Aimed {
	s, a := h.s, h.adv
	a.tg = tg
	victimTask := workerTask(t, s, v.Handle)
	a.victimTask = victimTask.ID
	a.victimWS = victimTask.Env[harness.EnvWorkspace]
	// The cache is on the shared file system, which the stack mounts in
	// every worker task.
	cache := victimTask.Env[harness.EnvGitCache]
	if cache == "" || cache == "off" {
		t.Fatalf("the worker task sets %s=%q: there is no cache on the shared file system to attack", harness.EnvGitCache, cache)
	}
	mirrors, _ := filepath.Glob(filepath.Join(h.onHost(t, cache), "*.git"))
	if len(mirrors) != 1 {
		t.Fatalf("the git object cache holds %d mirrors, want the house repository's one: %v", len(mirrors), mirrors)
	}
	a.mirror = filepath.Join(cache, filepath.Base(mirrors[0]))
	t.Run("the cache is the harness's alone", func(t *testing.T) {
		// docs/git.md: the folder is the harness's (root's), mode 0700.
		fi, err := os.Stat(h.onHost(t, cache))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o700 || st.Uid != 0 {
			t.Errorf("the git object cache is mode %v, owner %d: want 0700, root's", fi.Mode().Perm(), st.Uid)
		}
	})

	repo := s.Repository()
	tg.KitchnToken = s.TokenFile()
	tg.WorkerSecret = filepath.Join(repo, "config")
	tg.Store = filepath.Join(repo, "HEAD")
	tg.OtherWorkspace = a.victimWS
	tg.SecretNames = []string{"GALLEY_ANTHROPIC_API_KEY", "GALLEY_OPENAI_API_KEY", "GALLEY_GIT_CREDENTIAL", "GALLEY_EGRESS_SECRET",
		"GALLEY_WORKER_BOOTSTRAP", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"}
	// The cache: the victim's branch as its mirror holds it (fetched
	// there by the attacker's own launch), and the mirror.
	tg.GitCacheFile = filepath.Join(a.mirror, "refs", "heads", "adv", "victim")
	tg.GitCacheMirror = a.mirror
	// No launch file on the host: the victim's token travels in its
	// container's configuration, which podman keeps on the host.
	var err error
	if tg.OtherToken, err = s.ECS().ContainerConfig(victimTask.ID); err != nil {
		t.Fatal(err)
	}
	// The links attack points the attacker's .git/info at a root-only
	// folder on the shared file system (in the cache's folder: the access
	// point shows nothing else), its .git/objects/info at the cache's
	// mirror's and its .git/modules at the victim's git directory (in the
	// victim's task; in another, a path to nothing), each named as a root
	// harness in a container would follow it: none may change when galley
	// scrubs, reuses or releases the worktree.
	rootOnly := filepath.Join(cache, "adv-root-only")
	if err := os.MkdirAll(filepath.Join(h.onHost(t, rootOnly), "info"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.onHost(t, rootOnly), "info", "attributes"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg.LinkInfo = filepath.Join(rootOnly, "info")
	tg.LinkObjectsInfo = filepath.Join(a.mirror, "objects", "info")
	tg.LinkModules = filepath.Join(a.victimWS, ".git")
	linked := []string{h.onHost(t, rootOnly), h.onHost(t, tg.LinkObjectsInfo), h.onHost(t, tg.LinkModules)}
	// What read-other-workspace reads is there, in the victim's task: its
	// refusal in the attacker's is that no task has another's storage.
	otherConfig := filepath.Join(h.onHost(t, a.victimWS), ".git", "config")
	for _, p := range append([]string{tg.KitchnToken, tg.OtherToken, tg.WorkerSecret, otherConfig}, linked...) {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("target %s does not exist, so its attack would prove nothing: %v", p, err)
		}
	}

	// The network.
	_, gw := s.WorkerNetwork()
	tg.DialControl = s.EgressAddress()
	for what, raw := range map[string]string{"DynamoDB Local": os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), "fauxqs": os.Getenv("AWS_ENDPOINT_URL_SQS")} {
		u, err := url.Parse(raw)
		if err != nil || u.Port() == "" {
			t.Fatalf("no endpoint for %s: %q", what, raw)
		}
		tg.RawStandins = append(tg.RawStandins, net.JoinHostPort(gw.String(), u.Port()), u.Host)
	}
	api, err := url.Parse(a.workerEndpoint)
	if err != nil || api.Host == "" {
		t.Fatalf("worker endpoint %q: %v", a.workerEndpoint, err)
	}
	gateway, err := url.Parse(s.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	tg.GalleyAddress = gateway.Host
	tg.GalleyAddresses = []string{api.Host, net.JoinHostPort(gw.String(), gateway.Port())}
	// The resolvers beside the house's DNS server where it listens (this
	// machine's loopback): the same relayed to the network's host side,
	// where a container would reach it if the network let it, and the
	// gateway's port 53, where podman's own DNS would answer.
	relay := startDNSRelay(t, gw, a.w.DNS.Addr)
	tg.Resolvers = append(tg.Resolvers, relay, net.JoinHostPort(gw.String(), "53"))
	t.Run("the host side answers", func(t *testing.T) {
		for _, addr := range append(append([]string{tg.DialControl, api.Host}, tg.RawStandins...), tg.EvilAddrs...) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Errorf("%s does not answer this machine, so its refusal in a container would prove nothing: %v", addr, err)
				continue
			}
			c.Close()
		}
		for _, network := range []string{"udp", "tcp"} {
			if got, err := lookupVia(relay, network, shapetest.EvilName); err != nil || len(got) != 1 || got[0] != a.w.Beyond.Addr.String() {
				t.Errorf("the house's DNS server, relayed at %s, over %s: %v %v", relay, network, got, err)
			}
		}
	})
	// The stolen credential is tried at the API directly and through the
	// egress proxy. The connection flood aims at what the agent reaches:
	// its harness's servers and the egress service. The key hunt reads the
	// whole of the image's readable files (about 310 MiB of their first
	// 4 MiB each), not its default bound of 256 MiB.
	tg.WorkerEndpoint, tg.StolenViaProxy = a.workerEndpoint, true
	tg.FloodEgress = s.EgressAddress()
	tg.KeyHuntMiB, tg.KeyHuntSeconds = 1024, 240
	return shapetest.Aimed{VictimWorkspace: h.onHost(t, a.victimWS), Linked: linked}
}

// onHost is where the container path p, in the victim's task (its own
// storage, or the shared file system it mounts), is on this machine.
func (h *stackHouse) onHost(t *testing.T, p string) string {
	t.Helper()
	host := h.s.ECS().HostPath(h.adv.victimTask, p)
	if host == "" {
		t.Fatalf("the ECS stand-in knows no host folder of %s in the victim's task", p)
	}
	return host
}

// Baseline counts the connections on the stack's own ports (the stack
// runs in this process, beside the parallel tests' stacks) and this
// process's descriptors.
func (h *stackHouse) Baseline(t *testing.T) {
	s, a := h.s, h.adv
	stackURLs := []string{s.Endpoint(), a.workerEndpoint, s.GitURL(), "http://" + s.EgressAddress()}
	for _, svc := range iamgate.Services {
		stackURLs = append(stackURLs, s.GateURL(svc))
	}
	a.stackPorts = portsOf(t, stackURLs...)
	a.fdsBefore, a.socketsBefore = openFDs(t), stackSockets(t, a.stackPorts)
}

// StolenCredential is the credential galley handed the victim's harness,
// made as the worker API makes it.
func (h *stackHouse) StolenCredential(t *testing.T, v shapetest.Victim) string {
	h.adv.victimCred = victimCredential(t, h.s, v.Handle, shapetest.VictimKey)
	return h.adv.victimCred
}

// Refusals: the worker API is out of a worker container's network; each
// attack failed for the reason its verdict must show on the stack's
// network, the shared file system and the task's own storage.
func (h *stackHouse) Refusals(t *testing.T, attacker string) shapetest.Refusals {
	return shapetest.Refusals{
		APIOutOfReach: true,
		Check: func(t *testing.T, name, v string) {
			if name == "stolen-token" {
				checkStolenTokenOutOfReach(t, v)
			}
			checkContainerRefusal(t, name, v, *h.adv.tg)
		},
	}
}

// Ended waits for the worker's task to stop.
func (h *stackHouse) Ended(t *testing.T, worker string) {
	t.Helper()
	id := workerTask(t, h.s, worker).ID
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		status := ""
		for _, task := range h.s.ECS().Tasks() {
			if task.ID == id {
				status = task.LastStatus
			}
		}
		if status == "STOPPED" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task of %s did not stop (last status %q)", worker, status)
		}
	}
}

func (h *stackHouse) AfterAttacks(t *testing.T, v shapetest.Victim, attacker string) {
	s, a := h.s, h.adv
	a.attackerTask = workerTask(t, s, attacker).ID
	ctx := t.Context()
	// Out of the agent's reach, the victim's credential is still refused
	// to anyone without its harness's key: presented from this machine
	// (as a thief who carried it out of the worker would, to the API that
	// is public on AWS), as a bearer credential and with a proof of
	// another key, the second refused as bound to another key, which
	// shows the credential genuine.
	t.Run("a stolen credential is bound to its harness's key", func(t *testing.T) {
		ok, verdict := standin.PresentCredential(ctx, a.victimCred, a.workerEndpoint, nil)
		t.Log(verdict)
		if ok {
			t.Errorf("the victim's credential, stolen, was accepted: %s", verdict)
		}
		if err := standin.CheckVerdict("stolen-token", verdict); err != nil {
			t.Error(err)
		}
	})
	// The chain's far end, from this machine: the egress service, asked
	// as the harness (as a worker's proxy chains to it), reaches the
	// allowlisted name by the house's resolver, and refuses the other.
	t.Run("the egress service reaches the allowlisted name", func(t *testing.T) {
		secret, err := s.SecretValue(ctx, "galley/"+h.House()+"/egress-proxy")
		if err != nil {
			t.Fatal(err)
		}
		auth := base64.StdEncoding.EncodeToString([]byte(egress.HarnessUser + ":" + secret))
		for name, want := range map[string]string{shapetest.AllowedName: "200 beyond", shapetest.EvilName: "403"} {
			if got := connectAs(t, s.EgressAddress(), net.JoinHostPort(name, "443"), auth); !strings.HasPrefix(got, want) {
				t.Errorf("CONNECT %s:443 through the egress service as the harness: %q, want %q", name, got, want)
			}
		}
		if a.w.DNS.Queries(shapetest.AllowedName) == 0 {
			t.Error("the egress service never asked the house's resolver for the allowlisted name")
		}
	})
	t.Run("the stack's descriptors back within bounds", func(t *testing.T) {
		// The stack (gateway, gates, git server, egress service) runs in
		// this process, beside the parallel tests' stacks: its
		// connections are the sockets on its own ports. The flood's,
		// which the agent closed when it ended, may take a moment to
		// close on the stack's side.
		var sockets int
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if sockets = stackSockets(t, a.stackPorts); sockets <= a.socketsBefore+fdSlack || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("the stack's connections: %d before the attacker, %d after (this process's descriptors: %d before, %d after)", a.socketsBefore, sockets, a.fdsBefore, openFDs(t))
		if sockets > a.socketsBefore+fdSlack {
			t.Errorf("the stack holds %d connections a minute after the attacks, %d before (room %d)", sockets, a.socketsBefore, fdSlack)
		}
	})
	t.Run("the victim's worktree and the cache unchanged", func(t *testing.T) {
		host := h.onHost(t, a.victimWS)
		if _, err := os.Lstat(filepath.Join(host, "planted-by-attacker")); err == nil {
			t.Error("the attacker created a file in the victim's worktree")
		}
		if cfg, _ := os.ReadFile(filepath.Join(host, ".git", "config")); strings.Contains(string(cfg), "fsmonitor") {
			t.Errorf("the victim's git config names fsmonitor:\n%s", cfg)
		}
		m := h.onHost(t, a.mirror)
		for _, p := range []string{filepath.Join(filepath.Dir(m), "planted-by-attacker"), filepath.Join(m, "hooks", "reference-transaction"),
			filepath.Join(m, "objects", "info", "alternates"), filepath.Join(m, "refs", "heads", "planted-by-attacker")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("the attacker planted %s in the git object cache", p)
			}
		}
		if cfg, _ := os.ReadFile(filepath.Join(m, "config")); strings.Contains(string(cfg), "fsmonitor") {
			t.Errorf("the mirror's config names fsmonitor:\n%s", cfg)
		}
		// What read-git-cache tried to read is there, and holds the
		// victim's work: its refusal is the cache's permissions.
		victimHead := shapetest.RevParse(s.Repository(), "refs/heads/"+shapetest.VictimBranch)
		if b, err := os.ReadFile(h.onHost(t, a.tg.GitCacheFile)); err != nil || strings.TrimSpace(string(b)) != victimHead {
			t.Errorf("the mirror's %s is %q (%v), want the victim's head %s: read-git-cache aimed at nothing", a.tg.GitCacheFile, b, err, victimHead)
		}
	})
}

// Reusing: the reuse runs in a task of its own, on a fresh clone in that
// task's storage with the worktree's snapshot restored over it (never a
// .git: a snapshot leaves it out, and a restore refuses one), which the
// scenario's checks read through ECS().HostPath. Shown here: the task is
// not the attacker's, and its harness restored the snapshot, so those
// checks read what the attacker's worktree became; the task's storage
// holds the worktree (in its container's writable layer), and the
// container's record and the snapshot are there, so that Released's
// checks of their removal mean something.
func (h *stackHouse) Reusing(t *testing.T, worker, wt string) {
	s, a := h.s, h.adv
	task := workerTask(t, s, worker)
	t.Run("the reuse restored the snapshot in a task of its own", func(t *testing.T) {
		if task.ID == a.attackerTask {
			t.Errorf("the reuse runs in the attacker's task %s", task.ID)
		}
		restored := slices.ContainsFunc(shapetest.Events(t, h, worker), func(e store.Event) bool {
			return e.Kind == eventlog.KindHarness && e.Fields["event"] == workerapi.EventWorkspace &&
				e.Fields["worktree"] == wt && e.Text == "worktree restored from its snapshot"
		})
		if !restored {
			t.Error("the reuse's event log does not say its worktree was restored from its snapshot")
		}
	})
	// The task's storage is its container's writable layer, below the
	// folder that overlay's merged view (HostPath's root) is in.
	root := s.ECS().HostPath(task.ID, "/")
	if root == "" {
		t.Fatalf("the ECS stand-in knows no storage of the reuse's task %s", task.ID)
	}
	a.reuseLayer = filepath.Dir(root)
	if _, err := os.Stat(filepath.Join(a.reuseLayer, "diff", task.Env[harness.EnvWorkspace], ".git", "HEAD")); err != nil {
		t.Fatalf("the reused worktree is not in its container's writable layer %s, so its removal would prove nothing: %v", a.reuseLayer, err)
	}
	cfg, err := s.ECS().ContainerConfig(task.ID)
	if err != nil {
		t.Fatal(err)
	}
	a.reuseRecord = filepath.Dir(cfg)
	fx := s.FunctionEnv(lambdaapp.Effects)
	a.snapshotBucket, a.snapshotKey = fx[contract.EnvSnapshotBucket], snapshot.WorktreeKey(fx[contract.EnvHouse], wt)
	if _, ok, err := s.S3().Object(a.snapshotBucket, a.snapshotKey); err != nil || !ok {
		t.Fatalf("no snapshot %s in bucket %q while the worktree is in use (%v): its deletion would prove nothing", a.snapshotKey, a.snapshotBucket, err)
	}
}

// Released: what the stack guarantees of a released worktree. Its last
// task's storage went with the task (the container removed: its writable
// layer and podman's record of it are gone from the host), and the
// release deleted its snapshot from the bucket, so no later task can
// restore it.
func (h *stackHouse) Released(t *testing.T, worker, wt, workspace string) {
	a := h.adv
	t.Run("the last task's storage went with its task", func(t *testing.T) {
		var left []string
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			left = left[:0]
			for _, p := range []string{a.reuseLayer, a.reuseRecord, workspace} {
				if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
					left = append(left, p)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("the stopped task's storage is still on the host (its container not removed): %v", left)
		}
	})
	t.Run("the released worktree's snapshot deleted", func(t *testing.T) {
		_, ok, err := h.s.S3().Object(a.snapshotBucket, a.snapshotKey)
		if err != nil || ok {
			t.Errorf("the released worktree's snapshot %s is still in the bucket (%v)", a.snapshotKey, err)
		}
	})
}

func (h *stackHouse) BeforeFloods(t *testing.T) {}

// LogFlood: what the worker's container wrote, which is what reaches
// CloudWatch on AWS, stays within the harness's log budget, which the
// template leaves at its default.
func (h *stackHouse) LogFlood(t *testing.T, flooder string) {
	task := workerTask(t, h.s, flooder)
	if env := task.Env[harness.EnvLogLimit]; env != "" {
		t.Fatalf("the worker task sets %s=%s: the test assumes the template's default", harness.EnvLogLimit, env)
	}
	budget := int64(harness.DefaultLogLimit)
	log, err := h.s.ECS().ContainerLog(task.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the container's log is %d bytes (budget %d)", len(log), budget)
	if int64(len(log)) > budget {
		t.Errorf("the flooder's container log is %d bytes, over its budget %d", len(log), budget)
	}
	if !strings.Contains(string(log), "log cut: this worker used its log budget") {
		t.Error("the container's log does not say it was cut")
	}
}

func (h *stackHouse) AfterFloods(t *testing.T) {}

// connectAs asks the proxy at proxy for a CONNECT tunnel to target with
// the Proxy-Authorization Basic credential auth, and returns the status
// code and, for a tunnel, the first line the far end says.
func connectAs(t *testing.T, proxy, target, auth string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return "no answer: " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return strconv.Itoa(resp.StatusCode) + " " + resp.Header.Get("X-Smokescreen-Error")
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return "200 and then: " + err.Error()
	}
	return "200 " + strings.TrimSpace(line)
}

// checkStolenTokenOutOfReach asserts that the stolen-token attack, from a
// worker container, could not even present the credential: the API
// refused a connection directly (the stack's network), and the egress
// proxy refused the API as a destination (not on the house's allowlist:
// only the harness reaches it), each way.
func checkStolenTokenOutOfReach(t *testing.T, v string) {
	t.Helper()
	direct, proxied, ok := strings.Cut(v, "; through the egress proxy ")
	if !ok || !strings.Contains(direct, "directly: ") {
		t.Errorf("the stolen credential was not tried both directly and through the egress proxy: %s", v)
		return
	}
	if n := strings.Count(direct, "connection refused"); n != 2 {
		t.Errorf("the worker API was in the agent's network (%d of 2 calls refused a connection): %s", n, v)
	}
	if n := strings.Count(proxied, ": 403 "); n != 2 {
		t.Errorf("the egress proxy did not refuse the API as a destination (%d of 2 calls answered 403): %s", n, v)
	}
	for _, bad := range []string{" 401 ", "answered 2", "timeout", "timed out"} {
		if strings.Contains(v, bad) {
			t.Errorf("the stolen credential reached the worker API, or an attempt hung (%q): %s", bad, v)
		}
	}
}

// The interfaces a worker container has: its loopback and its end of the
// stack's network.
const containerInterfaces = "this network's interfaces: lo,eth0)"

// checkContainerRefusal asserts, for an agent in a worker container, that
// each attack failed for the reason its verdict must show. On the stack's
// network a firewall answers every packet the network does not admit at
// once (a TCP reset, ICMP port unreachable), so a refused attempt is
// "connection refused", never a timeout that a slow or filtered host
// would also give; the addresses a container cannot name at all (this
// machine's loopback) are its own loopback, which refuses too. What the
// shared file system holds of others is the permissions' to refuse:
// "permission denied", never "no such file" (an attack aimed at nothing).
// Another worker's worktree is on its own task's storage, which no other
// task has: "no such file", its path checked to hold the victim's
// worktree in the victim's task (Aim).
func checkContainerRefusal(t *testing.T, name, v string, tg standin.Targets) {
	t.Helper()
	var addrs []string
	switch name {
	case "dial-raw-standins":
		addrs = tg.RawStandins
	case "dial-evil-address":
		addrs = tg.EvilAddrs
	case "reach-galley":
		addrs = append([]string{tg.GalleyAddress}, tg.GalleyAddresses...)
	case "resolve-evil-name":
		checkNoResolver(t, v, tg.Resolvers)
	case "egress-evil-name":
		// The egress proxy refuses each name off the allowlist, and the
		// address, before anything is dialled.
		if n := strings.Count(v, ": 403 "); n < 4 {
			t.Errorf("%d refusals by the egress proxy (403), want the 4 destinations asked: %s", n, v)
		}
	case "model-token-stolen":
		// The victim's model proxy is on its own task's loopback: from
		// this task its address is this task's loopback, which refuses
		// (or, should the port match, its own proxy, which refuses the
		// token).
		_, part, _ := strings.Cut(v, "the stolen token at the victim's proxy address")
		if !strings.Contains(part, "connection refused") && !strings.Contains(part, ": 401") {
			t.Errorf("the victim's proxy address was not refused: %s", v)
		}
	case "read-git-cache":
		if !strings.Contains(v, "permission denied") {
			t.Errorf("the read was not refused by the file system's permissions: %s", v)
		}
	case "read-other-workspace":
		if !strings.Contains(v, "no such file or directory") {
			t.Errorf("the victim's worktree is in the attacker's task: %s", v)
		}
	case "write-other-workspace":
		if n := strings.Count(v, "no such file or directory"); n != 3 {
			t.Errorf("%d of the 3 writes found no victim's worktree in the attacker's task, want each: %s", n, v)
		}
	case "write-git-cache":
		if n := strings.Count(v, "permission denied"); n != 6 {
			t.Errorf("%d of the 6 attempts on the cache were refused by the permissions, want each: %s", n, v)
		}
	case "find-key":
		if strings.Contains(v, "(cut: ") {
			t.Errorf("the key hunt was cut before it had searched the container's whole file system: %s", v)
		}
	case "plant-links":
		for _, l := range []string{".git/info -> ", ".git/objects/info -> ", ".git/modules -> "} {
			if !strings.Contains(v, l) {
				t.Errorf("the attacker could not plant %s: %s", l, v)
			}
		}
	}
	if addrs == nil {
		return
	}
	got := refusals(v, addrs)
	for _, a := range addrs {
		if why := got[a]; !strings.Contains(why, "connection refused") {
			t.Errorf("%s was not refused at once by the stack's network: %q in %s", a, why, v)
		}
	}
	if !strings.Contains(v, containerInterfaces) {
		t.Errorf("the agent's network is not its container's: %s", v)
	}
}

// checkNoResolver asserts that the resolve attack reached no resolver
// because the stack's network refuses DNS: each server asked (those of the
// container's /etc/resolv.conf and servers) refused over TCP at once (the
// firewall's reset), and over UDP refused (ICMP port unreachable) or,
// where the host rate-limits those ICMP errors (net.ipv4.icmp_ratelimit:
// about one a second to a container after a burst of six, fewer than the
// attack's queries), unanswered; at least one UDP query was refused,
// which shows the firewall answering.
func checkNoResolver(t *testing.T, v string, servers []string) {
	t.Helper()
	asked := map[string]string{}
	body := v
	if _, rest, ok := strings.Cut(v, "): "); ok {
		body = rest
	}
	for _, part := range strings.Split(body, "; ") {
		for _, network := range []string{"udp ", "tcp "} {
			if rest, ok := strings.CutPrefix(part, network); ok {
				if server, why, ok := strings.Cut(rest, ": "); ok {
					asked[network+server] = why
				}
			}
		}
	}
	for _, srv := range servers {
		for _, network := range []string{"udp ", "tcp "} {
			if _, ok := asked[network+srv]; !ok {
				t.Errorf("%s was not asked over %s: %s", srv, network, v)
			}
		}
	}
	refusedUDP := 0
	for what, why := range asked {
		switch {
		case strings.Contains(why, "connection refused"):
			if strings.HasPrefix(what, "udp ") {
				refusedUDP++
			}
		case strings.HasPrefix(what, "udp ") && strings.Contains(why, "i/o timeout"):
		default:
			t.Errorf("%s was not refused by the stack's network: %s", what, why)
		}
	}
	if refusedUDP == 0 {
		t.Errorf("no UDP query was refused: the firewall's answer was not seen: %s", v)
	}
	_, sys, ok := strings.Cut(v, "the system's resolver: ")
	sys, _, _ = strings.Cut(sys, "; ")
	if !ok || !strings.Contains(sys, "connection refused") && !strings.Contains(sys, "i/o timeout") {
		t.Errorf("the system's resolver was not refused by the stack's network: %s", v)
	}
	if !strings.Contains(v, containerInterfaces) {
		t.Errorf("the agent's network is not its container's: %s", v)
	}
}

// victimCredential is the credential galley handed the victim's harness
// (in its bootstrap exchange), made as the worker API makes it
// (pkg/service/tokens.go): "<handle>.<mac>", the mac an HMAC under the
// stack's worker secret of the handle and the record's nonce, which a
// launch derives from its key (launchNonce). Presented with a proof of
// another key, galley refuses it as bound to another key, not as a bad
// credential: that proves it genuine.
func victimCredential(t *testing.T, s *awslocal.Stack, handle, launchKey string) string {
	t.Helper()
	secret, err := s.SecretValue(t.Context(), s.FunctionEnv(lambdaapp.Effects)[contract.EnvWorkerSecretArn])
	if err != nil {
		t.Fatal(err)
	}
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	sum := sha256.Sum256([]byte(house + "\x00" + launchKey))
	nonce := "n-" + hex.EncodeToString(sum[:10])
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("galley-worker\x00" + handle + "\x00" + nonce))
	return handle + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// fdSlack is room for connections kept alive between calls and the
// stack's own work (the victim's task still runs).
const fdSlack = 64

// portsOf gives the ports of urls.
func portsOf(t *testing.T, urls ...string) map[uint64]bool {
	t.Helper()
	out := map[uint64]bool{}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Port() == "" {
			t.Fatalf("no port in %q: %v", raw, err)
		}
		p, _ := strconv.ParseUint(u.Port(), 10, 16)
		out[p] = true
	}
	return out
}

// tcpListen is TCP_LISTEN in /proc/net/tcp's state column.
const tcpListen = "0A"

// stackSockets counts this process's TCP connections with an end on one
// of ports (listening sockets aside): those the stack's listeners hold,
// and those its own clients and kitchn's hold to them. Tests running in
// parallel in this process hold theirs on their own stacks' ports.
func stackSockets(t *testing.T, ports map[uint64]bool) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("listing the descriptors: %v", err)
	}
	mine := map[string]bool{}
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			mine[strings.TrimSuffix(ino, "]")] = true
		}
	}
	port := func(addr string) uint64 {
		_, hex, _ := strings.Cut(addr, ":")
		p, _ := strconv.ParseUint(hex, 16, 16)
		return p
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatalf("reading %s: %v", table, err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local remote state tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] == tcpListen || !mine[f[9]] {
				continue
			}
			if ports[port(f[1])] || ports[port(f[2])] {
				n++
			}
		}
	}
	return n
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting the descriptors: %v", err)
	}
	return len(ents)
}
