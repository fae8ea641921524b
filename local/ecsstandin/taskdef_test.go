//go:build unix

package ecsstandin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/local/smstandin"
)

const (
	execRole = "arn:aws:iam::000000000000:role/galley-worker-execution"
	taskRole = "arn:aws:iam::000000000000:role/galley-worker-task"
)

func apiCode(err error) (string, string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode(), ae.ErrorMessage()
	}
	return "", ""
}

func sdkDef(mut func(*types.ContainerDefinition, *ecs.RegisterTaskDefinitionInput)) *ecs.RegisterTaskDefinitionInput {
	c := types.ContainerDefinition{Name: aws.String("worker"), Image: aws.String(testImage), Essential: aws.Bool(true)}
	in := &ecs.RegisterTaskDefinitionInput{
		Family: aws.String("galley-api"), NetworkMode: types.NetworkModeAwsvpc,
		RequiresCompatibilities: []types.Compatibility{types.CompatibilityFargate},
		Cpu:                     aws.String("512"), Memory: aws.String("1024"),
	}
	if mut != nil {
		mut(&c, in)
	}
	in.ContainerDefinitions = []types.ContainerDefinition{c}
	return in
}

func TestRegisterTaskDefinitionAndClusters(t *testing.T) {
	h := newHarness(t)
	client, ctx := h.client(), context.Background()
	var arns []string
	for range 2 {
		out, err := client.RegisterTaskDefinition(ctx, sdkDef(func(c *types.ContainerDefinition, _ *ecs.RegisterTaskDefinitionInput) {
			c.Environment = []types.KeyValuePair{{Name: aws.String("A"), Value: aws.String("1")}}
		}))
		if err != nil {
			t.Fatal(err)
		}
		arns = append(arns, aws.ToString(out.TaskDefinition.TaskDefinitionArn))
	}
	want := []string{"arn:aws:ecs:us-east-1:000000000000:task-definition/galley-api:1",
		"arn:aws:ecs:us-east-1:000000000000:task-definition/galley-api:2"}
	if !slices.Equal(arns, want) {
		t.Errorf("registered %v, want %v", arns, want)
	}
	for ref, rev := range map[string]int32{"galley-api": 2, "galley-api:1": 1, want[0]: 1} {
		out, err := client.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(ref)})
		if err != nil {
			t.Fatalf("DescribeTaskDefinition(%s): %v", ref, err)
		}
		td := out.TaskDefinition
		if td.Revision != rev || aws.ToString(td.Cpu) != "512" || td.NetworkMode != types.NetworkModeAwsvpc ||
			len(td.ContainerDefinitions) != 1 || aws.ToString(td.ContainerDefinitions[0].Environment[0].Value) != "1" ||
			td.Status != types.TaskDefinitionStatusActive {
			t.Errorf("DescribeTaskDefinition(%s) = %+v", ref, td)
		}
	}
	for _, ref := range []string{"galley-api:3", "nothing", "arn:aws:ecs:us-east-1:000000000000:task-definition/galley-api"} {
		_, err := client.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(ref)})
		if code, msg := apiCode(err); code != "ClientException" || msg != "Unable to describe task definition." {
			t.Errorf("DescribeTaskDefinition(%s) = %v", ref, err)
		}
	}

	refused := map[string]*ecs.RegisterTaskDefinitionInput{
		"secrets without an execution role": sdkDef(func(c *types.ContainerDefinition, _ *ecs.RegisterTaskDefinitionInput) {
			c.Secrets = []types.Secret{{Name: aws.String("S"), ValueFrom: aws.String("arn:aws:secretsmanager:us-east-1:000000000000:secret:s-AbCdEf")}}
		}),
		"an SSM parameter": sdkDef(func(c *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) {
			in.ExecutionRoleArn = aws.String(execRole)
			c.Secrets = []types.Secret{{Name: aws.String("S"), ValueFrom: aws.String("arn:aws:ssm:us-east-1:000000000000:parameter/p")}}
		}),
		"no Fargate size": sdkDef(func(_ *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) {
			in.Cpu, in.Memory = aws.String("256"), aws.String("4096")
		}),
		"no task size on Fargate": sdkDef(func(_ *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) { in.Cpu = nil }),
		"Fargate in bridge mode": sdkDef(func(_ *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) {
			in.NetworkMode = types.NetworkModeBridge
		}),
		"no image": sdkDef(func(c *types.ContainerDefinition, _ *ecs.RegisterTaskDefinitionInput) { c.Image = nil }),
		"no essential container": sdkDef(func(c *types.ContainerDefinition, _ *ecs.RegisterTaskDefinitionInput) {
			c.Essential = aws.Bool(false)
		}),
		"a mount of no volume": sdkDef(func(c *types.ContainerDefinition, _ *ecs.RegisterTaskDefinitionInput) {
			c.MountPoints = []types.MountPoint{{SourceVolume: aws.String("efs"), ContainerPath: aws.String("/mnt")}}
		}),
		"a bad family": sdkDef(func(_ *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) { in.Family = aws.String("a b") }),
		"20 GiB of ephemeral storage": sdkDef(func(_ *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) {
			in.EphemeralStorage = &types.EphemeralStorage{SizeInGiB: 20}
		}),
		"201 GiB of ephemeral storage": sdkDef(func(_ *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) {
			in.EphemeralStorage = &types.EphemeralStorage{SizeInGiB: 201}
		}),
	}
	for name, in := range refused {
		if _, err := client.RegisterTaskDefinition(ctx, in); func() string { c, _ := apiCode(err); return c }() != "ClientException" {
			t.Errorf("%s: RegisterTaskDefinition = %v, want ClientException", name, err)
		}
	}
	// The worker's: 30 GiB of its own storage, answered as given.
	es, err := client.RegisterTaskDefinition(ctx, sdkDef(func(_ *types.ContainerDefinition, in *ecs.RegisterTaskDefinitionInput) {
		in.EphemeralStorage = &types.EphemeralStorage{SizeInGiB: 30}
	}))
	if err != nil || es.TaskDefinition.EphemeralStorage == nil || es.TaskDefinition.EphemeralStorage.SizeInGiB != 30 {
		t.Errorf("30 GiB of ephemeral storage: %+v, %v", es, err)
	}
	_, err = client.RegisterTaskDefinition(ctx, refused["secrets without an execution role"])
	if _, msg := apiCode(err); msg != "When you are specifying container secrets, you must also specify a value for 'executionRoleArn'." {
		t.Errorf("secrets without an execution role: %q", msg)
	}

	// Clusters: created once, found by name or ARN.
	for range 2 {
		out, err := client.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("made")})
		if err != nil || aws.ToString(out.Cluster.ClusterArn) != "arn:aws:ecs:us-east-1:000000000000:cluster/made" {
			t.Fatalf("CreateCluster = %+v, %v", out, err)
		}
	}
	dc, err := client.DescribeClusters(ctx, &ecs.DescribeClustersInput{
		Clusters: []string{"made", "arn:aws:ecs:us-east-1:000000000000:cluster/galley", "ghost"}})
	if err != nil || len(dc.Clusters) != 2 || len(dc.Failures) != 1 || aws.ToString(dc.Failures[0].Reason) != "MISSING" ||
		aws.ToString(dc.Clusters[1].ClusterName) != "galley" {
		t.Errorf("DescribeClusters = %+v, %v", dc, err)
	}
}

