package awslocal_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/container"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/testnet"
	"github.com/galley-run/galley/pkg/contract"
	egresspkg "github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
)

// requireWorkerImage fails a test under GALLEY_REQUIRE_STANDINS=1 when no
// worker image is named (make test builds one per agent family and names
// them): every stack of make test runs its workers as containers.
// Elsewhere a stack without one runs them as host programs. It returns the
// image the scripted agent's tasks run (the first family's, as the
// template's default task definition is), or "".
func requireWorkerImage(t testing.TB) string {
	t.Helper()
	v := os.Getenv(awslocal.EnvWorkerImage)
	if v == "" && os.Getenv("GALLEY_REQUIRE_STANDINS") == "1" {
		t.Fatalf("GALLEY_REQUIRE_STANDINS=1 and %s is not set: make test builds the worker images (scripts/worker-image.sh) and names them", awslocal.EnvWorkerImage)
	}
	images, err := awslocal.ParseWorkerImages(v)
	if err != nil {
		t.Fatal(err)
	}
	if img := images["claude"]; img != "" {
		return img
	}
	return images[""]
}

// TestWorkerContainerReachesOnlyTheEgressService: from a container of the
// worker image on the stack's network, the stack's egress service and the
// S3 gate are the ports that answer, as on AWS a worker task's security
// group admits only the egress proxy, S3 (the gateway endpoint: the
// worktree snapshots) and the VPC endpoints, which the task itself never
// calls: the API, the git server, the other IAM gates, DynamoDB Local and
// fauxqs, and a host beyond (an address of the internet) do not. Through
// the egress service, a client without the harness's credential gets
// nothing; the harness reaches the API, and not the host beyond, which is
// neither one of its destinations nor on the house's allowlist.
func TestWorkerContainerReachesOnlyTheEgressService(t *testing.T) {
	img := requireWorkerImage(t)
	if img == "" {
		t.Skipf("%s is not set: workers run as host programs", awslocal.EnvWorkerImage)
	}
	t.Parallel()
	beyond := hostBeyond(t)
	s, _ := sharedStack(t)
	name, gw := s.WorkerNetwork()
	if name == "" {
		t.Fatal("the stack runs no container network although a worker image is set")
	}
	hostPort := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	port := func(raw string) string {
		_, p, err := net.SplitHostPort(hostPort(raw))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	egress := s.EgressAddress()
	if egress == "" {
		t.Fatal("the stack runs no egress service")
	}
	api := hostPort(s.FunctionEnv(lambdaapp.Effects)[contract.EnvWorkerEndpoint])
	closed := map[string]string{"the API": api, "the git server": hostPort(s.GitURL()),
		"a host beyond": net.JoinHostPort(beyond.Addr.String(), "443")}
	for _, svc := range iamgate.Services {
		if svc == iamgate.S3 {
			continue // reached directly, as S3 is on AWS (below)
		}
		closed["the "+string(svc)+" gate"] = hostPort(s.GateURL(svc))
	}
	for what, raw := range map[string]string{"DynamoDB Local": os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), "fauxqs": os.Getenv("AWS_ENDPOINT_URL_SQS")} {
		if raw == "" {
			t.Fatalf("no endpoint for %s", what)
		}
		closed[what+" at the network host side"] = net.JoinHostPort(gw.String(), port(raw))
		closed[what+" as the host names it"] = hostPort(raw)
	}
	secret, err := s.SecretValue(context.Background(), "galley/local/egress-proxy")
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	probe := func(what, addr string) {
		h, p, _ := net.SplitHostPort(addr)
		script.WriteString("if (exec 3<>/dev/tcp/" + h + "/" + p + ") 2>/dev/null; then echo 'open:" + what + "'; else echo 'closed:" + what + "'; fi\n")
	}
	probe("the egress service", egress)
	probe("the s3 gate", hostPort(s.GateURL(iamgate.S3)))
	for what, addr := range closed {
		probe(what, addr)
	}
	// A CONNECT through the egress service, its status line printed.
	eh, ep, _ := net.SplitHostPort(egress)
	connect := func(what, target, auth string) {
		hdr := ""
		if auth != "" {
			hdr = "Proxy-Authorization: Basic " + auth + "\\r\\n"
		}
		script.WriteString("exec 3<>/dev/tcp/" + eh + "/" + ep + "; printf 'CONNECT " + target + " HTTP/1.1\\r\\nHost: " + target + "\\r\\n" + hdr +
			"\\r\\n' >&3; read -r line <&3; echo \"via:" + what + ": ${line%$'\\r'}\"; exec 3<&-\n")
	}
	harnessAuth := base64.StdEncoding.EncodeToString([]byte(egresspkg.HarnessUser + ":" + secret))
	connect("anonymous to the API", api, "")
	connect("harness to the API", api, harnessAuth)
	connect("harness to a host beyond", net.JoinHostPort(beyond.Addr.String(), "443"), harnessAuth)
	rt, err := container.New(container.WithDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	c, err := rt.Start(context.Background(), container.Spec{Name: "galley-reach-" + strings.ToLower(randomValue(t, "")[:8]),
		Image: img, Entrypoint: []string{"/bin/bash", "-c", script.String()}, Network: name,
		Capabilities: []string{"CHOWN", "DAC_OVERRIDE", "KILL", "SETGID", "SETUID"}, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove(context.Background())
	if code, err := c.Wait(context.Background()); err != nil || code != 0 {
		t.Fatalf("probe container: %d %v: %s", code, err, out.String())
	}
	got := out.String()
	if !strings.Contains(got, "open:the egress service\n") {
		t.Errorf("the egress service does not answer from a worker container:\n%s", got)
	}
	// The harness keeps its worktree's snapshots in S3, which a task
	// reaches through the VPC's gateway endpoint on AWS, not the proxy.
	if !strings.Contains(got, "open:the s3 gate\n") {
		t.Errorf("the S3 gate does not answer from a worker container:\n%s", got)
	}
	for what := range closed {
		if !strings.Contains(got, "closed:"+what+"\n") {
			t.Errorf("%s answers a worker container:\n%s", what, got)
		}
	}
	for what, status := range map[string]string{"anonymous to the API": "407", "harness to the API": "200", "harness to a host beyond": "403"} {
		if !regexp.MustCompile(`via:` + what + `: HTTP/1\.[01] ` + status + ` `).MatchString(got) {
			t.Errorf("through the egress service, %s: want %s in:\n%s", what, status, got)
		}
	}
}

// tryStart starts a stack of the template tpl and returns Start's error.
func tryStart(t *testing.T, tpl string) (*awslocal.Stack, error) {
	t.Helper()
	requireStandins(t)
	requireWorkerImage(t)
	cfg := awslocal.Config{
		Options: localserver.Options{Listen: "127.0.0.1:0", Data: t.TempDir(), Logger: slog.New(slog.DiscardHandler)},
		Bin:     binaries(t), Template: tpl, FunctionOutput: io.Discard, WorkerGrace: 3 * time.Second,
	}
	s, err := awslocal.Start(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// workerLinux returns the worker task definition's LinuxParameters in the
// template's resources.
func workerLinux(res map[string]any) (map[string]any, error) {
	c, err := workerContainer(res)
	if err != nil {
		return nil, err
	}
	if lp, ok := c["LinuxParameters"].(map[string]any); ok {
		return lp, nil
	}
	return nil, fmt.Errorf("the worker task definition has no LinuxParameters")
}

// TestTemplateAddsACapabilityFargateRefuses: a copy of the template whose
// worker adds a capability other than SYS_PTRACE does not deploy: ECS
// refuses the task definition, as it refuses it on Fargate.
func TestTemplateAddsACapabilityFargateRefuses(t *testing.T) {
	t.Parallel()
	for _, add := range []string{"SYS_ADMIN", "FOWNER"} {
		t.Run(add, func(t *testing.T) {
			tpl := mutatedTemplate(t, func(res map[string]any) error {
				lp, err := workerLinux(res)
				if err != nil {
					return err
				}
				caps, _ := lp["Capabilities"].(map[string]any)
				if caps == nil {
					caps = map[string]any{}
					lp["Capabilities"] = caps
				}
				caps["Add"] = []any{add}
				return nil
			})
			_, err := tryStart(t, tpl)
			if err == nil {
				t.Fatalf("a worker that adds %s deployed", add)
			}
			for _, w := range []string{"ClientException", "only support adding the SYS_PTRACE", add} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not name %q: %v", w, err)
				}
			}
		})
	}
	t.Run("SYS_PTRACE", func(t *testing.T) {
		tpl := mutatedTemplate(t, func(res map[string]any) error {
			lp, err := workerLinux(res)
			if err != nil {
				return err
			}
			lp["Capabilities"].(map[string]any)["Add"] = []any{"SYS_PTRACE"}
			return nil
		})
		if _, err := tryStart(t, tpl); err != nil {
			t.Fatalf("Fargate takes SYS_PTRACE, the stack refused it: %v", err)
		}
	})
}

// logContainers logs the tail of each worker container's output: where a
// harness that refused to start says why.
func logContainers(t testing.TB, s *awslocal.Stack) {
	for _, task := range s.ECS().Tasks() {
		b, err := s.ECS().ContainerLog(task.ID)
		if err != nil {
			continue
		}
		if len(b) > 8<<10 {
			b = b[len(b)-8<<10:]
		}
		t.Logf("task %s (exit %v, %s) container output (tail):\n%s", task.ID, exitCode(task.ExitCode), task.StoppedReason, b)
	}
}

func exitCode(c *int) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprint(*c)
}

// hostBeyond is a host of the internet for the test (local/testnet), with
// a listener on 443 that answers "beyond": reached from this machine's
// network (checked), so that a worker container's failure to reach it is
// its network's doing.
func hostBeyond(t *testing.T) *testnet.Host {
	t.Helper()
	h, err := testnet.New()
	if err != nil {
		t.Fatalf("a host beyond: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	ln, err := h.Listen(443)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "beyond\n")
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(h.Addr.String(), "443"), 10*time.Second)
	if err != nil {
		t.Fatalf("the host beyond does not answer this machine: %v", err)
	}
	c.Close()
	return h
}

func TestParseWorkerImages(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"localhost/galley-worker:abc", map[string]string{"": "localhost/galley-worker:abc"}},
		{"claude=localhost/galley-worker-claude:abc,codex=localhost/galley-worker-codex:abc",
			map[string]string{"claude": "localhost/galley-worker-claude:abc", "codex": "localhost/galley-worker-codex:abc"}},
	} {
		got, err := awslocal.ParseWorkerImages(tc.in)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("ParseWorkerImages(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"a,b", "claude=", "=ref", "claude=a,claude=b", "claude=a,b"} {
		if got, err := awslocal.ParseWorkerImages(bad); err == nil {
			t.Errorf("ParseWorkerImages(%q) = %v, want an error", bad, got)
		}
	}
}
