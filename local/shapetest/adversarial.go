package shapetest

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/local/testnet"
	"github.com/galley-run/galley/pkg/egress/egresstest"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// The names the house's resolver answers in the adversarial scenario,
// both with the host beyond; only AllowedName is on the house's allowlist
// (the shape sets it: galley serve's --egress-allow, the template's
// egressAllowlist).
const (
	EvilName    = "evil.example"
	AllowedName = "allowed.example"
)

// The push flood's caps, which the shape gives the attacker's harness
// (galley serve's --push-limit and --push-budget, the task's
// GALLEY_PUSH_LIMIT and GALLEY_PUSH_BUDGET): three pushes of FloodPushEach,
// of which two fit the budget.
const (
	FloodPushLimit  = 8 << 20
	FloodPushBudget = 12 << 20
	FloodPushEach   = 5 << 20
)

// reuseHold is the question the reuse of the attacker's worktree asks,
// and waits on, while the test reads the worktree.
const reuseHold = "holding the reused worktree"

// plantedHooks are the hooks the plant attack writes (standin's plant).
var plantedHooks = []string{"pre-commit", "post-commit", "pre-push", "post-checkout", "reference-transaction"}

// The victim's launch key and branch, and the attacker's branch.
const (
	VictimKey      = "k-victim"
	VictimBranch   = "adv/victim"
	attackerBranch = "adv/attacker"
)

// World is what the adversarial scenario makes before the shape starts:
// the house's provider keys (in the shapes the attacker is told,
// sk-ant-test-<hex> and sk-openai-test-<hex>: never their values, a hash
// of each), the provider stand-in the model proxies forward to (which
// takes the Anthropic key alone), a host beyond and the house's resolver,
// which maps EvilName and AllowedName to it.
type World struct {
	AnthropicKey, OpenAIKey string
	Provider                *providerstandin.Server
	// Beyond is nil where no host beyond can be made (Adversary's
	// RequireBeyond unset): the attacks aimed at it are left out.
	Beyond *testnet.Host
	DNS    *egresstest.DNS
}

// Adversary is a shape under the adversarial scenario.
type Adversary struct {
	// Start starts galley in the shape for w: the house's provider keys
	// and base URLs at w.Provider, the allowlist AllowedName, the resolver
	// w.DNS, the push caps FloodPushLimit and FloodPushBudget, a log
	// budget of LogLimit and a model cap of ModelCapTokens.
	Start func(t *testing.T, w World) House
	// RequireBeyond fails the test where no host beyond can be made.
	RequireBeyond bool
	// LogLimit is the worker's log budget in the shape: the log flood
	// writes four times as much.
	LogLimit int
	// AllowedAddr says the harness's egress event of the allowlisted name
	// names the host beyond's address it dialled (the local shape: the
	// agent's egress proxy dials itself; aws-local's chains to the stack's
	// egress service).
	AllowedAddr bool
}

// Victim is the worker the attacks aim at, hanging while they run.
type Victim struct {
	Handle string
	// Env is its CLI's environment (read as root), ModelURL and
	// ModelToken its model proxy's, which the attacker is given.
	Env                  map[string]string
	ModelURL, ModelToken string
}

// Aimed is what a shape's targets of the attacks are, seen from this
// machine.
type Aimed struct {
	// VictimWorkspace is the victim's worktree.
	VictimWorkspace string
	// Linked are the folders the links attack points at, which neither
	// reuse nor release may change; Repositories are git directories among
	// them whose objects must still read after the release.
	Linked       []string
	Repositories []string
}

// Refusals is how a shape refused the attacks.
type Refusals struct {
	// APIOutOfReach says the worker API is out of the agent's network, so
	// the stolen credential could not be presented at all: Check asserts
	// how it failed instead of standin.CheckVerdict's refusal of a genuine
	// credential bound to another key.
	APIOutOfReach bool
	// Check asserts what the shape's refusal of attack name must show in
	// its verdict v: its network's answers, its file system's. It may skip
	// the sub-test for a gap the shape documents.
	Check func(t *testing.T, name, v string)
}