func runInput(td, cluster string) *ecs.RunTaskInput {
	return &ecs.RunTaskInput{
		Cluster: aws.String(cluster), TaskDefinition: aws.String(td), LaunchType: types.LaunchTypeFargate,
		StartedBy: aws.String("galley-w-td"),
		NetworkConfiguration: &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
			Subnets: []string{"subnet-1"}}},
		Overrides: &types.TaskOverride{ContainerOverrides: []types.ContainerOverride{{Name: aws.String("worker"),
			Environment: []types.KeyValuePair{{Name: aws.String("GALLEY_BRANCH"), Value: aws.String("galley/test/exit")}}}}},
	}
}

func TestRunTaskNeedsRegisteredDefinitionAndCluster(t *testing.T) {
	h := newHarness(t)
	client, ctx := h.client(), context.Background()
	tests := []struct {
		name       string
		in         *ecs.RunTaskInput
		code, text string
	}{
		{"unregistered family", runInput("galley-other", "galley"), "ClientException", "TaskDefinition not found."},
		{"unregistered revision", runInput("galley-worker:2", "galley"), "ClientException", "TaskDefinition not found."},
		{"unknown cluster", runInput("galley-worker:1", "nowhere"), "ClusterNotFoundException", "Cluster not found."},
		{"another container", func() *ecs.RunTaskInput {
			in := runInput("galley-worker", "galley")
			in.Overrides.ContainerOverrides[0].Name = aws.String("sidecar")
			return in
		}(), "InvalidParameterException", "Override for container named sidecar is not a container in the TaskDefinition."},
	}
	for _, tc := range tests {
		_, err := client.RunTask(ctx, tc.in)
		if code, msg := apiCode(err); code != tc.code || msg != tc.text {
			t.Errorf("%s: RunTask = %v, want %s %q", tc.name, err, tc.code, tc.text)
		}
	}
	if n := len(h.srv.Tasks()); n != 0 {
		t.Errorf("%d tasks after refused requests", n)
	}
	// By ARN, and the other calls know no such cluster either.
	out, err := client.RunTask(ctx, runInput("arn:aws:ecs:us-east-1:000000000000:task-definition/galley-worker:1", "galley"))
	if err != nil || len(out.Tasks) != 1 || aws.ToString(out.Tasks[0].TaskDefinitionArn) !=
		"arn:aws:ecs:us-east-1:000000000000:task-definition/galley-worker:1" || aws.ToString(out.Tasks[0].Cpu) != "1024" {
		t.Fatalf("RunTask by ARN = %+v, %v", out, err)
	}
	if _, err := client.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("nowhere")}); func() string { c, _ := apiCode(err); return c }() != "ClusterNotFoundException" {
		t.Errorf("ListTasks of an unknown cluster = %v", err)
	}
}

