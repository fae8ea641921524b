//go:build unix

package teardown_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/teardown"
)

var fakeHarness string

func TestMain(m *testing.M) {
	// The stand-in runs this very binary as each task's init.
	ecsstandin.Entrypoint()
	tmp, err := os.MkdirTemp("", "teardown-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeHarness = filepath.Join(tmp, "fakeharness")
	if out, err := exec.Command("go", "build", "-o", fakeHarness, "../../local/ecsstandin/testdata/fakeharness").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the fake harness: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

const workerImage = "000000000000.dkr.ecr.us-east-1.amazonaws.com/galley-worker:test"

// TestStopWorkersWaitsForStopped: against the ECS stand-in at the wire,
// with the real SDK, StopWorkers stops every running task of the cluster,
// a stubborn one included (which only the stop timeout's SIGKILL ends),
// and returns only once each is STOPPED; another cluster's task runs on.
func TestStopWorkersWaitsForStopped(t *testing.T) {
	srv, err := ecsstandin.New(ecsstandin.WithDir(t.TempDir()), ecsstandin.WithGrace(3*time.Second),
		ecsstandin.WithImage(workerImage, ecsstandin.Image{Entrypoint: []string{fakeHarness},
			Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}}))
	if err != nil {
		t.Fatal(err)
	}
	// A destroy stops tasks started long before it; ListTasks' lag right
	// after RunTask (on by default in the stand-in) is not what this tests.
	srv.SetListLag(0)
	for _, c := range []string{"galley-house", "other"} {
		if _, err := srv.CreateCluster(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.RegisterTaskDefinition(ecsstandin.TaskDefinition{
		Family: "galley-worker", NetworkMode: "awsvpc", RequiresCompatibilities: []string{"FARGATE"},
		CPU: "1024", Memory: "2048",
		ContainerDefinitions: []ecsstandin.ContainerDefinition{{Name: "worker", Image: workerImage,
			Environment: []ecsstandin.KeyValue{{Name: "GALLEY_WORKSPACE", Value: "/workspace"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	client := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(hs.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDSTANDIN", "standin-dummy", ""), HTTPClient: hs.Client()})
	ctx := context.Background()
	run := func(cluster, name, mode string) string {
		out, err := client.RunTask(ctx, &ecs.RunTaskInput{
			Cluster: aws.String(cluster), TaskDefinition: aws.String("galley-worker:1"), LaunchType: types.LaunchTypeFargate,
			ClientToken: aws.String(cluster + name), StartedBy: aws.String(name),
			NetworkConfiguration: &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
				Subnets: []string{"subnet-1"}, AssignPublicIp: types.AssignPublicIpDisabled}},
			Overrides: &types.TaskOverride{ContainerOverrides: []types.ContainerOverride{{Name: aws.String("worker"),
				Environment: []types.KeyValuePair{
					{Name: aws.String("GALLEY_BRANCH"), Value: aws.String("galley/test/" + mode)},
					{Name: aws.String("GALLEY_WORKSPACE"), Value: aws.String("/workspace/" + cluster + name)},
				}}}},
		})
		if err != nil || len(out.Tasks) != 1 {
			t.Fatalf("RunTask: %v", err)
		}
		return *out.Tasks[0].TaskArn
	}
	mine := []string{run("galley-house", "a", "run"), run("galley-house", "b", "run"), run("galley-house", "c", "stubborn")}
	theirs := run("other", "d", "run")
	// Every task running first, so that stopping one takes its time.
	deadline := time.Now().Add(time.Minute)
	for _, arn := range append(mine, theirs) {
		for status(srv, arn) != "RUNNING" {
			if time.Now().After(deadline) {
				t.Fatalf("task %s is %s, never RUNNING", arn, status(srv, arn))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// The stubborn one is already stopping (a cancelled worker): ECS no
	// longer lists it as running, but it holds its network interface until
	// its grace ends and SIGKILL stops it.
	if _, err := client.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String("galley-house"), Task: aws.String(mine[2])}); err != nil {
		t.Fatal(err)
	}
	n, err := teardown.StopWorkers(ctx, client, "galley-house", teardown.Options{Poll: 50 * time.Millisecond, Wait: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("stopped %d tasks, want the 2 still running", n)
	}
	// Each is STOPPED when it returns: the stubborn one only after its
	// grace, so returning before that would mean StopWorkers did not wait.
	for _, arn := range mine {
		if s := status(srv, arn); s != "STOPPED" {
			t.Errorf("task %s is %s when StopWorkers returned, want STOPPED", arn, s)
		}
	}
	if s := status(srv, theirs); s != "RUNNING" {
		t.Errorf("the other cluster's task is %s, want RUNNING", s)
	}
	// Nothing left: a second teardown stops nothing and returns at once.
	if n, err := teardown.StopWorkers(ctx, client, "galley-house", teardown.Options{}); err != nil || n != 0 {
		t.Errorf("second StopWorkers = %d, %v; want 0, nil", n, err)
	}
	if _, err := teardown.StopWorkers(ctx, client, "", teardown.Options{}); err == nil {
		t.Error("StopWorkers with no cluster: no error")
	}
}

func status(srv *ecsstandin.Server, arn string) string {
	for _, ti := range srv.Tasks() {
		if ti.ARN == arn {
			return ti.LastStatus
		}
	}
	return "missing"
}
