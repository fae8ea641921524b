package ecsrt_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/service"
)

// Each agent family has a task definition of its own (its image holds its
// CLI alone): a launch runs its agent's, and an agent without one (the
// scripted agent, which every image's harness carries) the default. A cold
// reader finds the tasks of every family.
func TestStartRunsTheAgentsTaskDefinition(t *testing.T) {
	e := newEnv(t)
	e.srv.SetListLag(0)
	if _, err := e.srv.RegisterTaskDefinition(ecsstandin.TaskDefinition{
		Family: "galley-worker-claude", NetworkMode: "awsvpc", RequiresCompatibilities: []string{"FARGATE"},
		CPU: "1024", Memory: "2048",
		ContainerDefinitions: []ecsstandin.ContainerDefinition{{Name: "worker", Image: workerImage,
			Environment: []ecsstandin.KeyValue{{Name: "GALLEY_WORKSPACE", Value: "/workspace"}, {Name: "GALLEY_HOUSE", Value: "test-house"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	e.cfg.TaskDefinitions = map[string]string{"claude": "galley-worker-claude"}
	r := e.runtime(t)
	agents := map[string]string{"w-claude-0": "claude", "w-claude-1": "claude", "w-script-0": "script", "w-script-1": "script"}
	for h, agent := range agents {
		s := spec(h, "run")
		s.Agent = agent
		if err := r.Start(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop(context.Background(), h) })
	}
	for h, agent := range agents {
		awaitLiveness(t, r, h, service.LivenessLive)
		tasks := e.tasksOf(h)
		if len(tasks) != 1 {
			t.Fatalf("%s: %d tasks, want 1", h, len(tasks))
		}
		want := ":task-definition/galley-worker:1"
		if agent == "claude" {
			want = ":task-definition/galley-worker-claude:1"
		}
		if !strings.HasSuffix(tasks[0].TaskDefinitionArn, want) {
			t.Errorf("%s (agent %s) runs %s, want the task definition ending %s", h, agent, tasks[0].TaskDefinitionArn, want)
		}
	}

	// A runtime that remembers none lists every family's tasks.
	cold := e.runtime(t)
	lists := len(e.srv.Requests(ecsstandin.OpListTasks))
	handles := append(slices.Sorted(maps.Keys(agents)), "w-never")
	got, err := cold.Livenesses(context.Background(), handles)
	if err != nil {
		t.Fatal(err)
	}
	for h := range agents {
		if got[h] != service.LivenessLive {
			t.Errorf("%s = %d, want live", h, got[h])
		}
	}
	families := map[string]int{}
	for _, req := range e.srv.Requests(ecsstandin.OpListTasks)[lists:] {
		var in struct{ Family string }
		_ = json.Unmarshal(req.Body, &in)
		families[in.Family]++
	}
	if families["galley-worker"] != 2 || families["galley-worker-claude"] != 2 || len(families) != 2 {
		t.Errorf("ListTasks calls by family: %v, want running and stopped of galley-worker and galley-worker-claude", families)
	}
}