// House is a shape started for the adversarial scenario: galley serving
// kitchn, workers confined as the shape confines them, and what the test
// reads from this machine.
type House interface {
	Kitchn
	// Repository is the house repository's git directory.
	Repository() string
	// ProcessEnv is the environment (read as root) of the process of
	// worker whose hang status ("hanging pid <pid> child <pid>") is hang.
	ProcessEnv(t *testing.T, worker, hang string) map[string]string
	// Workspace is worker's worktree, once its worker has one.
	Workspace(t *testing.T, worker string) string
	// Aim sets the shape's part of the targets of the attacks on v (tg
	// holds the part common to both shapes): where the house's secrets
	// and the victim's token and worktree are as the agent names them,
	// the links' targets (made here), the network's addresses, more
	// resolvers. It may run sub-tests of its own: the facts the attacks
	// rely on.
	Aim(t *testing.T, v Victim, tg *standin.Targets) Aimed
	// Baseline is called just before the attacker launches: counts that
	// the shape's checks compare with after the attacks.
	Baseline(t *testing.T)
	// StolenCredential is the victim's worker credential (launched under
	// VictimKey), as a thief who read it would hold it. Never logged.
	StolenCredential(t *testing.T, v Victim) string
	// Refusals reads how the shape confined the attacker's agent.
	Refusals(t *testing.T, attacker string) Refusals
	// Ended waits until worker's harness has ended.
	Ended(t *testing.T, worker string)
	// AfterAttacks runs the shape's own sub-tests once the attacker has
	// ended.
	AfterAttacks(t *testing.T, v Victim, attacker string)
	// Reusing runs the shape's own sub-tests of worktree wt while worker,
	// which reuses it, holds after its git commands (where the reused
	// worktree came from), and notes what Released will check.
	Reusing(t *testing.T, worker, wt string)
	// Released waits until worktree wt, released once worker (its last
	// user, which worked in it at workspace) ended, is gone as the shape
	// removes it, and checks that it is.
	Released(t *testing.T, worker, wt, workspace string)
	// BeforeFloods is called before the flooder launches; LogFlood checks
	// that the flooder's log stayed within LogLimit, and AfterFloods runs
	// the shape's sub-tests after both floods.
	BeforeFloods(t *testing.T)
	LogFlood(t *testing.T, flooder string)
	AfterFloods(t *testing.T)
}

