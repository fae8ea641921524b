package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/pkg/harness"
)

// TestAdversarialAgent runs the adversarial scenario (shapetest.Adversarial:
// an agent scripted to attack, the stand-in's AttackBrief) through galley
// serve, once per confinement the machine enforces: a uid of its own
// (galley serve as root) and Landlock (the same with a galley-worker only
// root may run, so a separate uid could not start its agent). The house's keys are galley serve's environment;
// its data folder holds the secrets the attacks aim at (kitchn's token,
// the worker secret, the store, the victim's token file); the links aim at
// a root-only folder and another repository's objects/info. galley's port
// is out of the agent's network (a namespace of its own with loopback
// alone), so every network attack must fail for want of a route. At least
// one enforced mode must run: on a machine with neither the test fails
// (galley serve would declare launch_isolated partial).
func TestAdversarialAgent(t *testing.T) {
	canUID, _ := harness.CanSwitchUser()
	canLandlock := harness.ChooseConfinement("/", "").LandlockABI > 0
	if !canUID && !canLandlock {
		t.Fatal("this machine enforces no confinement (not root, no Landlock): agents would reach galley's data folder")
	}
	if canUID {
		t.Run("uid", func(t *testing.T) { shapetest.Adversarial(t, localAdversary(harness.ConfineUser)) })
	} else {
		t.Log("not root: the uid confinement is not exercised here")
	}
	if canLandlock {
		t.Run("landlock", func(t *testing.T) { shapetest.Adversarial(t, localAdversary(harness.ConfineLandlock)) })
	} else {
		t.Log("the kernel has no Landlock: the Landlock confinement is not exercised here")
	}
}

func randomHex(t *testing.T) string { return shapetest.RandomHex(t) }

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

// localAdversary is the local shape under the adversarial scenario,
// confined by want.
func localAdversary(want harness.Confinement) shapetest.Adversary {
	return shapetest.Adversary{
		LogLimit:    floodLogLimit,
		AllowedAddr: true,
		Start: func(t *testing.T, w shapetest.World) shapetest.House {
			data := t.TempDir()
			openForAgents(t, data, want == harness.ConfineUser)
			env := withStandinCLIs(t, serveEnv{"HOME": t.TempDir(), "ANTHROPIC_API_KEY": w.AnthropicKey, "CODEX_API_KEY": w.OpenAIKey})
			var workerBinFlag []string
			if want == harness.ConfineLandlock && os.Geteuid() == 0 {
				// Root picks a separate uid wherever one can run
				// galley-worker; a copy only root may run leaves it
				// Landlock.
				workerBinFlag = []string{"--worker-bin", privateCopy(t, filepath.Join(binDir, "galley-worker"))}
			}
			s := startServerEnv(t, env, data, append(workerBinFlag, "--families", "claude,codex", "--worker-log-limit", strconv.Itoa(floodLogLimit),
				"--push-limit", strconv.Itoa(shapetest.FloodPushLimit), "--push-budget", strconv.Itoa(shapetest.FloodPushBudget),
				"--model-cap-tokens", strconv.FormatInt(shapetest.ModelCapTokens, 10),
				"--anthropic-base-url", w.Provider.URL, "--openai-base-url", w.Provider.URL+"/v1",
				"--egress-allow", shapetest.AllowedName, "--egress-resolver", w.DNS.Addr)...)
			t.Cleanup(func() { dumpWorkerLogs(t, s) })
			h := newLocalHouse(s, "run-adv")
			h.want = want
			h.fdsBefore = openFDsOf(t, s.cmd.Process.Pid)
			return h
		},
	}
}

func (h *localHouse) Repository() string { return filepath.Join(h.s.Data, "repository.git") }

func (h *localHouse) ProcessEnv(t *testing.T, _, hang string) map[string]string {
	return environOf(t, hang)
}

func (h *localHouse) Workspace(t *testing.T, worker string) string {
	return workspaceOf(t, h.s, worker)
}

