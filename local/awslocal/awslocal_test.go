package awslocal_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/conformance"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
	"github.com/galley-run/galley/pkg/standins"
)

// requireStandins skips a test that needs DynamoDB Local and fauxqs when
// their endpoints are not set, and fails it when make test asked for them.
func requireStandins(t testing.TB) {
	t.Helper()
	standins.Require(t, standins.DynamoDB, standins.SQS)
}

// binaries are the stack's local programs: GALLEY_AWSLOCAL_BIN when make
// built them there, else <module>/bin.
func binaries(t testing.TB) awslocal.Binaries {
	t.Helper()
	dir := os.Getenv(awslocal.EnvBin)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin")
	}
	b := awslocal.BinariesIn(dir)
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	return b
}

// template is the stack template the tests deploy: GALLEY_AWSLOCAL_TEMPLATE
// (make test synthesizes it), else <module>/cdk.out/galley-local.template.json.
func template(t testing.TB) string {
	t.Helper()
	p := os.Getenv("GALLEY_AWSLOCAL_TEMPLATE")
	if p == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		p = filepath.Join(root, "cdk.out", "galley-local.template.json")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no stack template (%v): run `make synth-local`", err)
	}
	return p
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startStack starts the aws-local stack for one test on its own table and
// queues, with the functions' logs in the test's data folder (shown when
// the test fails).
func startStack(t testing.TB, mods ...func(*awslocal.Config)) (*awslocal.Stack, string) {
	s, token, _ := startStackLogged(t, mods...)
	return s, token
}

// startStackLogged is startStack that also returns the stack's output
// (its log and every function's).
func startStackLogged(t testing.TB, mods ...func(*awslocal.Config)) (*awslocal.Stack, string, *syncBuffer) {
	t.Helper()
	requireStandins(t)
	requireWorkerImage(t)
	bin := binaries(t)
	data := t.TempDir()
	logs := &syncBuffer{}
	cfg := awslocal.Config{
		Options: localserver.Options{Listen: "127.0.0.1:0", Data: data,
			Logger: slog.New(slog.NewJSONHandler(logs, nil))},
		Bin: bin, Template: template(t), FunctionOutput: logs, WorkerGrace: 3 * time.Second,
	}
	for _, m := range mods {
		m(&cfg)
	}
	s, err := awslocal.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logContainers(t, s) // before Close removes the tasks' storage
		}
		s.Close()
		if t.Failed() {
			b := []byte(logs.String())
			if len(b) > 64<<10 {
				b = b[len(b)-64<<10:]
			}
			t.Logf("stack output (tail):\n%s", b)
		}
	})
	tok, err := os.ReadFile(s.TokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return s, strings.TrimSpace(string(tok)), logs
}

// shared is the stack the tests share that only read it or launch workers
// of their own (their own run, keys and handles) and count, stop or change
// nothing stack-wide: one deployment instead of one each. The first such
// test starts it (sharedStack); TestMain closes it. A test that sets the
// stack's config, stops or counts what is not its own, or needs a fresh
// table starts its own (startStack).
var shared struct {
	once  sync.Once
	s     *awslocal.Stack
	token string
	logs  *syncBuffer
	data  string
	err   error
}

// sharedStack is the package's shared stack and its kitchn token, started
// on first use. A test that fails gets the stack's output (everything the
// sharing tests did) in its log.
func sharedStack(t testing.TB) (*awslocal.Stack, string) {
	t.Helper()
	requireStandins(t)
	requireWorkerImage(t)
	shared.once.Do(func() {
		shared.err = errors.New("its binaries or template are missing (see the first test that asked for it)")
		bin, tpl := binaries(t), template(t)
		data, err := os.MkdirTemp("", "awslocal-shared-")
		if err != nil {
			shared.err = err
			return
		}
		shared.data, shared.logs = data, &syncBuffer{}
		cfg := awslocal.Config{
			Options: localserver.Options{Listen: "127.0.0.1:0", Data: data,
				Logger: slog.New(slog.NewJSONHandler(shared.logs, nil))},
			Bin: bin, Template: tpl, FunctionOutput: shared.logs, WorkerGrace: 3 * time.Second,
		}
		s, err := awslocal.Start(context.Background(), cfg)
		if err != nil {
			shared.err = err
			return
		}
		tok, err := os.ReadFile(s.TokenFile())
		if err != nil {
			s.Close()
			shared.err = err
			return
		}
		shared.s, shared.token = s, strings.TrimSpace(string(tok))
	})
	if shared.s == nil {
		t.Fatalf("the shared stack did not start: %v", shared.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logContainers(t, shared.s)
			b := []byte(shared.logs.String())
			if len(b) > 64<<10 {
				b = b[len(b)-64<<10:]
			}
			t.Logf("shared stack output (tail):\n%s", b)
		}
	})
	return shared.s, shared.token
}

