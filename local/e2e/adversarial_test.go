package e2e

import (
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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/local/testnet"
	"github.com/galley-run/galley/pkg/egress/egresstest"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestAdversarialAgent runs an agent scripted to attack (the stand-in's
// AttackBrief) through galley serve, once per confinement the machine
// enforces: a uid of its own (galley serve as root) and Landlock (the
// same with a galley-worker only root may run, so a separate uid could
// not start its agent). Every attack
// is refused, each in its own sub-test, and the honest path works: the
// attacker's own branch gets its commit. The house's provider keys (in the
// shapes sk-ant-test-<hex> and sk-openai-test-<hex>) are hunted for by
// hash; the network attacks aim at a host beyond (local/testnet) by
// address, by name through the egress proxy and through every resolver,
// at galley's port and at another worker's model-proxy token; a
// connection flood of the harness's servers leaves kitchn's calls
// untouched. An allowlisted name is reached through the egress proxy, and
// the decisions are in the attacker's event log. At least one enforced mode must
// run: on a machine with neither the test fails (galley serve would
// declare launch_isolated partial).
func TestAdversarialAgent(t *testing.T) {
	canUID, _ := harness.CanSwitchUser()
	canLandlock := harness.ChooseConfinement("/", "").LandlockABI > 0
	if !canUID && !canLandlock {
		t.Fatal("this machine enforces no confinement (not root, no Landlock): agents would reach galley's data folder")
	}
	if canUID {
		t.Run("uid", func(t *testing.T) { adversarial(t, harness.ConfineUser) })
	} else {
		t.Log("not root: the uid confinement is not exercised here")
	}
	if canLandlock {
		t.Run("landlock", func(t *testing.T) { adversarial(t, harness.ConfineLandlock) })
	} else {
		t.Log("the kernel has no Landlock: the Landlock confinement is not exercised here")
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// openForAgents lets other users run the built binaries, and, for the uid
// confinement, traverse the folders above the data folder (t.TempDir's are
// mode 0700), as an operator's data folder must be.
func openForAgents(t *testing.T, data string, parents bool) {
	t.Helper()
	for _, d := range []string{binDir, standins(t)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !parents {
		return
	}
	for d := filepath.Dir(data); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
}

// privateCopy copies the program at path into a folder of the test's,
// mode 0700: one only its owner may run.
func privateCopy(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(p, b, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func adversarial(t *testing.T, want harness.Confinement) {
	data := t.TempDir()
	openForAgents(t, data, want == harness.ConfineUser)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("PATH", standins(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	// The house's keys, in the shapes the attacker is told (never their
	// values: a hash of each). The model proxies forward to a provider
	// stand-in that takes the Anthropic key alone.
	anthropicKey, openaiKey := "sk-ant-test-"+randomHex(t), "sk-openai-test-"+randomHex(t)
	t.Setenv("ANTHROPIC_API_KEY", anthropicKey)
	t.Setenv("CODEX_API_KEY", openaiKey)
	provider := providerstandin.New(anthropicKey, nil)
	t.Cleanup(provider.Close)
	// A host beyond (an internet host's stand-in, listening on 443 and
	// 80), and the house's resolver, which maps a name on the allowlist
	// and one off it to that host.
	beyond := hostBeyond(t)
	dnsNames := map[string][]string{}
	if beyond != nil {
		dnsNames[evilName] = []string{beyond.Addr.String()}
		dnsNames[allowedName] = []string{beyond.Addr.String()}
	}
	dns := egresstest.StartDNS(t, dnsNames)
	var workerBinFlag []string
	if want == harness.ConfineLandlock && os.Geteuid() == 0 {
		// Root picks a separate uid wherever one can run galley-worker;
		// a copy only root may run leaves it Landlock.
		workerBinFlag = []string{"--worker-bin", privateCopy(t, filepath.Join(binDir, "galley-worker"))}
	}
	s := startServer(t, data, append(workerBinFlag, "--families", "claude,codex", "--worker-log-limit", strconv.Itoa(floodLogLimit),
		"--push-limit", strconv.Itoa(floodPushLimit), "--push-budget", strconv.Itoa(floodPushBudget),
		"--anthropic-base-url", provider.URL, "--openai-base-url", provider.URL+"/v1",
		"--egress-allow", allowedName, "--egress-resolver", dns.Addr)...)
	t.Cleanup(func() { dumpWorkerLogs(t, s) })
	fdsBefore := openFDsOf(t, s.cmd.Process.Pid)
	repo := filepath.Join(s.Data, "repository.git")
	run := "run-adv"
	mb := &mailbox{s: s, run: run}

	// The victim commits on its branch and stays (its token file lives
	// while its harness runs).
	victim, ans := agentLaunch(t, s, run, "k-victim", "#!standin\ncommit victim.txt the victim's work\nhang", "adv/victim", map[string]string{"agent": "claude"})
	if victim == "" {
		t.Fatalf("victim launch: %s", ans)
	}
	defer workerEffect(t, s, run, "k-victim-cancel", `{"type":"cancel-worker","worker":`+workerRes(victim)+`}`)
	hang := mb.next(t, "the victim's hang", kindBody(protocol.MsgStatus, "hanging pid "))
	victimWS := workspaceOf(t, s, victim)
	// The victim's CLI holds its model proxy's token (read here as root,
	// as a thief who got into its process would), never the house's key.
	victimEnv := environOf(t, hang.Body)
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
	victimHead := revParse(t, repo, "refs/heads/adv/victim")
	mainHead := revParse(t, repo, "refs/heads/main")

	targets := standin.Targets{
		KitchnToken:    filepath.Join(s.Data, "private", "token"),
		WorkerSecret:   filepath.Join(s.Data, "private", "worker-secret"),
		OtherToken:     filepath.Join(s.Data, "workers", victim, "token"),
		Store:          filepath.Join(s.Data, "private", "galley.db"),
		OtherWorkspace: victimWS,
		OtherBranch:    "adv/victim",
		SecretNames:    []string{"CODEX_API_KEY", "OPENAI_API_KEY", "GALLEY_GIT_CREDENTIAL", "GALLEY_WORKER_TOKEN", "GALLEY_WORKER_BOOTSTRAP"},
	}
	// The links attack points the attacker's .git/info at a root-only
	// folder and its .git/objects/info at another repository's, whose
	// alternates file it needs: neither may change when galley scrubs,
	// reuses or releases the worktree.
	rootOnly := filepath.Join(t.TempDir(), "root-only")
	other := filepath.Join(t.TempDir(), "other")
	if out, err := exec.Command("git", "clone", "--quiet", "--shared", repo, other).CombinedOutput(); err != nil {
		t.Fatalf("clone another repository: %v %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(rootOnly, "info"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootOnly, "info", "attributes"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	targets.LinkInfo = filepath.Join(rootOnly, "info")
	targets.LinkObjectsInfo = filepath.Join(other, ".git", "objects", "info")
	outsideBefore := snapshotFiles(t, rootOnly, filepath.Join(other, ".git", "objects", "info"))
	pidsBefore := countPids()
	// Planted code writes its marker inside the worktree's git directory
	// (relative to the worktree): the worktree's next agent can write
	// there in every confinement.
	targets.Marker = ".git"
	// The stolen-token attack uses the victim's credential, which the
	// test plants in the attacker's git directory (out of its commits) as
	// a thief would have it; so does the model-token attack with the
	// victim's model-proxy token. The connection flood aims at what the
	// agent reaches (its harness's servers: galley's port is out of its
	// network), and reach-galley tries galley's port.
	targets.WorkerEndpoint = s.Endpoint
	targets.StolenCredential = filepath.Join(".git", "stolen-credential")
	targets.GalleyAddress = strings.TrimPrefix(s.Endpoint, "http://")
	targets.FloodHarness = true
	targets.StolenModelToken, targets.VictimModelURL = filepath.Join(".git", "stolen-model-token"), victimModelURL
	// The key hunt knows the keys' shapes and hashes, and must find a
	// control key of the same shape planted in its worktree.
	controlKey := "sk-ant-test-" + randomHex(t)
	targets.KeyShapes = []string{`sk-ant-test-[0-9a-f]{32}`, `sk-openai-test-[0-9a-f]{32}`}
	targets.KeyHashes = []string{sha256Hex(anthropicKey), sha256Hex(openaiKey)}
	targets.KeyControl, targets.KeyControlHash = filepath.Join(".git", "control-key"), sha256Hex(controlKey)
	// The network attacks: the host beyond by address and by name, the
	// name through every resolver (the system's, the house's own, which
	// would answer, and public ones).
	if beyond != nil {
		targets.EvilAddrs = []string{net.JoinHostPort(beyond.Addr.String(), "443"), net.JoinHostPort(beyond.Addr.String(), "80")}
		targets.EvilName, targets.AllowedName = evilName, allowedName
		targets.Resolvers = []string{dns.Addr, "1.1.1.1:53", "8.8.8.8:53"}
	}
	launch := func(key string, ws string, brief string) (string, string) {
		b, _ := json.Marshal(brief)
		wsJSON := `{"type":"isolated"}`
		branch := `,"branch":"adv/attacker"`
		if ws != "" {
			wsJSON, branch = `{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"`+ws+`"}}`, ""
		}
		eff := fmt.Sprintf(`{"type":"launch-worker","role":"station-cook","workspace":%s,"brief":%s%s,"agent":{"agent":"claude"}}`, wsJSON, b, branch)
		st, out := s.call(t, "POST", "/v1/effects", effectBody(run, key, eff), "Idempotency-Key", key)
		if st != 200 || !strings.Contains(string(out), `"applied"`) {
			t.Fatalf("launch %s: %d %s", key, st, out)
		}
		var a struct {
			Receipt struct {
				Created []struct{ Kind, Handle string }
			}
		}
		_ = json.Unmarshal(out, &a)
		var worker, wt string
		for _, c := range a.Receipt.Created {
			switch c.Kind {
			case protocol.KindWorker:
				worker = c.Handle
			case protocol.KindWorktree:
				wt = c.Handle
			}
		}
		return worker, wt
	}
	attacker, wt := launch("k-attack", "", standin.AttackBrief(targets))
	if attacker == "" || wt == "" {
		t.Fatalf("attacker launch created worker %q worktree %q", attacker, wt)
	}
	attackerWS := workspaceOf(t, s, attacker)
	stolen := filepath.Join(attackerWS, targets.StolenCredential)
	plantStolenCredential(t, filepath.Join(s.Data, "workers", victim, "token"), stolen)
	plantFile(t, filepath.Join(attackerWS, targets.StolenModelToken), victimToken)
	plantFile(t, filepath.Join(attackerWS, targets.KeyControl), controlKey)
	names := standin.AttackNamesFor(targets)
	verdicts := map[string]string{}
	var floodCalls, floodFailures int
	for _, name := range names {
		if name == "connflood" || name == "connflood-harness" {
			// The agent holds its connections until kitchn replies: every
			// call made meanwhile, each on a new connection, must succeed.
			q := mb.next(t, "the connection flood's question", func(r mailRow) bool {
				return r.Kind == protocol.MsgQuestion && strings.HasPrefix(r.Body, "holding ")
			})
			t.Logf("connection flood: the agent is %s", q.Body)
			floodCalls, floodFailures = kitchnCallsDuringFlood(t, s, 50)
			workerEffect(t, s, run, "k-connflood-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"done"}`, workerRes(attacker), q.ID))
		}
		row := mb.next(t, "attack "+name, kindBody(protocol.MsgStatus, "attack "+name+": "))
		verdicts[name] = row.Body
		if name == "stolen-token" {
			_ = os.Remove(stolen)
		}
	}
	honest := mb.next(t, "the honest push", kindBody(protocol.MsgStatus, "honest: "))
	done := mb.next(t, "the attacker's worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })

	mode := confinementIn(t, s, attacker)
	network := networkIn(t, s, attacker)
	t.Logf("enforcement exercised: %s; the agent's network: %s", mode, network)
	if mode != string(want) {
		t.Fatalf("the attacker ran confined by %q, want %q", mode, want)
	}
	inNamespace := strings.HasPrefix(network, "a network namespace")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			v := verdicts[name]
			t.Log(v)
			if name == "stolen-token" && inNamespace {
				// galley's port is out of the agent's network: the
				// credential cannot even be presented (its binding to the
				// harness's key is shown where the worker API is in reach:
				// aws-local's TestAdversarialAgentAWSLocal).
				if strings.Count(v, "connection refused") != 2 {
					t.Errorf("the worker API was in the agent's network: %s", v)
				}
			} else {
				checkAttackSpecifics(t, name, v)
			}
			if name == "connflood" || name == "connflood-harness" {
				t.Logf("kitchn made %d calls during the flood, %d failed", floodCalls, floodFailures)
				if floodCalls == 0 || floodFailures > 0 {
					t.Errorf("kitchn's calls during the connection flood: %d of %d failed", floodFailures, floodCalls)
				}
			}
			if inNamespace {
				checkNoRoute(t, name, v)
			}
			if name == "fork-flood" && want == harness.ConfineLandlock && os.Geteuid() == 0 && !hasCgroupV1() && strings.Contains(v, "SUCCEEDED") {
				// docs/security.md: under Landlock a root harness's agent
				// is root, which RLIMIT_NPROC does not bind; only its
				// cgroup's pids.max would, and without cgroup v1 the
				// harness makes none.
				t.Skip("known gap of the Landlock confinement as root: " + v)
			}
			if !strings.Contains(v, ": blocked (") {
				t.Errorf("attack not blocked: %s", v)
			}
		})
	}
	t.Run("honest push", func(t *testing.T) {
		if honest.Body != "honest: committed honest.txt" {
			t.Errorf("honest path: %s", honest.Body)
		}
		got, err := exec.Command("git", "--git-dir", repo, "show", "adv/attacker:honest.txt").CombinedOutput()
		if err != nil || string(got) != "the honest path" {
			t.Errorf("adv/attacker:honest.txt = %q %v", got, err)
		}
		if done.Outcome != protocol.OutcomeSucceeded {
			t.Errorf("attacker's worker-done: %+v", done)
		}
	})
	t.Run("house refs unchanged", func(t *testing.T) {
		if got := revParse(t, repo, "refs/heads/main"); got != mainHead {
			t.Errorf("main moved: %s -> %s", mainHead, got)
		}
		if got := revParse(t, repo, "refs/heads/adv/victim"); got != victimHead {
			t.Errorf("the victim's branch changed: %s -> %q", victimHead, got)
		}
		if got := revParse(t, repo, "refs/tags/attacker-tag"); got != "" {
			t.Errorf("the attacker's tag exists: %s", got)
		}
		if _, err := os.Stat(filepath.Join(victimWS, "planted-by-attacker")); err == nil {
			t.Error("the attacker created a file in the victim's worktree")
		}
	})

	// The worktree is reused: the next agent runs plain git there (status
	// consults core.fsmonitor, commit runs hooks, push runs pre-push and
	// may ask the credential helper). Nothing the attacker planted runs.
	attackerUID := agentUIDIn(t, s, attacker)
	// The harness ends the agent after its worker-done; the runtime
	// records the harness's exit once it has returned.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(s.Data, "workers", attacker, "exit")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the attacker's harness did not exit")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Run("egress decisions in the event log", func(t *testing.T) {
		if beyond == nil {
			t.Skip("no host beyond here: the egress attacks did not run")
		}
		es := eventsOf(t, s, attacker)
		for _, want := range []map[string]string{
			{"host": allowedName, "port": "443", "allowed": "true", "role": "agent", "addr": net.JoinHostPort(beyond.Addr.String(), "443")},
			{"host": evilName, "port": "443", "allowed": "false", "role": "agent"},
			{"host": beyond.Addr.String(), "allowed": "false"},
		} {
			want["event"] = workerapi.EventEgress
			if !hasEvent(es, eventlog.KindHarness, want) {
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
	t.Run("the provider saw the house key alone", func(t *testing.T) {
		if provider.SawWrongKey() || provider.SawSecret(victimToken) {
			t.Errorf("the provider stand-in saw another key (a proxy token: %v): %v", provider.SawSecret(victimToken), provider.Refused())
		}
		if len(provider.Calls()) == 0 {
			t.Error("no model call reached the provider: the model-token attack's control did not go through")
		}
	})
	t.Run("nothing of the attacker runs", func(t *testing.T) {
		if want != harness.ConfineUser {
			t.Skip("under Landlock the agent shares the harness's uid: its processes cannot be told apart by uid (docs/security.md)")
		}
		// The harness reported the attacker's exit only after ending
		// every process of its uid, the fighters included.
		if left := processesOf(attackerUID); len(left) > 0 {
			t.Errorf("%d processes of the attacker's uid %d run after its worker ended: %v", len(left), attackerUID, left)
		}
	})
	t.Run("pids back within bounds", func(t *testing.T) {
		after := countPids()
		t.Logf("processes on the machine: %d before the attacker, %d after", pidsBefore, after)
		if after >= pidsBefore+1000 {
			t.Errorf("the fork flood's processes remain: %d processes before, %d after", pidsBefore, after)
		}
	})
	linksAgain, _ := json.Marshal(standin.Attack{Kind: "links", Path: targets.LinkInfo, Target: targets.LinkObjectsInfo})
	reuse := strings.Join([]string{"#!standin",
		"git status", "git add -A", "git commit --allow-empty -m reuse", "git push origin HEAD",
		`tool post_status {"body":"reused: $LAST"}`,
		// Links planted again, for the worktree's release.
		"attack plant-links " + string(linksAgain),
		`tool finish {"outcome":"succeeded","body":"reused"}`}, "\n")
	second, _ := launch("k-reuse", wt, reuse)
	if second == "" {
		t.Fatal("the reuse launch created no worker")
	}
	mb.next(t, "the reuse's status", kindBody(protocol.MsgStatus, "reused: "))
	mb.next(t, "the reuse's worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })
	t.Run("planted code never ran", func(t *testing.T) {
		ran, _ := filepath.Glob(filepath.Join(attackerWS, ".git", "*-*"))
		for _, r := range ran {
			base := filepath.Base(r)
			if strings.HasPrefix(base, "hook-") || base == "fsmonitor" || base == "credential-helper" {
				t.Errorf("planted code ran: %s", base)
			}
		}
		cfg, _ := os.ReadFile(filepath.Join(attackerWS, ".git", "config"))
		for _, key := range []string{"fsmonitor", "helper"} {
			if strings.Contains(string(cfg), key) {
				t.Errorf("the reused worktree's config still names %s:\n%s", key, cfg)
			}
		}
	})
	t.Run("links not followed on reuse", func(t *testing.T) {
		if got := snapshotFiles(t, rootOnly, filepath.Join(other, ".git", "objects", "info")); got != outsideBefore {
			t.Errorf("the folders the attacker's links named changed when its worktree was reused:\nbefore\n%s\nafter\n%s", outsideBefore, got)
		}
	})
	// The worktree, with links planted again, is released.
	rel := fmt.Sprintf(`{"type":"release-resource","resource":{"kind":"worktree","backend":"galley","handle":%q}}`, wt)
	if st, out := s.call(t, "POST", "/v1/effects", effectBody(run, "k-release", rel), "Idempotency-Key", "k-release"); st != 200 {
		t.Fatalf("release: %d %s", st, out)
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Lstat(attackerWS); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the released worktree was not removed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Run("links not followed on release", func(t *testing.T) {
		if got := snapshotFiles(t, rootOnly, filepath.Join(other, ".git", "objects", "info")); got != outsideBefore {
			t.Errorf("the folders the attacker's links named changed when its worktree was released:\nbefore\n%s\nafter\n%s", outsideBefore, got)
		}
		if out, err := exec.Command("git", "-C", other, "log", "--oneline", "-1").CombinedOutput(); err != nil {
			t.Errorf("the other repository cannot read its objects: %v %s", err, out)
		}
	})

	// A log flood and a push flood (issue 21, items 5 and 6): galley's part
	// of the data folder (all but workspaces/, the agents' own worktrees,
	// which galley does not bound: docs/security.md) grows by no more than
	// the worker's log budget and push budget, with room for the store's
	// records; the house repository by no more than the push budget.
	galleyBefore, repoBefore := galleyBytes(t, s.Data), treeBytes(t, repo)
	flooder, ans := agentLaunch(t, s, run, "k-flood", fmt.Sprintf("#!standin\nflood-log %d\nflood-push 3 %d\n"+
		`tool post_status {"body":"flood: $LAST"}`+"\n"+`tool finish {"outcome":"succeeded","body":"flooded"}`, 4*floodLogLimit, floodPushEach),
		"adv/flood", map[string]string{"agent": "claude"})
	if flooder == "" {
		t.Fatalf("flooder launch: %s", ans)
	}
	pushes := mb.next(t, "the push flood's result", kindBody(protocol.MsgStatus, "flood: "))
	mb.next(t, "the flooder's worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(s.Data, "workers", flooder, "exit")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flooder's harness did not exit")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Run("log flood within its budget", func(t *testing.T) {
		fi, err := os.Stat(filepath.Join(s.Data, "workers", flooder, "harness.log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the flooder wrote %d bytes to stderr; its log is %d bytes (budget %d)", 4*floodLogLimit, fi.Size(), floodLogLimit)
		if fi.Size() > floodLogLimit {
			t.Errorf("the flooder's log is %d bytes, over its budget %d", fi.Size(), floodLogLimit)
		}
	})
	t.Run("push flood within its budget", func(t *testing.T) {
		grown := treeBytes(t, repo) - repoBefore
		t.Logf("%s; the house repository grew by %d bytes (push budget %d)", pushes.Body, grown, floodPushBudget)
		if pushes.Body != "flood: pushes accepted 2, refused 1 (push budget)" {
			t.Errorf("push flood: %s, want two pushes accepted and the third refused, naming the budget", pushes.Body)
		}
		if grown > floodPushBudget {
			t.Errorf("the house repository grew by %d bytes, over the push budget %d", grown, floodPushBudget)
		}
	})
	t.Run("data folder within bounds", func(t *testing.T) {
		grown := galleyBytes(t, s.Data) - galleyBefore
		bound := int64(floodLogLimit + floodPushBudget + storeSlack)
		t.Logf("galley's part of the data folder grew by %d bytes during the floods (bound %d: log budget + push budget + %d for the store)", grown, bound, storeSlack)
		if grown > bound {
			t.Errorf("galley's part of the data folder grew by %d bytes, over %d", grown, bound)
		}
	})
	t.Run("galley's descriptors back within bounds", func(t *testing.T) {
		after := openFDsOf(t, s.cmd.Process.Pid)
		t.Logf("galley serve's open descriptors: %d before the attacks, %d after", fdsBefore, after)
		if after > fdsBefore+fdSlack {
			t.Errorf("galley serve holds %d descriptors after the attacks, %d before (room %d)", after, fdsBefore, fdSlack)
		}
	})
}

// The floods' budgets: the log budget is the worker's log file, the push
// budget all its pushes (three pushes of floodPushEach: two fit).
const (
	floodLogLimit   = 1 << 20
	floodPushLimit  = 8 << 20
	floodPushBudget = 12 << 20
	floodPushEach   = 5 << 20
	// storeSlack is room for the store's records of the flooding worker
	// (its record, events, mail) and bbolt's growth by a page run.
	storeSlack = 4 << 20
	// fdSlack is room for connections kept alive between calls.
	fdSlack = 32
)

// treeBytes is the bytes of the regular files beneath dir.
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

// galleyBytes is the size of galley's own part of the data folder: every
// entry but workspaces/.
func galleyBytes(t *testing.T, data string) int64 {
	t.Helper()
	ents, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if e.Name() != "workspaces" {
			n += treeBytes(t, filepath.Join(data, e.Name()))
		}
	}
	return n
}

// hasCgroupV1 reports whether the harness can give agents a cgroup here
// (docs/harness.md): v1 pids and memory hierarchies, and root.
func hasCgroupV1() bool {
	for _, c := range []string{"pids", "memory"} {
		if _, err := os.Stat("/sys/fs/cgroup/" + c + "/cgroup.procs"); err != nil {
			return false
		}
	}
	return os.Geteuid() == 0
}

// openFDsOf counts pid's open descriptors.
func openFDsOf(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatalf("counting galley serve's descriptors: %v", err)
	}
	return len(ents)
}

// snapshotFiles lists every file beneath dirs with its mode and content.
func snapshotFiles(t *testing.T, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s %v", p, fi.Mode())
			if fi.Mode().IsRegular() {
				c, _ := os.ReadFile(p)
				fmt.Fprintf(&b, " %q", c)
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

// countPids is the number of processes on the machine.
func countPids() int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// processesOf lists the live (not zombie) processes whose real uid is uid.
func processesOf(uid int) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var state, name string
		mine := false
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 && f[0] == strconv.Itoa(uid) {
					mine = true
				}
			}
		}
		if mine && !strings.HasPrefix(state, "Z") {
			out = append(out, e.Name()+" "+name)
		}
	}
	return out
}

// agentUIDIn reads the agent uid the worker's harness logged (0 when not
// confined by uid).
func agentUIDIn(t *testing.T, s *server, handle string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Data, "workers", handle, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var l struct {
			Msg string
			UID int
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "agent confined" {
			return l.UID
		}
	}
	return 0
}

// workspaceOf is the worktree path the runtime gave a worker.
func workspaceOf(t *testing.T, s *server, handle string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Data, "workers", handle, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ WorkspacePath string }
	if err := json.Unmarshal(b, &m); err != nil || m.WorkspacePath == "" {
		t.Fatalf("meta.json of %s: %v %s", handle, err, b)
	}
	return m.WorkspacePath
}

func revParse(t *testing.T, repo, ref string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", repo, "rev-parse", "--verify", "--quiet", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// confinementIn reads the confinement the worker's harness logged.
func confinementIn(t *testing.T, s *server, handle string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Data, "workers", handle, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var l struct{ Msg, Confinement string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "agent confined" {
			return l.Confinement
		}
	}
	return string(harness.ConfineNone)
}

// plantStolenCredential copies the victim's credential (a throwaway of
// this test's server) to dst, readable by the attacker, as a thief who
// read it would hold it. The value is never logged.
func plantStolenCredential(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		t.Fatalf("the victim's credential at %s: %v", src, err)
	}
	// The worktree is made once the worker starts.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(filepath.Dir(dst)); err == nil && fi.IsDir() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not made", filepath.Dir(dst))
		}
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatalf("planting the stolen credential: %v", err)
	}
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The host beyond's names: the house's resolver maps both to it, and only
// allowedName is on the house's allowlist.
const (
	evilName    = "evil.example"
	allowedName = "allowed.example"
)

// hostBeyond makes a host beyond (local/testnet) listening on 443 (it
// says who it is and closes) and 80 (HTTP), or nil where none can be
// made (not root, no iproute2): the attacks aimed at it are then left out,
// which fails the test under GALLEY_REQUIRE_STANDINS=1.
func hostBeyond(t *testing.T) *testnet.Host {
	t.Helper()
	h, err := testnet.New()
	if errors.Is(err, testnet.ErrUnavailable) {
		if os.Getenv("GALLEY_REQUIRE_STANDINS") == "1" {
			t.Fatal(err)
		}
		t.Logf("the attacks on a host beyond are left out: %v", err)
		return nil
	}
	if err != nil {
		t.Fatal(err)
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
			_, _ = io.WriteString(c, "the host beyond, port 443\n")
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
	return h
}

func sha256Hex(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

// environOf reads the environment of the process a "hanging pid <pid>
// child <pid>" status names (as root), for the test alone: no value is
// logged.
func environOf(t *testing.T, hang string) map[string]string {
	t.Helper()
	var pid, child int
	if _, err := fmt.Sscanf(hang, "hanging pid %d child %d", &pid, &child); err != nil {
		t.Fatalf("the hang status %q: %v", hang, err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatalf("reading the victim's environment: %v", err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// plantFile writes content to dst (in the attacker's worktree, once it is
// made), readable by the attacker. The content is never logged.
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
	if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
		t.Fatalf("planting %s: %v", filepath.Base(dst), err)
	}
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
}

// networkIn reads how the worker's harness confined the agent's network
// (its log's description).
func networkIn(t *testing.T, s *server, handle string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Data, "workers", handle, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var l struct{ Msg, Network string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "agent confined" {
			return l.Network
		}
	}
	return ""
}

// checkNoRoute asserts, for an agent in a network namespace of its own,
// that each network attack failed because that network has loopback
// alone: no route beyond (at once, never a timeout that a slow or
// filtered host would also give), and nothing listening on its loopback
// but the harness's servers.
func checkNoRoute(t *testing.T, name, v string) {
	t.Helper()
	switch name {
	case "dial-evil-address":
		if !strings.Contains(v, "network is unreachable") {
			t.Errorf("the host beyond was not unreachable for want of a route: %s", v)
		}
	case "reach-galley":
		if !strings.Contains(v, "connection refused") {
			t.Errorf("galley's port was not refused by the agent's own loopback: %s", v)
		}
	case "resolve-evil-name":
		for _, bad := range []string{"timeout", "timed out"} {
			if strings.Contains(v, bad) {
				t.Errorf("a resolver timed out instead of being out of the network: %s", v)
			}
		}
	default:
		return
	}
	if !strings.Contains(v, "this network's interfaces: lo)") {
		t.Errorf("the agent's network has more than its loopback: %s", v)
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

// kitchnCallsDuringFlood makes n kitchn calls (GET /v1/descriptor, each
// on a new connection, as a client without keep-alive) and returns how
// many it made and how many failed.
func kitchnCallsDuringFlood(t *testing.T, s *server, n int) (calls, failures int) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	for range n {
		calls++
		req, _ := http.NewRequest("GET", s.Endpoint+"/v1/descriptor", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
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
