package awslocal_test

import (
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
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
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

// taskOf finds the ECS stand-in's task of a worker.
func taskOf(t *testing.T, s *awslocal.Stack, handle string) (id, workspace string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, task := range s.ECS().Tasks() {
			if task.Env["GALLEY_WORKER_HANDLE"] == handle && task.Workspace != "" {
				return task.ID, task.Workspace
			}
		}
	}
	t.Fatalf("no task for worker %s", handle)
	return "", ""
}

// TestAdversarialAgentAWSLocal runs the adversarial agent of the local
// shape's test through the stack deployed from its template: a worker task
// started from the task definition, its agent under a uid of its own, its
// pushes through the harness's gate to the authenticated git server. Every
// attack fails, and the honest path works. In this shape there is no
// signing key or store on disk (they are in the Secrets Manager stand-in
// and DynamoDB Local, reached only through the IAM gates); those two
// attacks aim at the house repository's storage instead, and
// task-credentials aims at the real task role's endpoint.
func TestAdversarialAgentAWSLocal(t *testing.T) {
	// Parallel: on its own stack; most of its time is the attacks' waits,
	// which the doc commands' builds and the idle minute can share.
	t.Parallel()
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Fatalf("the uid confinement cannot run here (%s): agents would reach the stack's folders", why)
	}
	// The template's push caps (the harness's defaults, 100 MiB a push and
	// 512 MiB a worker) are too large to flood on this machine; the copy
	// sets smaller ones through the same task environment, so the flood
	// below meets the same gate and configuration path as on AWS.
	tpl := mutatedTemplate(t, func(res map[string]any) error {
		c, err := workerContainer(res)
		if err != nil {
			return err
		}
		env, _ := c["Environment"].([]any)
		c["Environment"] = append(env,
			map[string]any{"Name": harness.EnvPushLimit, "Value": strconv.Itoa(floodPushLimit)},
			map[string]any{"Name": harness.EnvPushBudget, "Value": strconv.Itoa(floodPushBudget)})
		return nil
	})
	s, token, _ := startStackLogged(t, func(c *awslocal.Config) { openParents(t, c.Data); c.Template = tpl })
	data := filepath.Dir(filepath.Dir(s.TokenFile()))
	k := newKitchn(t, s, token, "run-adv")
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
	house := s.FunctionEnv("effects")["GALLEY_HOUSE"]
	for _, name := range []string{"anthropic", "openai"} {
		if err := s.PutSecret(ctx, "galley/"+house+"/"+name, randomValue(t, "sk-test-")); err != nil {
			t.Fatal(err)
		}
	}

	victim, _ := launch("k-victim", "", "adv/victim", "#!standin\ncommit victim.txt the victim's work\nhang")
	k.next("the victim's hang", kind(protocol.MsgStatus, "hanging pid "))
	victimTask, victimWS := taskOf(t, s, victim)
	repo := s.Repository()
	mainHead, victimHead := revParse(repo, "refs/heads/main"), revParse(repo, "refs/heads/adv/victim")

	targets := standin.Targets{
		KitchnToken:    s.TokenFile(),
		WorkerSecret:   filepath.Join(repo, "config"),
		OtherToken:     filepath.Join(data, "aws-local", "ecs", "procs", "workers", victimTask, "token"),
		Store:          filepath.Join(repo, "HEAD"),
		OtherWorkspace: victimWS,
		OtherBranch:    "adv/victim",
		Marker:         ".git",
		SecretNames: []string{"GALLEY_OPENAI_API_KEY", "GALLEY_GIT_CREDENTIAL", "GALLEY_WORKER_BOOTSTRAP",
			"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"},
	}
	if s.WorkerImageRef() != "" {
		// No launch file on the host: the victim's token travels in its
		// container's configuration, which podman keeps on the host.
		cfg, err := s.ECS().ContainerConfig(victimTask)
		if err != nil {
			t.Fatal(err)
		}
		targets.OtherToken = cfg
	}
	workerEndpoint := s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvWorkerEndpoint]
	if workerEndpoint == "" {
		t.Fatal("the stack names no worker endpoint")
	}
	// The stolen-token attack uses the victim's credential, planted in
	// the attacker's git directory (out of its commits) as a thief would
	// hold it.
	targets.WorkerEndpoint = workerEndpoint
	// The connection flood aims at the API as the worker reaches it.
	api, err := url.Parse(workerEndpoint)
	if err != nil || api.Host == "" {
		t.Fatalf("worker endpoint %q: %v", workerEndpoint, err)
	}
	targets.APIAddress = api.Host
	targets.StolenCredential = filepath.Join(".git", "stolen-credential")
	if name, gw := s.WorkerNetwork(); name != "" {
		// The raw stand-ins, at the addresses a worker container would
		// name them (TestWorkerContainerReachesOnlyTheGates), and a gate
		// as the control that must answer. Workers as host programs
		// reach loopback, where the stand-ins listen: a known gap
		// (docs/aws-local.md), so the attack runs on the image only.
		for what, raw := range map[string]string{"DynamoDB Local": os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), "fauxqs": os.Getenv("AWS_ENDPOINT_URL_SQS")} {
			u, err := url.Parse(raw)
			if err != nil || u.Port() == "" {
				t.Fatalf("no endpoint for %s: %q", what, raw)
			}
			targets.RawStandins = append(targets.RawStandins, net.JoinHostPort(gw.String(), u.Port()), u.Host)
		}
		g, err := url.Parse(s.GateURL(iamgate.DynamoDB))
		if err != nil {
			t.Fatal(err)
		}
		targets.DialControl = g.Host
	} else {
		t.Log("workers run as host programs: the raw stand-in ports are not attacked (they listen on the host's loopback)")
	}
	for _, p := range []string{targets.KitchnToken, targets.OtherToken, targets.WorkerSecret} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("target %s does not exist, so its attack would prove nothing: %v", p, err)
		}
	}
	stackURLs := []string{s.Endpoint(), workerEndpoint, s.GitURL()}
	for _, svc := range iamgate.Services {
		stackURLs = append(stackURLs, s.GateURL(svc))
	}
	stackPorts := portsOf(t, stackURLs...)
	fdsBefore, socketsBefore := openFDs(t), stackSockets(t, stackPorts)
	attacker, wt := launch("k-attack", "", "adv/attacker", standin.AttackBrief(targets))
	_, attackerWS := taskOf(t, s, attacker)
	stolen := filepath.Join(attackerWS, targets.StolenCredential)
	plantStolenCredential(t, stolen, victimCredential(t, s, victim, "k-victim"))
	names := standin.AttackNamesFor(targets)
	verdicts := map[string]string{}
	var floodCalls, floodFailures int
	for _, name := range names {
		if name == "connflood" {
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
			t.Log(verdicts[name])
			checkAttackSpecifics(t, name, verdicts[name])
			if name == "connflood" {
				t.Logf("kitchn made %d calls during the flood, %d failed", floodCalls, floodFailures)
				if floodCalls == 0 || floodFailures > 0 {
					t.Errorf("kitchn's calls during the connection flood: %d of %d failed", floodFailures, floodCalls)
				}
			}
			if !strings.Contains(verdicts[name], ": blocked (") {
				t.Errorf("attack not blocked: %s", verdicts[name])
			}
		})
	}
	t.Run("honest push", func(t *testing.T) {
		if honest.Body != "honest: committed honest.txt" || done.Outcome != protocol.OutcomeSucceeded {
			t.Errorf("honest path: %s; %+v", honest.Body, done)
		}
		got, err := exec.Command("git", "--git-dir", repo, "show", "adv/attacker:honest.txt").CombinedOutput()
		if err != nil || string(got) != "the honest path" {
			t.Errorf("adv/attacker:honest.txt = %q %v", got, err)
		}
	})
	t.Run("the stack's descriptors back within bounds", func(t *testing.T) {
		// The stack (gateway, gates, git server) runs in this process,
		// beside the parallel tests' stacks: its connections are the
		// sockets on its own ports. The flood's, which the agent closed
		// when it ended, may take a moment to close on the stack's side.
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

	// The attacker's worktree is reused by a new worker task on the same
	// file system: nothing it planted runs.
	reuse := strings.Join([]string{"#!standin", "git status", "git add -A", "git commit --allow-empty -m reuse",
		"git push origin HEAD", `tool post_status {"body":"reused: $LAST"}`, `tool finish {"outcome":"succeeded","body":"reused"}`}, "\n")
	if second, _ := launch("k-reuse", wt, "", reuse); second == "" {
		t.Fatal("the reuse launch created no worker")
	}
	k.next("the reuse's status", kind(protocol.MsgStatus, "reused: "))
	k.next("the reuse's worker-done", kind(protocol.MsgWorkerDone, ""))
	t.Run("planted code never ran", func(t *testing.T) {
		ran, _ := filepath.Glob(filepath.Join(attackerWS, ".git", "*-*"))
		for _, r := range ran {
			if b := filepath.Base(r); strings.HasPrefix(b, "hook-") || b == "fsmonitor" || b == "credential-helper" {
				t.Errorf("planted code ran: %s", b)
			}
		}
	})

	// A log flood and a push flood (issue 21, items 5 and 6): what the
	// worker's container writes, which is what reaches CloudWatch on AWS,
	// stays within the harness's log budget, which the template leaves at
	// its default; the house repository grows by no more than the push
	// budget, the third push refused by the harness's gate.
	if s.WorkerImageRef() == "" {
		t.Log("workers run as host programs: the log flood is checked in the container shape only")
		return
	}
	repoBefore := treeBytes(t, s.Repository())
	flooder, _ := launch("k-flood", "", "adv/flood", fmt.Sprintf("#!standin\nflood-log %d\n"+
		`tool post_status {"body":"flood: $LAST"}`+"\n"+"flood-push 3 %d\n"+
		`tool post_status {"body":"push flood: $LAST"}`+"\n"+
		`tool finish {"outcome":"succeeded","body":"flooded"}`, 4*harness.DefaultLogLimit, floodPushEach))
	flooded := k.next("the log flood's status", kind(protocol.MsgStatus, "flood: "))
	pushes := k.next("the push flood's status", kind(protocol.MsgStatus, "push flood: "))
	k.next("the flooder's worker-done", kind(protocol.MsgWorkerDone, ""))
	floodTask, _ := taskOf(t, s, flooder)
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
// launch derives from its key (launchNonce). The stolen-token attack's
// verdict proves it genuine: galley refuses it as bound to another key,
// not as a bad credential.
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

// plantStolenCredential writes cred to dst, readable by the attacker,
// once dst's folder exists. The value is never logged.
func plantStolenCredential(t *testing.T, dst, cred string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(filepath.Dir(dst)); err == nil && fi.IsDir() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not made", filepath.Dir(dst))
		}
	}
	if err := os.WriteFile(dst, []byte(cred+"\n"), 0o644); err != nil {
		t.Fatalf("planting the stolen credential: %v", err)
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