// TestMain closes the shared stack after the package's tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		shared.s.Close()
	}
	if shared.data != "" {
		os.RemoveAll(shared.data)
	}
	os.Exit(code)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestConformanceAWSLocal runs the conformance suite, every check, through
// the aws-local stack: each request passes the local API Gateway, a
// function under the Lambda emulator, DynamoDB Local, fauxqs and the ECS
// stand-in, whose workers are real harness processes with the scripted
// agent, and whose task state changes reach the reconciler function.
func TestConformanceAWSLocal(t *testing.T) {
	t.Parallel() // its own stack: it counts the stack's RunTasks and invocations
	s, token := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := s.FunctionEnv(lambdaapp.Effects)
	rep := conformance.Run(ctx, conformance.Config{
		Endpoint: s.Endpoint(), Token: token, House: env[contract.EnvHouse], Backend: env[contract.EnvBackend],
		Credential: env[contract.EnvCredential],
		Timeout:    15 * time.Second, Wait: 90 * time.Second,
	})
	if rep.Err != nil {
		t.Fatal(rep.Err)
	}
	for _, r := range rep.Results {
		t.Log(r.String())
		if r.Status != conformance.Pass {
			t.Errorf("check %s: %s %s", r.Name, r.Status, r.Reason)
		}
	}
	if len(rep.Results) < 19 {
		t.Fatalf("only %d checks ran", len(rep.Results))
	}
	// The requests really went where they should.
	if n := len(s.ECS().Requests("RunTask")); n == 0 {
		t.Error("no RunTask reached the ECS stand-in")
	}
	inst := s.Instances()
	for _, fn := range []lambdaapp.Function{lambdaapp.Effects, lambdaapp.Reads, lambdaapp.Mailbox, lambdaapp.WorkerAPI} {
		if inst[fn] == 0 {
			t.Errorf("function %s never ran", fn)
		}
	}
	// Cancels stop tasks, whose state changes reach the reconciler.
	for deadline := time.Now().Add(2 * time.Minute); s.Instances()[lambdaapp.Reconciler] == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if inst = s.Instances(); inst[lambdaapp.Reconciler] == 0 {
		t.Error("no task state change reached the reconciler")
	}
	t.Logf("instances per function: %v", inst)
}