// Aim: the data folder's secrets, the victim's token file and worktree as
// they are on this machine (the agent sees the same paths), and for the
// links a root-only folder and another repository's objects/info, whose
// alternates file it needs: neither may change when galley scrubs, reuses
// or releases the worktree. The connection flood aims at what the agent
// reaches (its harness's servers: galley's port is out of its network),
// and reach-galley tries galley's port.
func (h *localHouse) Aim(t *testing.T, v shapetest.Victim, tg *standin.Targets) shapetest.Aimed {
	victimWS := workspaceOf(t, h.s, v.Handle)
	tg.KitchnToken = filepath.Join(h.s.Data, "private", "token")
	tg.WorkerSecret = filepath.Join(h.s.Data, "private", "worker-secret")
	tg.OtherToken = filepath.Join(h.s.Data, "workers", v.Handle, "token")
	tg.Store = filepath.Join(h.s.Data, "private", "galley.db")
	tg.OtherWorkspace = victimWS
	tg.SecretNames = []string{"CODEX_API_KEY", "OPENAI_API_KEY", "GALLEY_GIT_CREDENTIAL", "GALLEY_WORKER_TOKEN", "GALLEY_WORKER_BOOTSTRAP"}
	rootOnly := filepath.Join(t.TempDir(), "root-only")
	other := filepath.Join(t.TempDir(), "other")
	if out, err := exec.Command("git", "clone", "--quiet", "--shared", h.Repository(), other).CombinedOutput(); err != nil {
		t.Fatalf("clone another repository: %v %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(rootOnly, "info"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootOnly, "info", "attributes"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg.LinkInfo = filepath.Join(rootOnly, "info")
	tg.LinkObjectsInfo = filepath.Join(other, ".git", "objects", "info")
	tg.WorkerEndpoint = h.s.Endpoint
	tg.GalleyAddress = strings.TrimPrefix(h.s.Endpoint, "http://")
	return shapetest.Aimed{VictimWorkspace: victimWS, Linked: []string{rootOnly, tg.LinkObjectsInfo}, Repositories: []string{other}}
}

func (h *localHouse) Baseline(t *testing.T) { h.pidsBefore = countPids() }

// StolenCredential is the victim's token file (a throwaway of this test's
// server), as a thief who read it would hold it.
func (h *localHouse) StolenCredential(t *testing.T, v shapetest.Victim) string {
	t.Helper()
	src := filepath.Join(h.s.Data, "workers", v.Handle, "token")
	b, err := os.ReadFile(src)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		t.Fatalf("the victim's credential at %s: %v", src, err)
	}
	return strings.TrimSpace(string(b))
}

// Refusals: the attacker ran confined as wanted; in a network namespace
// of its own each network attack failed for want of a route, and the
// worker API was out of reach (its binding to the harness's key is shown
// where the worker API is in reach: aws-local's
// TestAdversarialAgentAWSLocal).
func (h *localHouse) Refusals(t *testing.T, attacker string) shapetest.Refusals {
	t.Helper()
	mode := confinementIn(t, h.s, attacker)
	network := networkIn(t, h.s, attacker)
	t.Logf("enforcement exercised: %s; the agent's network: %s", mode, network)
	if mode != string(h.want) {
		t.Fatalf("the attacker ran confined by %q, want %q", mode, h.want)
	}
	inNamespace := strings.HasPrefix(network, "a network namespace")
	return shapetest.Refusals{
		APIOutOfReach: inNamespace,
		Check: func(t *testing.T, name, v string) {
			if name == "stolen-token" && inNamespace {
				// galley's port is out of the agent's network: the
				// credential cannot even be presented.
				if strings.Count(v, "connection refused") != 2 {
					t.Errorf("the worker API was in the agent's network: %s", v)
				}
			}
			if inNamespace {
				checkNoRoute(t, name, v)
			}
			if name == "fork-flood" && h.want == harness.ConfineLandlock && os.Geteuid() == 0 && !hasCgroupV1() && strings.Contains(v, "SUCCEEDED") {
				// docs/security.md: under Landlock a root harness's agent
				// is root, which RLIMIT_NPROC does not bind; only its
				// cgroup's pids.max would, and without cgroup v1 the
				// harness makes none.
				t.Skip("known gap of the Landlock confinement as root: " + v)
			}
		},
	}
}

// Ended waits for the runtime's record of the harness's exit.
func (h *localHouse) Ended(t *testing.T, worker string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(h.s.Data, "workers", worker, "exit")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the harness of %s did not exit", worker)
		}
	}
}