// Adversarial runs an agent scripted to attack (the stand-in CLI's
// AttackBrief) in the shape: a victim commits on its branch and hangs,
// holding its model proxy's token; the attacker tries every attack whose
// targets the shape gives, each in its own sub-test, for the reason its
// verdict must show (standin.CheckVerdict, and the shape's Refusals); the
// honest path works (the attacker's own branch gets its commit). The
// house's provider keys are hunted for by hash; the network attacks aim at
// a host beyond by address, by name through the egress proxy and through
// every resolver, at galley's addresses and at the victim's model-proxy
// token; a connection flood of the harness's servers leaves kitchn's
// calls untouched; an allowlisted name is reached through the egress
// proxy, and the decisions are in the attacker's event log. Then its
// worktree is reused (nothing it planted runs, no link it planted is
// followed) and released (nor then), and a log flood and a push flood stay
// within their budgets. Last, a worker's model calls meet the house's cap
// (the worker list shows their model, tokens and cost, its event log a
// warning) and an agent whose brief holds the house key is refused its
// start (its event log has the error, without the key).
func Adversarial(t *testing.T, a Adversary) {
	w := World{AnthropicKey: "sk-ant-test-" + RandomHex(t), OpenAIKey: "sk-openai-test-" + RandomHex(t)}
	w.Provider = providerstandin.New(w.AnthropicKey, nil)
	t.Cleanup(w.Provider.Close)
	w.Beyond = HostBeyond(t, a.RequireBeyond)
	names := map[string][]string{}
	if w.Beyond != nil {
		names[EvilName] = []string{w.Beyond.Addr.String()}
		names[AllowedName] = []string{w.Beyond.Addr.String()}
	}
	w.DNS = egresstest.StartDNS(t, names)
	h := a.Start(t, w)

	victim, _ := launch(t, h, VictimKey, "", VictimBranch, "#!standin\ncommit victim.txt the victim's work\nhang")
	defer apply(t, h, "k-victim-cancel", `{"type":"cancel-worker","worker":`+WorkerRes(victim)+`}`)
	hang := h.Next(t, "the victim's hang", Kind(protocol.MsgStatus, "hanging pid "))
	// The victim's CLI holds its model proxy's token (read here as root,
	// as a thief who got into its process would), never the house's key.
	v := Victim{Handle: victim, Env: h.ProcessEnv(t, victim, hang.Body)}
	v.ModelToken, v.ModelURL = v.Env["ANTHROPIC_API_KEY"], v.Env["ANTHROPIC_BASE_URL"]
	t.Run("the victim holds a proxy token", func(t *testing.T) {
		if !strings.HasPrefix(v.ModelToken, "galley-model-") || v.ModelURL == "" {
			t.Errorf("the victim's CLI has ANTHROPIC_API_KEY of %d bytes (not a proxy token) and ANTHROPIC_BASE_URL %q", len(v.ModelToken), v.ModelURL)
		}
		for k, val := range v.Env {
			if strings.Contains(val, w.AnthropicKey) || strings.Contains(val, w.OpenAIKey) {
				t.Errorf("the victim's CLI holds a house key in %s", k)
			}
		}
	})
	repo := h.Repository()
	mainHead, victimHead := RevParse(repo, "refs/heads/main"), RevParse(repo, "refs/heads/"+VictimBranch)

	// The targets both shapes share. Planted code writes its marker
	// inside the worktree's git directory (relative to the worktree): the
	// worktree's next agent can write there in every confinement. The
	// stolen-token attack uses the victim's credential, which the test
	// plants in the attacker's git directory (out of its commits) as a
	// thief would have it; so does the model-token attack with the
	// victim's model-proxy token. The connection flood aims at what the
	// agent reaches: its harness's servers. The key hunt knows the keys'
	// shapes and hashes, and must find a control key of the same shape
	// planted in its worktree. The network attacks aim at the host beyond
	// by address and by name, the name through every resolver (the
	// system's, the house's own, which would answer, and public ones).
	controlKey := "sk-ant-test-" + RandomHex(t)
	tg := standin.Targets{
		OtherBranch:      VictimBranch,
		Marker:           ".git",
		StolenCredential: filepath.Join(".git", "stolen-credential"),
		StolenModelToken: filepath.Join(".git", "stolen-model-token"), VictimModelURL: v.ModelURL,
		FloodHarness: true,
		KeyShapes:    []string{`sk-ant-test-[0-9a-f]{32}`, `sk-openai-test-[0-9a-f]{32}`},
		KeyHashes:    []string{SHA256Hex(w.AnthropicKey), SHA256Hex(w.OpenAIKey)},
		KeyControl:   filepath.Join(".git", "control-key"), KeyControlHash: SHA256Hex(controlKey),
		Resolvers: []string{w.DNS.Addr},
	}
	if w.Beyond != nil {
		tg.EvilAddrs = []string{net.JoinHostPort(w.Beyond.Addr.String(), "443"), net.JoinHostPort(w.Beyond.Addr.String(), "80")}
		tg.EvilName, tg.AllowedName = EvilName, AllowedName
	}
	aimed := h.Aim(t, v, &tg)
	if w.Beyond != nil {
		tg.Resolvers = append(tg.Resolvers, "1.1.1.1:53", "8.8.8.8:53")
	} else {
		tg.Resolvers = nil
	}
	linkedBefore := SnapshotOwned(t, aimed.Linked...)

	h.Baseline(t)
	attacker, wt := launch(t, h, "k-attack", "", attackerBranch, standin.AttackBrief(tg))
	if wt == "" {
		t.Fatalf("the attacker's launch created no worktree")
	}
	attackerWS := h.Workspace(t, attacker)
	stolen := filepath.Join(attackerWS, tg.StolenCredential)
	plantFile(t, stolen, h.StolenCredential(t, v))
	plantFile(t, filepath.Join(attackerWS, tg.StolenModelToken), v.ModelToken)
	plantFile(t, filepath.Join(attackerWS, tg.KeyControl), controlKey)
	attacks := standin.AttackNamesFor(tg)
	verdicts := map[string]string{}
	var floodCalls, floodFailures int
	for _, name := range attacks {
		verdict := Kind(protocol.MsgStatus, "attack "+name+": ")
		if name == "connflood" || name == "connflood-harness" {
			// The agent holds its connections until kitchn replies: every
			// call made meanwhile, each on a new connection, must succeed.
			holding := func(m protocol.MailMessage) bool {
				return m.Kind == protocol.MsgQuestion && strings.HasPrefix(m.Body, "holding ")
			}
			q := h.Next(t, "the connection flood's question", holding)
			t.Logf("connection flood: the agent is %s", q.Body)
			floodCalls, floodFailures = kitchnCallsDuringFlood(t, h, 50)
			// The flood spends the agent's own connection budget too: its
			// call that waits for the reply can be cut (its connection
			// closed for a newer one), and it asks again. Each question
			// is answered until the verdict comes.
			for n := 1; ; n++ {
				apply(t, h, fmt.Sprintf("k-%s-reply-%d", name, n), fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"done"}`, WorkerRes(attacker), q.ID))
				m := h.Next(t, "attack "+name+" (or its question again)", func(m protocol.MailMessage) bool { return verdict(m) || holding(m) })
				if !holding(m) {
					verdicts[name] = m.Body
					break
				}
				if n == 3 {
					t.Fatalf("the connection flood asked its question %d times: %s", n+1, m.Body)
				}
				t.Logf("the agent asked again (its wait for the reply was cut): %s", m.Body)
				q = m
			}
			continue
		}
		verdicts[name] = h.Next(t, "attack "+name, verdict).Body
		if name == "stolen-token" {
			_ = os.Remove(stolen)
		}
	}
	honest := h.Next(t, "the honest push", Kind(protocol.MsgStatus, "honest: "))
	done := h.Next(t, "the attacker's worker-done", Kind(protocol.MsgWorkerDone, ""))
	refusals := h.Refusals(t, attacker)
	// The harness ends the agent after its worker-done; the runtime
	// records the harness's end once it has returned.
	h.Ended(t, attacker)

	for _, name := range attacks {
		t.Run(name, func(t *testing.T) {
			v := verdicts[name]
			t.Log(v)
			if name != "stolen-token" || !refusals.APIOutOfReach {
				if err := standin.CheckVerdict(name, v); err != nil {
					t.Error(err)
				}
			}
			if name == "connflood" || name == "connflood-harness" {
				t.Logf("kitchn made %d calls during the flood, %d failed", floodCalls, floodFailures)
				if floodCalls == 0 || floodFailures > 0 {
					t.Errorf("kitchn's calls during the connection flood: %d of %d failed", floodFailures, floodCalls)
				}
			}
			refusals.Check(t, name, v)
			if !strings.Contains(v, ": blocked (") {
				t.Errorf("attack not blocked: %s", v)
			}
		})
	}
	t.Run("honest push", func(t *testing.T) {
		if honest.Body != "honest: committed honest.txt" {
			t.Errorf("honest path: %s", honest.Body)
		}
		got, err := exec.Command("git", "--git-dir", repo, "show", attackerBranch+":honest.txt").CombinedOutput()
		if err != nil || string(got) != "the honest path" {
			t.Errorf("%s:honest.txt = %q %v", attackerBranch, got, err)
		}
		if done.Outcome != protocol.OutcomeSucceeded {
			t.Errorf("attacker's worker-done: %+v", done)
		}
	})
	t.Run("house refs unchanged", func(t *testing.T) {
		if got := RevParse(repo, "refs/heads/main"); got != mainHead {
			t.Errorf("main moved: %s -> %s", mainHead, got)
		}
		if got := RevParse(repo, "refs/heads/"+VictimBranch); got != victimHead {
			t.Errorf("the victim's branch changed: %s -> %q", victimHead, got)
		}
		if got := RevParse(repo, "refs/tags/attacker-tag"); got != "" {
			t.Errorf("the attacker's tag exists: %s", got)
		}
		if _, err := os.Lstat(filepath.Join(aimed.VictimWorkspace, "planted-by-attacker")); err == nil {
			t.Error("the attacker created a file in the victim's worktree")
		}
	})
	t.Run("egress decisions in the event log", func(t *testing.T) {
		if w.Beyond == nil {
			t.Skip("no host beyond here: the egress attacks did not run")
		}
		es := Events(t, h, attacker)
		allowed := map[string]string{"host": AllowedName, "port": "443", "allowed": "true", "role": "agent"}
		if a.AllowedAddr {
			allowed["addr"] = net.JoinHostPort(w.Beyond.Addr.String(), "443")
		}
		for _, want := range []map[string]string{
			allowed,
			{"host": EvilName, "port": "443", "allowed": "false", "role": "agent"},
			{"host": w.Beyond.Addr.String(), "allowed": "false"},
		} {
			want["event"] = workerapi.EventEgress
			if !HasEvent(es, eventlog.KindHarness, want) {
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
	t.Run("confinement and pushes in the event log", func(t *testing.T) {
		es := Events(t, h, attacker)
		confined := slices.ContainsFunc(es, func(e store.Event) bool {
			return e.Kind == eventlog.KindHarness && e.Fields["event"] == workerapi.EventConfinement &&
				e.Fields["mode"] != "" && e.Fields["mode"] != "none"
		})
		if !confined {
			t.Error("no confinement event naming an enforced mode in the attacker's log")
		}
		pushed := func(ref string, refused bool) bool {
			return slices.ContainsFunc(es, func(e store.Event) bool {
				return e.Kind == eventlog.KindHarness && e.Fields["event"] == workerapi.EventPush &&
					e.Fields["ref"] == ref && strings.HasPrefix(e.Text, "push refused") == refused
			})
		}
		if !pushed("refs/heads/"+attackerBranch, false) {
			t.Error("no event of the honest push to the attacker's branch")
		}
		if !pushed("refs/heads/main", true) {
			t.Error("no event of the push to main refused")
		}
		if t.Failed() {
			for _, e := range es {
				if e.Kind == eventlog.KindHarness {
					t.Logf("harness event: %s %v", e.Text, e.Fields)
				}
			}
		}
	})
	t.Run("the provider saw the house key alone", func(t *testing.T) {
		if w.Provider.SawWrongKey() || w.Provider.SawSecret(v.ModelToken) {
			t.Errorf("the provider stand-in saw another key (a proxy token: %v): %v", w.Provider.SawSecret(v.ModelToken), w.Provider.Refused())
		}
		if len(w.Provider.Calls()) == 0 {
			t.Error("no model call reached the provider: the model-token attack's control did not go through")
		}
	})
	h.AfterAttacks(t, v, attacker)

	// The worktree is reused: the next agent runs plain git there (status
	// consults core.fsmonitor, commit runs hooks, push runs pre-push and
	// may ask the credential helper), and holds (asks and waits) while the
	// test reads the worktree it works in: what the shape gave it, on
	// this machine (the attacker's folder, scrubbed, in the local shape;
	// a new task's storage in aws-local). Nothing the attacker planted ran
	// or is there to run, and no link it planted is there or was
	// followed. Then the reuse plants the links again, for the release.
	linksAgain, _ := json.Marshal(standin.Attack{Kind: "links", Path: tg.LinkInfo, Target: tg.LinkObjectsInfo, Modules: tg.LinkModules})
	reuse := strings.Join([]string{"#!standin",
		"git status", "git add -A", "git commit --allow-empty -m reuse", "git push origin HEAD",
		`tool post_status {"body":"reused: $LAST"}`,
		`tool ask_coordinator {"subject":"reused","body":"` + reuseHold + `"}`,
		"attack plant-links " + string(linksAgain),
		`tool finish {"outcome":"succeeded","body":"reused"}`}, "\n")
	reuser, _ := launch(t, h, "k-reuse", wt, "", reuse)
	h.Next(t, "the reuse's status", Kind(protocol.MsgStatus, "reused: "))
	hold := h.Next(t, "the reuse's hold", Kind(protocol.MsgQuestion, reuseHold))
	reusedWS := h.Workspace(t, reuser)
	t.Run("planted code never ran", func(t *testing.T) {
		gitDir := filepath.Join(reusedWS, ".git")
		if _, err := os.Stat(filepath.Join(gitDir, "HEAD")); err != nil {
			t.Fatalf("the reused worktree has no git directory to check: %v", err)
		}
		ran, _ := filepath.Glob(filepath.Join(gitDir, "*-*"))
		for _, r := range ran {
			if b := filepath.Base(r); strings.HasPrefix(b, "hook-") || b == "fsmonitor" || b == "credential-helper" {
				t.Errorf("planted code ran: %s", b)
			}
		}
		// Galley writes a pre-push hook of its own; a planted one writes
		// its marker.
		for _, hook := range plantedHooks {
			if b, err := os.ReadFile(filepath.Join(gitDir, "hooks", hook)); err == nil && strings.Contains(string(b), "hook-"+hook) {
				t.Errorf("the reused worktree has the planted %s hook:\n%s", hook, b)
			}
		}
		cfg, _ := os.ReadFile(filepath.Join(gitDir, "config"))
		for _, key := range []string{"fsmonitor", "helper"} {
			if strings.Contains(string(cfg), key) {
				t.Errorf("the reused worktree's config still names %s:\n%s", key, cfg)
			}
		}
	})
	t.Run("links not followed on reuse", func(t *testing.T) {
		if got := SnapshotOwned(t, aimed.Linked...); got != linkedBefore {
			t.Errorf("what the attacker's links named changed when its worktree was reused:\nbefore\n%s\nafter\n%s", linkedBefore, got)
		}
		// A clone has no link in its git directory: one there is planted.
		err := filepath.WalkDir(filepath.Join(reusedWS, ".git"), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeSymlink != 0 {
				target, _ := os.Readlink(p)
				t.Errorf("the reused worktree's git directory holds a link: %s -> %s", p, target)
			}
			return nil
		})
		if err != nil {
			t.Errorf("reading the reused worktree's git directory: %v", err)
		}
	})
	h.Reusing(t, reuser, wt)
	apply(t, h, "k-reuse-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"go on"}`, WorkerRes(reuser), hold.ID))
	replanted := h.Next(t, "the reuse's links", Kind(protocol.MsgStatus, "attack plant-links: "))
	h.Next(t, "the reuse's worker-done", Kind(protocol.MsgWorkerDone, ""))
	t.Run("links planted again for the release", func(t *testing.T) {
		if tg.LinkModules != "" && !strings.Contains(replanted.Body, ".git/modules -> ") {
			t.Errorf("the links were not planted again for the release: %s", replanted.Body)
		}
	})
	h.Ended(t, reuser)
	// The worktree, with the links planted again, is released.
	apply(t, h, "k-release", fmt.Sprintf(`{"type":"release-resource","resource":{"kind":"worktree","backend":"galley","handle":%q}}`, wt))
	h.Released(t, reuser, wt, reusedWS)
	t.Run("links not followed on release", func(t *testing.T) {
		if got := SnapshotOwned(t, aimed.Linked...); got != linkedBefore {
			t.Errorf("what the attacker's links named changed when its worktree was released:\nbefore\n%s\nafter\n%s", linkedBefore, got)
		}
		for _, r := range aimed.Repositories {
			if out, err := exec.Command("git", "-C", r, "log", "--oneline", "-1").CombinedOutput(); err != nil {
				t.Errorf("the repository %s cannot read its objects: %v %s", r, err, out)
			}
		}
	})

	// A log flood and a push flood (issue 21, items 5 and 6): the worker's
	// log stays within its budget; the house repository grows by no more
	// than the push budget, the third push refused by the harness's gate.
	repoBefore := TreeBytes(t, repo)
	h.BeforeFloods(t)
	flooder, _ := launch(t, h, "k-flood", "", "adv/flood", fmt.Sprintf("#!standin\nflood-log %d\n"+
		`tool post_status {"body":"flood: $LAST"}`+"\n"+"flood-push 3 %d\n"+
		`tool post_status {"body":"push flood: $LAST"}`+"\n"+
		`tool finish {"outcome":"succeeded","body":"flooded"}`, 4*a.LogLimit, FloodPushEach))
	flooded := h.Next(t, "the log flood's status", Kind(protocol.MsgStatus, "flood: "))
	pushes := h.Next(t, "the push flood's status", Kind(protocol.MsgStatus, "push flood: "))
	h.Next(t, "the flooder's worker-done", Kind(protocol.MsgWorkerDone, ""))
	h.Ended(t, flooder)
	t.Run("log flood within its budget", func(t *testing.T) {
		if flooded.Body != fmt.Sprintf("flood: wrote %d bytes to stderr", 4*a.LogLimit) {
			t.Errorf("the flood did not run as scripted: %s", flooded.Body)
		}
		h.LogFlood(t, flooder)
	})
	t.Run("push flood within its budget", func(t *testing.T) {
		grown := TreeBytes(t, repo) - repoBefore
		t.Logf("%s; the house repository grew by %d bytes (push budget %d)", pushes.Body, grown, FloodPushBudget)
		if pushes.Body != "push flood: pushes accepted 2, refused 1 (push budget)" {
			t.Errorf("push flood: %s, want two pushes accepted and the third refused, naming the budget", pushes.Body)
		}
		if grown > FloodPushBudget {
			t.Errorf("the house repository grew by %d bytes, over the push budget %d", grown, FloodPushBudget)
		}
	})
	h.AfterFloods(t)

	// What the operator sees: a worker's model use in the worker list,
	// warnings and errors in the event log.
	usageAndLevels(t, h, w)
}
