package awslocal_test

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/egress/egresstest"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
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

// The names the house's resolver answers in the adversarial test, both
// with the host beyond; only allowedName is on the house's allowlist (the
// test's copy of the template sets it, as context egressAllowlist would).
const (
	evilName    = "evil.example"
	allowedName = "allowed.example"
	// anthropicOrigin is the provider's base URL in the test's copy of the
	// template (context anthropicBaseUrl), served by the provider stand-in.
	anthropicOrigin = "https://anthropic.llm-gateway.example"
)

// TestAdversarialAgentAWSLocal runs the adversarial agent of the local
// shape's test through the stack deployed from its template, its workers
// containers of the worker image: a worker task started from the task
// definition, its agent under a uid of its own, on the stack's network,
// which reaches the stack's egress service and its task endpoint alone
// (GALLEY_AGENT_NETWORK=task: the platform confines the task's network).
// Every attack fails, for the reason the verdict must show, and the
// honest path works.
//
// What the worker containers share is attacked as it appears in the
// attacker's container: the victim's worktree and the git object cache on
// the shared file system (EFS, mounted at the template's workspace root),
// and the links the attacker plants in its .git (a root-only folder on the
// file system, the cache's mirror, the victim's git directory) before its
// worktree is reused and released. The network attacks aim at a host
// beyond (local/testnet) by address and by name (the egress service
// resolves names with the test's DNS server, where evil.example and
// allowed.example point at the host beyond), at every resolver, at the API
// and the gateway, and at the victim's model-proxy token; the controls
// that must answer are the egress service (for a dial), allowed.example
// through the egress proxy, and the attacker's own model-proxy token. The
// house's provider keys (sk-ant-test-<hex>, sk-openai-test-<hex>, set in
// Secrets Manager) are hunted for by hash. In this shape there is no
// signing key or store on disk (they are in the Secrets Manager stand-in
// and DynamoDB Local, reached only through the IAM gates); those two
// attacks aim at the house repository's storage instead, and
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
	// A host beyond (an internet host's stand-in, on 443 and 80), and the
	// house's resolver, which maps a name on the allowlist and one off it
	// to that host.
	beyond := hostBeyond(t)
	web, err := beyond.Listen(80)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = http.Serve(web, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "the host beyond, port 80\n")
		}))
	}()
	dns := egresstest.StartDNS(t, map[string][]string{evilName: {beyond.Addr.String()}, allowedName: {beyond.Addr.String()}})
	// The house's keys, in the shapes the attacker is told (never their
	// values: a hash of each). The model proxies forward to a provider
	// stand-in that takes the Anthropic key alone.
	anthropicKey, openaiKey := "sk-ant-test-"+suffix()+suffix()+suffix()+suffix(), "sk-openai-test-"+suffix()+suffix()+suffix()+suffix()
	provider := providerstandin.New(anthropicKey, nil)
	t.Cleanup(provider.Close)

	// The template's push caps (the harness's defaults, 100 MiB a push and
	// 512 MiB a worker) are too large to flood on this machine; the copy
	// sets smaller ones through the same task environment, so the flood
	// below meets the same gate and configuration path as on AWS. It also
	// sets what context keys egressAllowlist and anthropicBaseUrl would:
	// the allowlist in the worker's and the egress service's task
	// definitions, the provider's base URL in the worker's and its host
	// among the harness's destinations at the egress service.
	tpl := mutatedTemplate(t, func(res map[string]any) error {
		c, err := workerContainer(res)
		if err != nil {
			return err
		}
		setEnv(c, harness.EnvPushLimit, strconv.Itoa(floodPushLimit))
		setEnv(c, harness.EnvPushBudget, strconv.Itoa(floodPushBudget))
		setEnv(c, harness.EnvAnthropicBaseURL, anthropicOrigin)
		if envOf(c, egress.EnvAllow) == nil {
			return fmt.Errorf("the worker's task sets no %s", egress.EnvAllow)
		}
		setEnv(c, egress.EnvAllow, allowedName)
		e, err := egressContainer(res)
		if err != nil {
			return err
		}
		setEnv(e, egress.EnvAllow, allowedName)
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
		c.WorkerServices = map[string]http.Handler{anthropicOrigin: provider.Config.Handler}
		c.Options.EgressResolver = dns.Addr
	})
	netName, gw := s.WorkerNetwork()
	if netName == "" || s.EgressAddress() == "" {
		t.Fatal("the stack runs no container network or no egress service although a worker image is set")
	}
	k := newKitchn(t, s, token, "run-adv")
	// The key hunt reads the image's files before its verdict: a bound
	// against a hang, not a time to meet.
	k.patience = 5 * time.Minute
	launch := func(key, workspace, branch, brief string) (worker, worktree string) {
		b, _ := json.Marshal(brief)
		ws, br := `{"type":"isolated"}`, fmt.Sprintf(`,"branch":%q`, branch)
		if workspace != "" {
			ws, br = `{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"`+workspace+`"}}`, ""
		}
		st, rc := k.effect(key, fmt.Sprintf(`{"type":"launch-worker","role":"station-cook","workspace":%s,"brief":%s%s,"agent":{"agent":"claude"}}`, ws, b, br))
		if st != "applied" {
			t.Fatalf("launch %s: %s", key, st)
		}
		for _, c := range rc.Created {
			switch c.Kind {
			case protocol.KindWorker:
				worker = c.Handle
			case protocol.KindWorktree:
				worktree = c.Handle
			}
		}
		return worker, worktree
	}
	ctx := t.Context()
	house := s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvHouse]
	for name, key := range map[string]string{"anthropic": anthropicKey, "openai": openaiKey} {
		if err := s.PutSecret(ctx, "galley/"+house+"/"+name, key); err != nil {
			t.Fatal(err)
		}
	}

	victim, _ := launch("k-victim", "", "adv/victim", "#!standin\ncommit victim.txt the victim's work\nhang")
	hang := k.next("the victim's hang", kind(protocol.MsgStatus, "hanging pid "))
	victimTask := workerTask(t, s, victim)
	repo := s.Repository()
	mainHead, victimHead := revParse(repo, "refs/heads/main"), revParse(repo, "refs/heads/adv/victim")
	// The shared file system as the host and the containers see it: the
	// victim's worktree, the cache beside it.
	shared := sharedFSOf(t, victimTask, s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvWorkspaceRoot])
	victimWS := victimTask.Env[harness.EnvWorkspace]
	cache := filepath.Join(shared.ctr, harness.DefaultGitCacheName)
	if c := victimTask.Env[harness.EnvGitCache]; c != "" {
		cache = c
	}
	if cache == "off" {
		t.Fatalf("the worker task sets %s=off: there is no cache to attack", harness.EnvGitCache)
	}
	mirrors, _ := filepath.Glob(filepath.Join(shared.onHost(t, cache), "*.git"))
	if len(mirrors) != 1 {
		t.Fatalf("the git object cache holds %d mirrors, want the house repository's one: %v", len(mirrors), mirrors)
	}
	mirror := filepath.Join(cache, filepath.Base(mirrors[0]))
	t.Run("the cache is the harness's alone", func(t *testing.T) {
		// docs/git.md: the folder is the harness's (root's), mode 0700.
		fi, err := os.Stat(shared.onHost(t, cache))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o700 || st.Uid != 0 {
			t.Errorf("the git object cache is mode %v, owner %d: want 0700, root's", fi.Mode().Perm(), st.Uid)
		}
	})

	// The victim's CLI holds its model proxy's token (read here as root,
	// as a thief who got into its process would), never the house's key.
	victimEnv := processEnv(t, hangingPid(t, hang.Body), victimTask.Workspace)
	victimToken, victimModelURL := victimEnv["ANTHROPIC_API_KEY"], victimEnv["ANTHROPIC_BASE_URL"]
	t.Run("the victim holds a proxy token", func(t *testing.T) {
		if !strings.HasPrefix(victimToken, "galley-model-") || victimModelURL == "" {
			t.Errorf("the victim's CLI has ANTHROPIC_API_KEY of %d bytes (not a proxy token) and ANTHROPIC_BASE_URL %q", len(victimToken), victimModelURL)
		}
		for k, v := range victimEnv {
			if strings.Contains(v, anthropicKey) || strings.Contains(v, openaiKey) {
				t.Errorf("the victim's CLI holds a house key in %s", k)
			}
		}
	})

	targets := standin.Targets{
		KitchnToken:  s.TokenFile(),
		WorkerSecret: filepath.Join(repo, "config"),
		Store:        filepath.Join(repo, "HEAD"),
		// The victim's worktree and branch as the attacker's container
		// sees them, on the shared file system.
		OtherWorkspace: victimWS,
		OtherBranch:    "adv/victim",
		// Planted code writes its marker inside the worktree's git
		// directory (relative to the worktree).
		Marker: ".git",
		SecretNames: []string{"GALLEY_ANTHROPIC_API_KEY", "GALLEY_OPENAI_API_KEY", "GALLEY_GIT_CREDENTIAL", "GALLEY_EGRESS_SECRET",
			"GALLEY_WORKER_BOOTSTRAP", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"},
		// The cache: the victim's branch as its mirror holds it (fetched
		// there by the attacker's own launch), and the mirror.
		GitCacheFile:   filepath.Join(mirror, "refs", "heads", "adv", "victim"),
		GitCacheMirror: mirror,
	}
	// No launch file on the host: the victim's token travels in its
	// container's configuration, which podman keeps on the host.
	if targets.OtherToken, err = s.ECS().ContainerConfig(victimTask.ID); err != nil {
		t.Fatal(err)
	}
	// The links attack points the attacker's .git/info at a root-only
	// folder on the shared file system, its .git/objects/info at the
	// cache's mirror's and its .git/modules at the victim's git directory,
	// each named as a root harness in a container would follow it: none
	// may change when galley scrubs, reuses or releases the worktree.
	rootOnly := filepath.Join(shared.ctr, "adv-root-only")
	if err := os.MkdirAll(filepath.Join(shared.onHost(t, rootOnly), "info"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared.onHost(t, rootOnly), "info", "attributes"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	targets.LinkInfo = filepath.Join(rootOnly, "info")
	targets.LinkObjectsInfo = filepath.Join(mirror, "objects", "info")
	targets.LinkModules = filepath.Join(victimWS, ".git")
	linked := []string{shared.onHost(t, rootOnly), shared.onHost(t, targets.LinkObjectsInfo), shared.onHost(t, targets.LinkModules)}
	for _, p := range append([]string{targets.KitchnToken, targets.OtherToken, targets.WorkerSecret}, linked...) {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("target %s does not exist, so its attack would prove nothing: %v", p, err)
		}
	}
	linkedBefore := snapshotOwned(t, linked...)

	// The network: the raw stand-ins at the addresses a worker container
	// would name them, the host beyond by address and by name, every
	// resolver, the API and the gateway; the egress service, which a
	// worker container does reach, is every dial's control. The host
	// side answers each from this machine (checked below), so a refusal
	// in the container is the stack network's.
	targets.DialControl = s.EgressAddress()
	for what, raw := range map[string]string{"DynamoDB Local": os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), "fauxqs": os.Getenv("AWS_ENDPOINT_URL_SQS")} {
		u, err := url.Parse(raw)
		if err != nil || u.Port() == "" {
			t.Fatalf("no endpoint for %s: %q", what, raw)
		}
		targets.RawStandins = append(targets.RawStandins, net.JoinHostPort(gw.String(), u.Port()), u.Host)
	}
	workerEndpoint := s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvWorkerEndpoint]
	api, err := url.Parse(workerEndpoint)
	if err != nil || api.Host == "" {
		t.Fatalf("worker endpoint %q: %v", workerEndpoint, err)
	}
	gateway, err := url.Parse(s.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	targets.GalleyAddress = gateway.Host
	targets.GalleyAddresses = []string{api.Host, net.JoinHostPort(gw.String(), gateway.Port())}
	targets.EvilAddrs = []string{net.JoinHostPort(beyond.Addr.String(), "443"), net.JoinHostPort(beyond.Addr.String(), "80")}
	targets.EvilName, targets.AllowedName = evilName, allowedName
	// The resolvers: the house's DNS server where it listens (this
	// machine's loopback) and relayed to the network's host side, where
	// a container would reach it if the network let it; the gateway's
	// port 53, where podman's own DNS would answer; public ones.
	relay := startDNSRelay(t, gw, dns.Addr)
	targets.Resolvers = []string{dns.Addr, relay, net.JoinHostPort(gw.String(), "53"), "1.1.1.1:53", "8.8.8.8:53"}
	t.Run("the host side answers", func(t *testing.T) {
		for _, addr := range append(append([]string{targets.DialControl, api.Host}, targets.RawStandins...), targets.EvilAddrs...) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Errorf("%s does not answer this machine, so its refusal in a container would prove nothing: %v", addr, err)
				continue
			}
			c.Close()
		}
		for _, network := range []string{"udp", "tcp"} {
			if got, err := lookupVia(relay, network, evilName); err != nil || len(got) != 1 || got[0] != beyond.Addr.String() {
				t.Errorf("the house's DNS server, relayed at %s, over %s: %v %v", relay, network, got, err)
			}
		}
	})
	// The stolen-token attack uses the victim's credential, planted in
	// the attacker's git directory (out of its commits) as a thief would
	// hold it, at the API directly and through the egress proxy; so does
	// model-token-stolen with the victim's model-proxy token.
	targets.WorkerEndpoint, targets.StolenCredential, targets.StolenViaProxy = workerEndpoint, filepath.Join(".git", "stolen-credential"), true
	targets.StolenModelToken, targets.VictimModelURL = filepath.Join(".git", "stolen-model-token"), victimModelURL
	// The connection flood aims at what the agent reaches: its harness's
	// servers and the egress service.
	targets.FloodHarness, targets.FloodEgress = true, s.EgressAddress()
	// The key hunt knows the keys' shapes and hashes, and must find a
	// control key of the same shape planted in its worktree.
	controlKey := "sk-ant-test-" + suffix() + suffix() + suffix() + suffix()
	targets.KeyShapes = []string{`sk-ant-test-[0-9a-f]{32}`, `sk-openai-test-[0-9a-f]{32}`}
	targets.KeyHashes = []string{sha256Hex(anthropicKey), sha256Hex(openaiKey)}
	targets.KeyControl, targets.KeyControlHash = filepath.Join(".git", "control-key"), sha256Hex(controlKey)
	// The whole of the image's readable files (about 310 MiB of their
	// first 4 MiB each), not the hunt's default bound of 256 MiB.
	targets.KeyHuntMiB, targets.KeyHuntSeconds = 1024, 240

	stackURLs := []string{s.Endpoint(), workerEndpoint, s.GitURL(), "http://" + s.EgressAddress()}
	for _, svc := range iamgate.Services {
		stackURLs = append(stackURLs, s.GateURL(svc))
	}
	stackPorts := portsOf(t, stackURLs...)
	fdsBefore, socketsBefore := openFDs(t), stackSockets(t, stackPorts)
	attacker, wt := launch("k-attack", "", "adv/attacker", standin.AttackBrief(targets))
	if attacker == "" || wt == "" {
		t.Fatalf("attacker launch created worker %q worktree %q", attacker, wt)
	}
	attackerWS := workerTask(t, s, attacker).Workspace
	stolen := filepath.Join(attackerWS, targets.StolenCredential)
	victimCred := victimCredential(t, s, victim, "k-victim")
	plantFile(t, stolen, victimCred)
	plantFile(t, filepath.Join(attackerWS, targets.StolenModelToken), victimToken)
	plantFile(t, filepath.Join(attackerWS, targets.KeyControl), controlKey)
	names := standin.AttackNamesFor(targets)
	verdicts := map[string]string{}
	var floodCalls, floodFailures int
	for _, name := range names {
		if name == "connflood-harness" {
			// The agent holds its connections until kitchn replies: every
			// call made meanwhile, each on a new connection, must succeed.
			q := k.next("the connection flood's question", func(m protocol.MailMessage) bool {
				return m.Kind == protocol.MsgQuestion && strings.HasPrefix(m.Body, "holding ")
			})
			t.Logf("connection flood: the agent is %s", q.Body)
			floodCalls, floodFailures = kitchnCallsDuringFlood(t, s, token, 50)
			if st, _ := k.effect("k-connflood-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"done"}`, k.worker(attacker), q.ID)); st != "applied" {
				t.Fatalf("reply to the connection flood's question: %s", st)
			}
		}
		verdicts[name] = k.next("attack "+name, kind(protocol.MsgStatus, "attack "+name+": ")).Body
		if name == "stolen-token" {
			_ = os.Remove(stolen)
		}
	}
	honest := k.next("the honest push", kind(protocol.MsgStatus, "honest: "))
	done := k.next("the attacker's worker-done", kind(protocol.MsgWorkerDone, ""))
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			v := verdicts[name]
			t.Log(v)
			if name == "stolen-token" {
				checkStolenTokenOutOfReach(t, v)
			} else {
				checkAttackSpecifics(t, name, v)
			}
			checkContainerRefusal(t, name, v, targets)
			if name == "connflood-harness" {
				t.Logf("kitchn made %d calls during the flood, %d failed", floodCalls, floodFailures)
				if floodCalls == 0 || floodFailures > 0 {
					t.Errorf("kitchn's calls during the connection flood: %d of %d failed", floodFailures, floodCalls)
				}
			}
			if !strings.Contains(v, ": blocked (") {
				t.Errorf("attack not blocked: %s", v)
			}
		})
	}
	// Out of the agent's reach, the victim's credential is still refused
	// to anyone without its harness's key: presented from this machine
	// (as a thief who carried it out of the worker would, to the API that
	// is public on AWS), as a bearer credential and with a proof of
	// another key, the second refused as bound to another key, which
	// shows the credential genuine.
	t.Run("a stolen credential is bound to its harness's key", func(t *testing.T) {
		ok, v := standin.PresentCredential(ctx, victimCred, workerEndpoint, nil)
		t.Log(v)
		if ok {
			t.Errorf("the victim's credential, stolen, was accepted: %s", v)
		}
		checkAttackSpecifics(t, "stolen-token", v)
	})
	t.Run("honest push", func(t *testing.T) {
		if honest.Body != "honest: committed honest.txt" || done.Outcome != protocol.OutcomeSucceeded {
			t.Errorf("honest path: %s; %+v", honest.Body, done)
		}
		got, err := exec.Command("git", "--git-dir", repo, "show", "adv/attacker:honest.txt").CombinedOutput()
		if err != nil || string(got) != "the honest path" {
			t.Errorf("adv/attacker:honest.txt = %q %v", got, err)
		}
	})
	t.Run("egress decisions in the event log", func(t *testing.T) {
		es := workerEvents(t, s, attacker)
		for _, want := range []map[string]string{
			{"host": allowedName, "port": "443", "allowed": "true", "role": "agent"},
			{"host": evilName, "port": "443", "allowed": "false", "role": "agent"},
			{"host": beyond.Addr.String(), "allowed": "false"},
		} {
			want["event"] = workerapi.EventEgress
			if !hasHarnessEvent(es, want) {
				t.Errorf("no egress event %v in the attacker's log", want)
			}
		}
		if t.Failed() {
			for _, e := range es {
				if e.Fields["event"] == workerapi.EventEgress {
					t.Logf("egress event: %s %v", e.Text, e.Fields)
				}
			}
		}
	})
	// The chain's far end, from this machine: the egress service, asked
	// as the harness (as a worker's proxy chains to it), reaches the
	// allowlisted name by the house's resolver, and refuses the other.
	t.Run("the egress service reaches the allowlisted name", func(t *testing.T) {
		secret, err := s.SecretValue(ctx, "galley/"+house+"/egress-proxy")
		if err != nil {
			t.Fatal(err)
		}
		auth := base64.StdEncoding.EncodeToString([]byte(egress.HarnessUser + ":" + secret))
		for name, want := range map[string]string{allowedName: "200 beyond", evilName: "403"} {
			if got := connectAs(t, s.EgressAddress(), net.JoinHostPort(name, "443"), auth); !strings.HasPrefix(got, want) {
				t.Errorf("CONNECT %s:443 through the egress service as the harness: %q, want %q", name, got, want)
			}
		}
		if dns.Queries(allowedName) == 0 {
			t.Error("the egress service never asked the house's resolver for the allowlisted name")
		}
	})
	t.Run("the provider saw the house key alone", func(t *testing.T) {
		if provider.SawWrongKey() || provider.SawSecret(victimToken) {
			t.Errorf("the provider stand-in saw another key (a proxy token: %v): %v", provider.SawSecret(victimToken), provider.Refused())
		}
		if len(provider.Calls()) == 0 {
			t.Error("no model call reached the provider: the model-token attack's control did not go through")
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
			if sockets = stackSockets(t, stackPorts); sockets <= socketsBefore+fdSlack || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("the stack's connections: %d before the attacker, %d after (this process's descriptors: %d before, %d after)", socketsBefore, sockets, fdsBefore, openFDs(t))
		if sockets > socketsBefore+fdSlack {
			t.Errorf("the stack holds %d connections a minute after the attacks, %d before (room %d)", sockets, socketsBefore, fdSlack)
		}
	})
	t.Run("house refs unchanged", func(t *testing.T) {
		if got := revParse(repo, "refs/heads/main"); got != mainHead {
			t.Errorf("main moved: %s -> %s", mainHead, got)
		}
		if got := revParse(repo, "refs/heads/adv/victim"); got != victimHead {
			t.Errorf("the victim's branch changed: %s -> %q", victimHead, got)
		}
		if got := revParse(repo, "refs/tags/attacker-tag"); got != "" {
			t.Errorf("the attacker's tag exists: %s", got)
		}
	})
	t.Run("the victim's worktree and the cache unchanged", func(t *testing.T) {
		host := shared.onHost(t, victimWS)
		if _, err := os.Lstat(filepath.Join(host, "planted-by-attacker")); err == nil {
			t.Error("the attacker created a file in the victim's worktree")
		}
		if cfg, _ := os.ReadFile(filepath.Join(host, ".git", "config")); strings.Contains(string(cfg), "fsmonitor") {
			t.Errorf("the victim's git config names fsmonitor:\n%s", cfg)
		}
		m := shared.onHost(t, mirror)
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
		if b, err := os.ReadFile(shared.onHost(t, targets.GitCacheFile)); err != nil || strings.TrimSpace(string(b)) != victimHead {
			t.Errorf("the mirror's %s is %q (%v), want the victim's head %s: read-git-cache aimed at nothing", targets.GitCacheFile, b, err, victimHead)
		}
	})

	// The attacker's worktree is reused by a new worker task on the same
	// file system: nothing it planted runs, and no link it planted is
	// followed. The reuse plants the links again, for the release.
	linksAgain, _ := json.Marshal(standin.Attack{Kind: "links", Path: targets.LinkInfo, Target: targets.LinkObjectsInfo, Modules: targets.LinkModules})
	reuse := strings.Join([]string{"#!standin", "git status", "git add -A", "git commit --allow-empty -m reuse",
		"git push origin HEAD", `tool post_status {"body":"reused: $LAST"}`,
		"attack plant-links " + string(linksAgain),
		`tool finish {"outcome":"succeeded","body":"reused"}`}, "\n")
	if second, _ := launch("k-reuse", wt, "", reuse); second == "" {
		t.Fatal("the reuse launch created no worker")
	}
	k.next("the reuse's status", kind(protocol.MsgStatus, "reused: "))
	replanted := k.next("the reuse's links", kind(protocol.MsgStatus, "attack plant-links: "))
	k.next("the reuse's worker-done", kind(protocol.MsgWorkerDone, ""))
	t.Run("planted code never ran", func(t *testing.T) {
		ran, _ := filepath.Glob(filepath.Join(attackerWS, ".git", "*-*"))
		for _, r := range ran {
			if b := filepath.Base(r); strings.HasPrefix(b, "hook-") || b == "fsmonitor" || b == "credential-helper" {
				t.Errorf("planted code ran: %s", b)
			}
		}
	})
	t.Run("links not followed on reuse", func(t *testing.T) {
		if got := snapshotOwned(t, linked...); got != linkedBefore {
			t.Errorf("what the attacker's links named changed when its worktree was reused:\nbefore\n%s\nafter\n%s", linkedBefore, got)
		}
		if !strings.Contains(replanted.Body, ".git/modules -> ") {
			t.Errorf("the links were not planted again for the release: %s", replanted.Body)
		}
	})
	// The worktree, with the links planted again, is released: a cleanup
	// task of the worker task definition removes it, as root.
	if st, _ := k.effect("k-release", fmt.Sprintf(`{"type":"release-resource","resource":{"kind":"worktree","backend":"galley","handle":%q}}`, wt)); st != "applied" {
		t.Fatalf("release: %s", st)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Lstat(attackerWS); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the released worktree was not removed")
		}
	}
	t.Run("links not followed on release", func(t *testing.T) {
		if got := snapshotOwned(t, linked...); got != linkedBefore {
			t.Errorf("what the attacker's links named changed when its worktree was released:\nbefore\n%s\nafter\n%s", linkedBefore, got)
		}
	})

	// A log flood and a push flood (issue 21, items 5 and 6): what the
	// worker's container writes, which is what reaches CloudWatch on AWS,
	// stays within the harness's log budget, which the template leaves at
	// its default; the house repository grows by no more than the push
	// budget, the third push refused by the harness's gate.
	repoBefore := treeBytes(t, s.Repository())
	flooder, _ := launch("k-flood", "", "adv/flood", fmt.Sprintf("#!standin\nflood-log %d\n"+
		`tool post_status {"body":"flood: $LAST"}`+"\n"+"flood-push 3 %d\n"+
		`tool post_status {"body":"push flood: $LAST"}`+"\n"+
		`tool finish {"outcome":"succeeded","body":"flooded"}`, 4*harness.DefaultLogLimit, floodPushEach))
	flooded := k.next("the log flood's status", kind(protocol.MsgStatus, "flood: "))
	pushes := k.next("the push flood's status", kind(protocol.MsgStatus, "push flood: "))
	k.next("the flooder's worker-done", kind(protocol.MsgWorkerDone, ""))
	floodTask := workerTask(t, s, flooder).ID
	budget := int64(harness.DefaultLogLimit)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var info ecsTask
		for _, task := range s.ECS().Tasks() {
			if task.ID == floodTask {
				info = ecsTask{task.LastStatus, task.Env[harness.EnvLogLimit]}
			}
		}
		if info.env != "" {
			t.Fatalf("the worker task sets %s=%s: the test assumes the template's default", harness.EnvLogLimit, info.env)
		}
		if info.status == "STOPPED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flooder's task did not stop (last status %q)", info.status)
		}
	}
	t.Run("push flood within its budget", func(t *testing.T) {
		grown := treeBytes(t, s.Repository()) - repoBefore
		t.Logf("%s; the house repository grew by %d bytes (push budget %d)", pushes.Body, grown, floodPushBudget)
		if pushes.Body != "push flood: pushes accepted 2, refused 1 (push budget)" {
			t.Errorf("push flood: %s, want two pushes accepted and the third refused, naming the budget", pushes.Body)
		}
		if grown > floodPushBudget {
			t.Errorf("the house repository grew by %d bytes, over the push budget %d", grown, floodPushBudget)
		}
	})
	t.Run("log flood within its budget", func(t *testing.T) {
		log, err := s.ECS().ContainerLog(floodTask)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s; the container's log is %d bytes (budget %d)", flooded.Body, len(log), budget)
		if flooded.Body != fmt.Sprintf("flood: wrote %d bytes to stderr", 4*harness.DefaultLogLimit) {
			t.Errorf("the flood did not run as scripted: %s", flooded.Body)
		}
		if int64(len(log)) > budget {
			t.Errorf("the flooder's container log is %d bytes, over its budget %d", len(log), budget)
		}
		if !strings.Contains(string(log), "log cut: this worker used its log budget") {
			t.Error("the container's log does not say it was cut")
		}
	})
}