func (h *localHouse) AfterAttacks(t *testing.T, _ shapetest.Victim, attacker string) {
	attackerUID := agentUIDIn(t, h.s, attacker)
	t.Run("nothing of the attacker runs", func(t *testing.T) {
		if h.want != harness.ConfineUser {
			t.Skip("under Landlock the agent shares the harness's uid: its processes cannot be told apart by uid (docs/security.md)")
		}
		// The harness reported the attacker's exit only after ending
		// every process of its uid, the fighters included.
		if left := processesOf(attackerUID); len(left) > 0 {
			t.Errorf("%d processes of the attacker's uid %d run after its worker ended: %v", len(left), attackerUID, left)
		}
	})
	t.Run("pids back within bounds", func(t *testing.T) {
		// Counted in the attacker's own cgroups, not on the machine: a
		// make test beside this one floods the machine's count too (its
		// attacker at the same moment). A killed flooder's orphans stay
		// in their group; the kernel removes only an empty one.
		groups := agentCgroups(t, h.s, attacker)
		if len(groups) == 0 {
			t.Fatal("the attacker's harness log names no agent cgroup")
		}
		for _, dir := range groups {
			b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := len(strings.Fields(string(b))); n > 0 {
				t.Errorf("the fork flood's processes remain: %d in the attacker's cgroup %s", n, dir)
			}
		}
		t.Logf("processes on the machine (other tests' included): %d before the attacker, %d after; the attacker's groups %v", h.pidsBefore, countPids(), groups)
	})
}

// Reusing: galley serve reuses the worktree in place, in the attacker's
// folder, scrubbed (workspace.Scrub), which the scenario's checks read.
func (h *localHouse) Reusing(t *testing.T, worker, wt string) {}

// Released waits for the released worktree's folder to be removed.
func (h *localHouse) Released(t *testing.T, worker, wt, workspace string) {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Lstat(workspace); errors.Is(err, fs.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the released worktree %s was not removed", workspace)
		}
	}
}

// agentCgroups lists the cgroups the harness of worker made for its agent,
// as its "agent confined" log line names them.
func agentCgroups(t *testing.T, s *server, worker string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Data, "workers", worker, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		var rec struct{ Msg, Cgroup string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "agent confined" {
			out = append(out, strings.Fields(rec.Cgroup)...)
		}
	}
	return out
}

// The floods (issue 21, items 5 and 6): galley's part of the data folder
// (all but workspaces/, the agents' own worktrees, which galley does not
// bound: docs/security.md) grows by no more than the worker's log budget
// and push budget, with room for the store's records.
func (h *localHouse) BeforeFloods(t *testing.T) { h.galleyBefore = galleyBytes(t, h.s.Data) }

func (h *localHouse) LogFlood(t *testing.T, flooder string) {
	fi, err := os.Stat(filepath.Join(h.s.Data, "workers", flooder, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the flooder wrote %d bytes to stderr; its log is %d bytes (budget %d)", 4*floodLogLimit, fi.Size(), floodLogLimit)
	if fi.Size() > floodLogLimit {
		t.Errorf("the flooder's log is %d bytes, over its budget %d", fi.Size(), floodLogLimit)
	}
}

func (h *localHouse) AfterFloods(t *testing.T) {
	t.Run("data folder within bounds", func(t *testing.T) {
		grown := galleyBytes(t, h.s.Data) - h.galleyBefore
		bound := int64(floodLogLimit + shapetest.FloodPushBudget + storeSlack)
		t.Logf("galley's part of the data folder grew by %d bytes during the floods (bound %d: log budget + push budget + %d for the store)", grown, bound, storeSlack)
		if grown > bound {
			t.Errorf("galley's part of the data folder grew by %d bytes, over %d", grown, bound)
		}
	})
	t.Run("galley's descriptors back within bounds", func(t *testing.T) {
		after := openFDsOf(t, h.s.cmd.Process.Pid)
		t.Logf("galley serve's open descriptors: %d before the attacks, %d after", h.fdsBefore, after)
		if after > h.fdsBefore+fdSlack {
			t.Errorf("galley serve holds %d descriptors after the attacks, %d before (room %d)", after, h.fdsBefore, fdSlack)
		}
	})
}

// The log flood's budget, the worker's log file (the push flood's are
// shapetest's).
const (
	floodLogLimit = 1 << 20
	// storeSlack is room for the store's records of the flooding worker
	// (its record, events, mail) and bbolt's growth by a page run.
	storeSlack = 4 << 20
	// fdSlack is room for connections kept alive between calls.
	fdSlack = 32
)

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
			n += shapetest.TreeBytes(t, filepath.Join(data, e.Name()))
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
