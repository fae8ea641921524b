//go:build unix

package lambdaapp_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/memstore"
)

const standinImage = "000000000000.dkr.ecr.us-east-1.amazonaws.com/galley-worker:test"

// ecsApps starts an ECS stand-in whose ListTasks lags for an hour and
// returns n effects functions wired from their environment (FromEnv's
// New), each its own ECS runtime, on one store.
func ecsApps(t *testing.T, n int) (*ecsstandin.Server, []*lambdaapp.App) {
	t.Helper()
	srv, err := ecsstandin.New(ecsstandin.WithDir(t.TempDir()), ecsstandin.WithGrace(time.Second),
		ecsstandin.WithImage(standinImage, ecsstandin.Image{Entrypoint: []string{"/bin/sleep"}, Cmd: []string{"600"}}))
	if err != nil {
		t.Fatal(err)
	}
	srv.SetListLag(time.Hour)
	if _, err := srv.CreateCluster("galley"); err != nil {
		t.Fatal(err)
	}
	td, err := srv.RegisterTaskDefinition(ecsstandin.TaskDefinition{
		Family: "galley-worker", NetworkMode: "awsvpc", RequiresCompatibilities: []string{"FARGATE"},
		CPU: "1024", Memory: "2048",
		ContainerDefinitions: []ecsstandin.ContainerDefinition{{Name: "worker", Image: standinImage}},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	secret := filepath.Join(t.TempDir(), "worker-secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := baseEnv()
	delete(env, "GALLEY_WORKER_SECRET_ARN")
	env["GALLEY_WORKER_SECRET_FILE"] = secret
	env["GALLEY_CLUSTER"], env["GALLEY_TASK_DEFINITION"] = "galley", td
	cfg, err := lambdaapp.ConfigFromEnv(lambdaapp.Effects, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	awsCfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(hs.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDSTANDIN", "standin-dummy", "")}
	st, bell, git := memstore.New(), localbell.New(), servicetest.New(t, nil).Git
	var apps []*lambdaapp.App
	for range n {
		app, err := lambdaapp.New(context.Background(), cfg, lambdaapp.Deps{
			AWS: &awsCfg, Store: st, Doorbell: bell, GitHost: git, Auth: api.StaticToken(goodToken),
			Secrets: noSecrets{t},
		})
		if err != nil {
			t.Fatal(err)
		}
		apps = append(apps, app)
	}
	return srv, apps
}

func effect(key, body string) protocol.EffectCall {
	return protocol.EffectCall{Run: "run-1", Request: protocol.EffectRequest{
		House: "h", Backend: "galley", Credential: "galley-token", Task: "task-1", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: "worker", Effect: json.RawMessage(body)},
	}}
}

// Issue 20, item 8: a cancel served by another function right after the
// launch, while ListTasks does not show the task yet, finds the task by
// the worker's record and stops it, instead of answering cancelled and
// leaving the task to boot.
func TestCancelElsewhereFindsTheTaskListTasksHides(t *testing.T) {
	srv, apps := ecsApps(t, 2)
	ctx := context.Background()
	raw, err := apps[0].Service.Apply(ctx, effect("k-launch",
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"b"}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var r protocol.Receipt
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Created) == 0 || r.Created[0].Kind != "worker" {
		t.Fatalf("launch receipt %s: %v", raw, err)
	}
	worker := r.Created[0].Handle
	tasks := srv.Tasks()
	if len(tasks) != 1 {
		t.Fatalf("%d tasks, want 1", len(tasks))
	}
	rec, _, err := apps[0].Store.GetResource(ctx, protocol.KindWorker, worker)
	if err != nil || rec.Worker.TaskARN != tasks[0].ARN {
		t.Fatalf("the worker record names task %q (%v), want %s", rec.Worker.TaskARN, err, tasks[0].ARN)
	}
	ref, _ := json.Marshal(r.Created[0])
	if _, err := apps[1].Service.Apply(ctx, effect("k-cancel", `{"type":"cancel-worker","worker":`+string(ref)+`}`), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := srv.Tasks()[0]; got.DesiredStatus != "STOPPED" || got.StopCode != "UserInitiated" {
		t.Fatalf("after the cancel elsewhere the task is %s/%s (%s), want stopped", got.LastStatus, got.DesiredStatus, got.StopCode)
	}
	var stops int
	for _, q := range srv.Requests(ecsstandin.OpStopTask) {
		if q.Status == 200 {
			stops++
		}
	}
	if stops != 1 {
		t.Errorf("%d StopTask calls answered, want 1", stops)
	}
}