func TestUnmappedImageFailsToStart(t *testing.T) {
	td := workerDef()
	td.ContainerDefinitions[0].Image = "public.ecr.aws/unknown/image:1"
	h := newHarnessDef(t, td)
	out, err := h.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
	if err != nil {
		t.Fatal(err)
	}
	ti := h.await(t, aws.ToString(out.Tasks[0].TaskArn), statusStopped)
	want := "CannotPullContainerError: pull image manifest has been retried 1 time(s): failed to resolve ref public.ecr.aws/unknown/image:1: not found"
	if ti.StopCode != "TaskFailedToStart" || ti.StoppedReason != want || ti.Launched || ti.ExitCode != nil {
		t.Errorf("task = %+v, want TaskFailedToStart %q", ti, want)
	}
}

func TestProcessArgs(t *testing.T) {
	img := Image{Entrypoint: []string{"img-ep"}, Cmd: []string{"img-cmd"}}
	tests := []struct {
		name          string
		ep, cmd, over []string
		img           Image
		want          []string
	}{
		{"image alone", nil, nil, nil, img, []string{"img-ep", "img-cmd"}},
		{"definition command", nil, []string{"def"}, nil, img, []string{"img-ep", "def"}},
		{"override wins", nil, []string{"def"}, []string{"over"}, img, []string{"img-ep", "over"}},
		{"definition entrypoint drops the image's Cmd", []string{"def-ep"}, nil, nil, img, []string{"def-ep"}},
		{"definition entrypoint and command", []string{"def-ep"}, []string{"def"}, []string{"over"}, img, []string{"def-ep", "over"}},
		{"image without entrypoint", nil, nil, nil, Image{Cmd: []string{"sh"}}, []string{"sh"}},
	}
	for _, tc := range tests {
		got := processArgs(tc.img, ContainerDefinition{EntryPoint: tc.ep, Command: tc.cmd}, tc.over)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// gatedSecrets is the Secrets Manager stand-in (local/smstandin) behind a
// tiny gate that tells the execution roles apart by access key and lets
// each read only the secrets granted to it, as IAM would.
type gatedSecrets struct {
	sm     *smstandin.Server
	url    string
	mu     sync.Mutex
	grants map[string]map[string]bool // access key: secret ARNs it may read
	inputs []map[string]string
}

func newGatedSecrets(t *testing.T) *gatedSecrets {
	sm, err := smstandin.New()
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedSecrets{sm: sm, grants: map[string]map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
		key, _, _ := strings.Cut(cred, "/")
		b, _ := io.ReadAll(r.Body)
		var in map[string]string
		_ = json.Unmarshal(b, &in)
		g.mu.Lock()
		g.inputs = append(g.inputs, in)
		allowed := g.grants[key][in["SecretId"]]
		g.mu.Unlock()
		if !allowed {
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.Header().Set("X-Amzn-Requestid", awswire.UUID())
			w.WriteHeader(400)
			_ = json.NewEncoder(w).Encode(map[string]string{"__type": "AccessDeniedException",
				"Message": fmt.Sprintf("User: %s is not authorized to perform: secretsmanager:GetSecretValue on resource: %s because no identity-based policy allows the secretsmanager:GetSecretValue action", key, in["SecretId"])})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		sm.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

// source hands a client signed as role: access key "AKID-" and the role's
// name.
func (g *gatedSecrets) source() SecretsSource {
	return func(_ context.Context, role string) (SecretsGetter, error) {
		return secretsmanager.New(secretsmanager.Options{Region: "us-east-1", BaseEndpoint: aws.String(g.url),
			RetryMaxAttempts: 1,
			Credentials:      credentials.NewStaticCredentialsProvider(roleKey(role), "fake-secret-key", "")}), nil
	}
}

func roleKey(role string) string { return "AKID-" + role[strings.LastIndex(role, "/")+1:] }

// put creates secret name and lets readers read it; it returns its ARN.
func (g *gatedSecrets) put(t *testing.T, name, value string, readers ...string) string {
	t.Helper()
	arn, err := g.sm.Create(name, value)
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range readers {
		if g.grants[roleKey(r)] == nil {
			g.grants[roleKey(r)] = map[string]bool{}
		}
		g.grants[roleKey(r)][arn] = true
	}
	return arn
}

// readRecord reads one of the fake harness's records of its only start.
func readRecord(t *testing.T, ws, prefix string) []byte {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(ws, prefix+"-*"))
	if len(matches) != 1 {
		t.Fatalf("%d %s records in %s, want 1", len(matches), prefix, ws)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The container's environment is exactly the image's, the definition's,
// the secrets, the override's and the agent's, in that order of
// precedence, and nothing of the host's.
func TestExactEnvironment(t *testing.T) {
	hostMarker, hostSecret := rand.Text(), rand.Text()
	t.Setenv("GALLEY_HOST_MARKER", hostMarker)
	t.Setenv("AWS_SECRET_ACCESS_KEY", hostSecret)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDHOST")
	t.Setenv("SOME_HOST_VARIABLE", hostMarker)

	sm := newGatedSecrets(t)
	dbPassword, apiKey := rand.Text(), rand.Text()
	apiJSON, _ := json.Marshal(map[string]string{"key": apiKey, "other": rand.Text()})
	dbArn := sm.put(t, "galley/db", dbPassword, execRole)
	apiArn := sm.put(t, "galley/api", string(apiJSON), execRole)

	img := harnessImage()
	img.Env["SHARED"] = "image"
	img.Env["IMAGE_ONLY"] = "image"
	img.Cmd = []string{"image-cmd-must-not-run"}
	td := workerDef(KeyValue{"SHARED", "definition"}, KeyValue{"DEF_ONLY", "definition"}, KeyValue{"OVERRIDDEN", "definition"})
	td.ExecutionRoleArn = execRole
	c := &td.ContainerDefinitions[0]
	c.Command = []string{"definition-command"}
	c.WorkingDirectory = "/app"
	c.Secrets = []Secret{{"DB_PASSWORD", dbArn}, {"API_KEY", apiArn + ":key::"}, {"OVERRIDDEN", dbArn}}
	h := newHarnessDef(t, td, WithImage(testImage, img), WithSecrets(sm.source()))

	in := runInput("galley-worker", "galley")
	in.Overrides.ContainerOverrides[0].Environment = append(in.Overrides.ContainerOverrides[0].Environment,
		types.KeyValuePair{Name: aws.String("OVERRIDDEN"), Value: aws.String("override")},
		types.KeyValuePair{Name: aws.String("GALLEY_WORKSPACE"), Value: aws.String("/workspace/wt-env")})
	in.Overrides.ContainerOverrides[0].Command = []string{"override-arg"}
	out, err := h.client().RunTask(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	ti := h.await(t, aws.ToString(out.Tasks[0].TaskArn), statusStopped)
	if ti.StopCode != "EssentialContainerExited" || ti.ExitCode == nil || *ti.ExitCode != 0 {
		t.Fatalf("task = %+v", ti)
	}
	var env []string
	if err := json.Unmarshal(readRecord(t, ti.Workspace, "env"), &env); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	ep := h.srv.TaskEndpoint()
	want := map[string]string{
		"PATH": img.Env["PATH"], "SHARED": "definition", "IMAGE_ONLY": "image", "DEF_ONLY": "definition",
		"GALLEY_HOUSE": "house-a", "GALLEY_BRANCH": "galley/test/exit", "GALLEY_WORKSPACE": ti.Workspace,
		"DB_PASSWORD": dbPassword, "API_KEY": apiKey, "OVERRIDDEN": "override",
		"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_EXECUTION_ENV": "AWS_ECS_FARGATE",
		"ECS_CONTAINER_METADATA_URI":    ep + "/v3/" + strings.TrimPrefix(got["ECS_CONTAINER_METADATA_URI"], ep+"/v3/"),
		"ECS_CONTAINER_METADATA_URI_V4": ep + "/v4/" + strings.TrimPrefix(got["ECS_CONTAINER_METADATA_URI"], ep+"/v3/"),
	}
	if !maps.Equal(got, want) {
		t.Errorf("the container's environment\n got %v\nwant %v", got, want)
	}
	if !strings.HasPrefix(got["ECS_CONTAINER_METADATA_URI"], ep+"/v3/") || len(got["ECS_CONTAINER_METADATA_URI"]) <= len(ep+"/v3/") {
		t.Errorf("metadata URI %q is not the task endpoint's", got["ECS_CONTAINER_METADATA_URI"])
	}
	for _, kv := range env {
		if strings.Contains(kv, hostMarker) || strings.Contains(kv, hostSecret) {
			t.Errorf("the host's environment reached the container: %s", kv[:strings.IndexByte(kv, '=')])
		}
	}
	if ti.Workspace != filepath.Join(ti.Root, "workspace", "wt-env") {
		t.Errorf("workspace %s is not rooted in the task's storage %s", ti.Workspace, ti.Root)
	}
	// The process: the image's entrypoint (found in the image's PATH) and
	// the override's command; the working folder is the definition's, in
	// the task's storage.
	var args []string
	if err := json.Unmarshal(readRecord(t, ti.Workspace, "args"), &args); err != nil || !slices.Equal(args, []string{"override-arg"}) {
		t.Errorf("the harness got arguments %q (%v)", args, err)
	}
	if !slices.Equal(ti.Args, []string{filepath.Base(fakeHarness), "override-arg"}) {
		t.Errorf("task args = %q", ti.Args)
	}
	if cwd := string(readRecord(t, ti.Workspace, "cwd")); cwd != filepath.Join(ti.Root, "app") {
		t.Errorf("working folder %s, want %s", cwd, filepath.Join(ti.Root, "app"))
	}
	// The JSON key was asked of the secret, not of a secret named by it.
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, in := range sm.inputs {
		if in["SecretId"] != dbArn && in["SecretId"] != apiArn || in["VersionStage"] != "" || in["VersionId"] != "" {
			t.Errorf("GetSecretValue(%v)", in)
		}
	}
}

// A secret the execution role may not read stops the task before its
// process starts, with Fargate's stop code and reason, in the events too.
func TestUnreadableSecretFailsTheTask(t *testing.T) {
	sm := newGatedSecrets(t)
	granted := sm.put(t, "granted", rand.Text(), execRole)
	denied := sm.put(t, "denied", rand.Text(), "arn:aws:iam::000000000000:role/someone-else")
	td := workerDef()
	td.ExecutionRoleArn = execRole
	td.ContainerDefinitions[0].Secrets = []Secret{{"GRANTED", granted}, {"DENIED", denied}}
	h := newHarnessDef(t, td, WithSecrets(sm.source()))
	out, err := h.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	ti := h.await(t, arn, statusStopped)
	prefix := "ResourceInitializationError: unable to pull secrets or registry auth: execution resource retrieval failed: " +
		"unable to retrieve secret from asm: service call has been retried 1 time(s): failed to fetch secret " + denied +
		" from secrets manager: AccessDeniedException: User: " + roleKey(execRole) + " is not authorized"
	if ti.StopCode != "TaskFailedToStart" || !strings.HasPrefix(ti.StoppedReason, prefix) || ti.Launched || ti.Env != nil {
		t.Errorf("task = %+v\nwant reason starting %q", ti, prefix)
	}
	if _, err := os.Stat(filepath.Join(ti.Workspace, "starts")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the process started: %v", err)
	}
	h.srv.Close()
	events := h.srv.Events()
	var last struct {
		Detail struct{ LastStatus, DesiredStatus, StopCode, StoppedReason string }
	}
	if err := json.Unmarshal(events[len(events)-1], &last); err != nil {
		t.Fatal(err)
	}
	if d := last.Detail; d.LastStatus != "STOPPED" || d.DesiredStatus != "STOPPED" || d.StopCode != "TaskFailedToStart" ||
		d.StoppedReason != ti.StoppedReason {
		t.Errorf("last event = %+v", d)
	}

	// Without a Secrets Manager the same definition cannot start either.
	h2 := newHarnessDef(t, td)
	out, err = h2.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
	if err != nil {
		t.Fatal(err)
	}
	if ti := h2.await(t, aws.ToString(out.Tasks[0].TaskArn), statusStopped); ti.StopCode != "TaskFailedToStart" ||
		!strings.HasPrefix(ti.StoppedReason, "ResourceInitializationError: ") || ti.Launched {
		t.Errorf("task without a Secrets Manager = %+v", ti)
	}
}

// A task with a task role gets its credentials from the task endpoint
// through the SDK's default chain, as in Fargate; the endpoint knows no
// other ID and forgets a stopped task's.
func TestTaskRoleCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDHOST") // must not reach the task
	t.Setenv("AWS_SECRET_ACCESS_KEY", rand.Text())
	issued := aws.Credentials{AccessKeyID: "ASIA" + rand.Text()[:16], SecretAccessKey: rand.Text(), SessionToken: rand.Text(),
		CanExpire: true, Expires: time.Now().Add(time.Hour).Truncate(time.Second)}
	var mu sync.Mutex
	var asked []string
	td := workerDef()
	td.TaskRoleArn = taskRole
	h := newHarnessDef(t, td, WithTaskCredentials(func(role string) (aws.Credentials, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, role)
		return issued, nil
	}))
	in := runInput("galley-worker", "galley")
	in.Overrides.ContainerOverrides[0].Environment[0].Value = aws.String("galley/test/creds")
	out, err := h.client().RunTask(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	ti := h.await(t, arn, statusStopped)
	if ti.ExitCode == nil || *ti.ExitCode != 0 {
		t.Fatalf("the harness failed to get credentials: %+v", ti)
	}
	var got map[string]string
	if err := json.Unmarshal(readRecord(t, ti.Workspace, "creds"), &got); err != nil {
		t.Fatal(err)
	}
	if got["AccessKeyID"] != issued.AccessKeyID || got["SecretAccessKey"] != issued.SecretAccessKey ||
		got["SessionToken"] != issued.SessionToken || got["Region"] != "us-east-1" {
		t.Errorf("the task's SDK resolved other credentials (source %s)", got["Source"])
	}
	mu.Lock()
	if !slices.Equal(asked, []string{taskRole}) {
		t.Errorf("credentials asked for %v, want the task role once", asked)
	}
	mu.Unlock()
	uri := ti.Env["AWS_CONTAINER_CREDENTIALS_FULL_URI"]
	if !strings.HasPrefix(uri, h.srv.TaskEndpoint()+"/v2/credentials/") {
		t.Fatalf("credentials URI %q", uri)
	}
	// The task has stopped: its ID is no longer known, as no other is.
	for _, u := range []string{uri, h.srv.TaskEndpoint() + "/v2/credentials/" + awswire.UUID()} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 400 || body["code"] != "InvalidIdInRequest" {
			t.Errorf("GET %s = %d %v", u, resp.StatusCode, body)
		}
	}
	// A task without a task role gets no credentials variable.
	h2 := newHarness(t)
	arn = h2.run(t, "tok-norole", "galley-w-norole", "exit")
	if ti := h2.await(t, arn, statusStopped); ti.Env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] != "" || ti.Env["AWS_REGION"] != "us-east-1" {
		t.Errorf("env of a task without a role = %v", ti.Env)
	}
}

// The credentials endpoint answers while the task runs, in the agent's
// format.
func TestCredentialsEndpointWhileRunning(t *testing.T) {
	issued := aws.Credentials{AccessKeyID: "ASIA" + rand.Text()[:16], SecretAccessKey: rand.Text(), SessionToken: rand.Text()}
	td := workerDef()
	td.TaskRoleArn = taskRole
	h := newHarnessDef(t, td, WithTaskCredentials(func(string) (aws.Credentials, error) { return issued, nil }))
	arn := h.run(t, "tok-run", "galley-w-run", "run")
	h.await(t, arn, statusRunning)
	uri := h.task(t, arn).Env["AWS_CONTAINER_CREDENTIALS_FULL_URI"]
	resp, err := http.Get(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	exp, err := time.Parse(time.RFC3339, body["Expiration"])
	if resp.StatusCode != 200 || body["RoleArn"] != taskRole || body["AccessKeyId"] != issued.AccessKeyID ||
		body["SecretAccessKey"] != issued.SecretAccessKey || body["Token"] != issued.SessionToken || err != nil || !exp.After(time.Now()) {
		t.Errorf("credentials answer %d with fields %v", resp.StatusCode, slices.Sorted(maps.Keys(body)))
	}
	// The metadata endpoint names the task.
	resp2, err := http.Get(h.task(t, arn).Env["ECS_CONTAINER_METADATA_URI_V4"] + "/task")
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var meta map[string]any
	if err := json.NewDecoder(resp2.Body).Decode(&meta); err != nil || meta["TaskARN"] != arn || meta["Family"] != "galley-worker" {
		t.Errorf("task metadata = %v (%v)", meta, err)
	}
}

// A GALLEY_WORKSPACE below a mounted EFS file system lies in the host
// folder that stands for it; a file system the stand-in does not know
// fails the task's start.
func TestFileSystemMount(t *testing.T) {
	fsDir := t.TempDir()
	td := workerDef()
	td.Volumes = []Volume{{Name: "workspaces", EFSVolumeConfiguration: &EFSVolume{FileSystemID: "fs-0123", TransitEncryption: "ENABLED"}}}
	td.ContainerDefinitions[0].MountPoints = []MountPoint{{SourceVolume: "workspaces", ContainerPath: "/mnt/workspaces"}}
	h := newHarnessDef(t, td, WithFileSystem("fs-0123", fsDir))
	in := runInput("galley-worker", "galley")
	in.Overrides.ContainerOverrides[0].Environment = append(in.Overrides.ContainerOverrides[0].Environment,
		types.KeyValuePair{Name: aws.String("GALLEY_WORKSPACE"), Value: aws.String("/mnt/workspaces/wt-1")})
	out, err := h.client().RunTask(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	ti := h.await(t, aws.ToString(out.Tasks[0].TaskArn), statusStopped)
	if want := filepath.Join(fsDir, "wt-1"); ti.Workspace != want || ti.ExitCode == nil || *ti.ExitCode != 0 {
		t.Fatalf("task = %+v, want workspace %s", ti, want)
	}
	if _, err := os.Stat(filepath.Join(fsDir, "wt-1", "starts")); err != nil {
		t.Errorf("the harness did not work in the file system: %v", err)
	}

	h2 := newHarnessDef(t, td)
	out, err = h2.client().RunTask(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if ti := h2.await(t, aws.ToString(out.Tasks[0].TaskArn), statusStopped); ti.StopCode != "TaskFailedToStart" ||
		!strings.HasPrefix(ti.StoppedReason, "ResourceInitializationError: failed to invoke EFS utils commands") || ti.Launched {
		t.Errorf("task mounting an unknown file system = %+v", ti)
	}
}

// TestAccessPointPosixUserIsRefused: EFS makes every file operation through
// an access point with a POSIX user as that user, which a bind mount cannot
// model; a task mounting through one fails to start naming it, rather than
// run with the permissions of whoever writes.
func TestAccessPointPosixUserIsRefused(t *testing.T) {
	fsDir := t.TempDir()
	td := workerDef()
	var efs EFSVolume
	if err := json.Unmarshal([]byte(`{"fileSystemId":"fs-0123","transitEncryption":"ENABLED","authorizationConfig":{"accessPointId":"fsap-1","iam":"ENABLED"}}`), &efs); err != nil {
		t.Fatal(err)
	}
	td.Volumes = []Volume{{Name: "workspaces", EFSVolumeConfiguration: &efs}}
	td.ContainerDefinitions[0].MountPoints = []MountPoint{{SourceVolume: "workspaces", ContainerPath: "/mnt/workspaces"}}
	for _, tc := range []struct {
		name string
		pu   *PosixUser
	}{{"no POSIX user", nil}, {"POSIX user", &PosixUser{UID: 1000, GID: 1001}}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessDef(t, td, WithFileSystem("fs-0123", fsDir), WithAccessPoint("fsap-1", AccessPoint{FileSystemID: "fs-0123",
				RootDirectory: "/ws", CreationInfo: &CreationInfo{Permissions: 0o711}, PosixUser: tc.pu}))
			out, err := h.client().RunTask(context.Background(), runInput("galley-worker", "galley"))
			if err != nil {
				t.Fatal(err)
			}
			ti := h.await(t, aws.ToString(out.Tasks[0].TaskArn), statusStopped)
			if tc.pu == nil {
				if ti.StopCode == "TaskFailedToStart" {
					t.Fatalf("a task mounting through an access point without a POSIX user failed to start: %s", ti.StoppedReason)
				}
				return
			}
			if ti.StopCode != "TaskFailedToStart" || ti.Launched || !strings.Contains(ti.StoppedReason, "fsap-1's PosixUser (1000:1001)") {
				t.Errorf("task mounting through an access point with a POSIX user = %+v", ti)
			}
		})
	}
}