// hasHarnessEvent reports whether es holds a harness event with fields.
func hasHarnessEvent(es []store.Event, fields map[string]string) bool {
	for _, e := range es {
		if e.Kind != eventlog.KindHarness {
			continue
		}
		match := true
		for k, v := range fields {
			if e.Fields[k] != v {
				match = false
			}
		}
		if match {
			return true
		}
	}
	return false
}

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
	case "read-other-workspace", "read-git-cache":
		if !strings.Contains(v, "permission denied") {
			t.Errorf("the read was not refused by the file system's permissions: %s", v)
		}
	case "write-other-workspace":
		if n := strings.Count(v, "permission denied"); n != 3 {
			t.Errorf("%d of the 3 writes were refused by the permissions, want each: %s", n, v)
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

func sha256Hex(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

type ecsTask struct{ status, env string }

// The push flood's caps (the task's GALLEY_PUSH_LIMIT and
// GALLEY_PUSH_BUDGET in the test's copy of the template): three pushes of
// floodPushEach, of which two fit the budget.
const (
	floodPushLimit  = 8 << 20
	floodPushBudget = 12 << 20
	floodPushEach   = 5 << 20
)

// treeBytes is the size of the regular files beneath dir.
func treeBytes(t *testing.T, dir string) int64 {
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

func revParse(repo, ref string) string {
	out, err := exec.Command("git", "--git-dir", repo, "rev-parse", "--verify", "--quiet", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
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
	secret, err := s.SecretValue(t.Context(), s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvWorkerSecretArn])
	if err != nil {
		t.Fatal(err)
	}
	house := s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvHouse]
	sum := sha256.Sum256([]byte(house + "\x00" + launchKey))
	nonce := "n-" + hex.EncodeToString(sum[:10])
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("galley-worker\x00" + handle + "\x00" + nonce))
	return handle + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// plantFile writes content to dst (in the attacker's worktree, once it is
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

// checkAttackSpecifics asserts what a blocked verdict must show
// (standin.CheckVerdict).
func checkAttackSpecifics(t *testing.T, name, v string) {
	t.Helper()
	if err := standin.CheckVerdict(name, v); err != nil {
		t.Error(err)
	}
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

// kitchnCallsDuringFlood makes n kitchn calls (GET /v1/descriptor, each
// on a new connection) and returns how many it made and how many failed.
func kitchnCallsDuringFlood(t *testing.T, s *awslocal.Stack, token string, n int) (calls, failures int) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	for range n {
		calls++
		req, _ := http.NewRequest("GET", s.Endpoint()+"/v1/descriptor", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			failures++
			t.Logf("kitchn's call %d during the flood: %v", calls, err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			failures++
			t.Logf("kitchn's call %d during the flood: status %d", calls, resp.StatusCode)
		}
	}
	return calls, failures
}