// kitchnCall makes one call of route through the stack, as kitchn's client
// does (package client), and decodes a 200 answer.
func kitchnCall(t *testing.T, s *awslocal.Stack, token string, route contract.Route, body string, out any) {
	t.Helper()
	var b []byte
	if body != "" || route.Method != http.MethodGet {
		b = []byte(body)
	}
	a, err := client.New(s.Endpoint(), token, client.WithTimeout(0)).Call(context.Background(), route, b, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusOK {
		t.Fatalf("%s: %d %s", route.Pattern(), a.Status, a.Body)
	}
	if err := json.Unmarshal(a.Body, out); err != nil {
		t.Fatalf("%s: %v: %s", route.Pattern(), err, a.Body)
	}
}

// call is kitchnCall of a method and path.
func call(t *testing.T, s *awslocal.Stack, token, method, path, body string, out any) {
	t.Helper()
	kitchnCall(t, s, token, contract.Route{Method: method, Path: path}, body, out)
}

// A worker whose task ends without any report (here the container's
// command fails at once, as an image that cannot start would) is settled
// failed by the reconciler function from the ECS stand-in's task state
// change, and its coordinator gets a worker-done row saying why.
func TestTaskStoppedWithoutReportAWSLocal(t *testing.T) {
	t.Parallel()
	s, token := startStack(t, func(c *awslocal.Config) { c.WorkerBin = "/bin/false" })
	launch := `{"run":"run-crash","request":{"house":"` + s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse] + `","backend":"galley","credential":"galley-token",` +
		`"task":"t-1","attempt":1,"key":"k-crash-1","effect":{"executor":"worker","effect":` +
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"crash"}}}}`
	var applied struct {
		Status  string
		Receipt protocol.Receipt
	}
	kitchnCall(t, s, token, contract.RouteEffects, launch, &applied)
	if applied.Status != "applied" {
		t.Fatalf("launch: %+v", applied)
	}
	worker := applied.Receipt.Created[0]
	observe := `{"worker":{"kind":"worker","backend":"galley","handle":"` + worker.Handle + `"}}`
	deadline := time.Now().Add(60 * time.Second)
	var obs protocol.Observation
	for {
		kitchnCall(t, s, token, contract.RouteObserve, observe, &obs)
		if obs.State == protocol.StateSettled || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeFailed {
		t.Fatalf("observe: %+v", obs)
	}
	var mail protocol.MailboxAnswer
	kitchnCall(t, s, token, contract.RouteNext, `{"run":"run-crash","coordinator":"c-1"}`, &mail)
	if mail.Delivery == nil || len(mail.Delivery.Messages) != 1 {
		t.Fatalf("mailbox: %+v", mail)
	}
	row := mail.Delivery.Messages[0]
	if row.Kind != protocol.MsgWorkerDone || row.Outcome != protocol.OutcomeFailed || row.Worker == nil ||
		row.Worker.Handle != worker.Handle || !strings.Contains(row.Body, "EssentialContainerExited") ||
		!strings.Contains(row.Body, "code 1") {
		t.Errorf("row: %+v", row)
	}
	if inst := s.Instances(); inst[lambdaapp.Reconciler] == 0 {
		t.Errorf("reconciler instances: %v", inst)
	}
}

// `galley-dev serve --stack aws-local` (make run-aws-local; ServeAWSLocal)
// prints the endpoint, token file and binding as `galley serve` does,
// serves, and on Ctrl-C (SIGINT) says it shuts down, stops everything and
// exits 0. The development binary runs as make runs it, from
// GALLEY_AWSLOCAL_BIN; the stand-ins are found through scripts/standins.sh
// (already running here, so left running).
func TestServeAWSLocal(t *testing.T) {
	requireStandins(t)
	bin := binaries(t)
	tpl := template(t)
	dev := filepath.Join(filepath.Dir(bin.ECS), "galley-dev")
	if _, err := os.Stat(dev); err != nil {
		t.Fatalf("no development binary (%v): run `make build-aws-local`", err)
	}
	t.Setenv(awslocal.EnvBin, filepath.Dir(bin.ECS))
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "")
	t.Setenv("AWS_ENDPOINT_URL_SQS", "")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	var stdout, stderr syncBuffer
	cmd := exec.Command(dev, "serve", "--stack", "aws-local", "--template", tpl, "--listen", "127.0.0.1:0", "--data", data)
	cmd.Dir = root // scripts/standins.sh, found from the working folder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	var endpoint string
	for deadline := time.Now().Add(2 * time.Minute); endpoint == "" && time.Now().Before(deadline); {
		select {
		case err := <-done:
			t.Fatalf("galley-dev serve --stack aws-local ended: %v\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if m := regexp.MustCompile(`galley serving house local \(backend galley\) at (http://\S+)`).FindStringSubmatch(stdout.String()); m != nil &&
			strings.Contains(stdout.String(), `"endpoint": "`+m[1]+`"`) {
			endpoint = m[1]
		}
	}
	if endpoint == "" {
		t.Fatalf("no endpoint printed:\n%s\n%s", stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "bearer token: "+filepath.Join(data, "private", "token")+" (mode 600; copy it to <registry>/private/local/credentials/galley-token)") {
		t.Errorf("output:\n%s", stdout.String())
	}
	tok, err := os.ReadFile(filepath.Join(data, "private", "token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", endpoint+contract.PathDescriptor, nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"house":"local"`) {
		t.Errorf("descriptor: %d %s", resp.StatusCode, b)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("galley-dev serve --stack aws-local exited with %v:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("galley-dev serve --stack aws-local did not stop on SIGINT")
	}
	if !strings.Contains(stdout.String(), "galley: shutting down") {
		t.Errorf("output:\n%s", stdout.String())
	}
	if _, err := http.Get(endpoint + contract.PathDescriptor); err == nil {
		t.Error("the gateway still answers after shutdown")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
