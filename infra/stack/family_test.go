package stack_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"

	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// TestWorkerTaskPerFamily: each agent family has an image asset of its own
// (worker/Dockerfile's target for it, zstd layers) and a task definition of
// its own running it, which the functions learn by the family's variable;
// the default (the scripted agent's) is the first family's, and effects
// may run every one. The worker containers park after the default 10
// minutes.
func TestWorkerTaskPerFamily(t *testing.T) {
	s := deployment(t)
	families := s.g.Config.AgentFamilies
	if len(s.g.TaskDefinitions) != len(families) || len(families) != 2 {
		t.Fatalf("%d task definitions for families %v", len(s.g.TaskDefinitions), families)
	}
	effects := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[contract.FnEffects])])
	env := effects["Environment"].(map[string]any)["Variables"].(map[string]any)
	images := map[string]bool{}
	for _, family := range families {
		id := s.id(s.g.TaskDefinitions[family])
		td := props(s.resources("AWS::ECS::TaskDefinition")[id])
		if td["Family"] != s.g.Config.WorkerTaskFamily(family) {
			t.Errorf("%s: task definition family %v, want %s", family, td["Family"], s.g.Config.WorkerTaskFamily(family))
		}
		c, cenv, _ := s.containerOf(t, id)
		raw, _ := json.Marshal(c["Image"])
		images[string(raw)] = true
		if cenv[contract.EnvParkAfter] != "10m0s" {
			t.Errorf("%s: %s = %v, want 10m0s", family, contract.EnvParkAfter, cenv[contract.EnvParkAfter])
		}
		if got := env[contract.EnvTaskDefinitionFor(family)]; !jsonEq(got, ref(id)) {
			t.Errorf("effects' %s = %v, want a Ref to %s", contract.EnvTaskDefinitionFor(family), got, id)
		}
	}
	if len(images) != len(families) {
		t.Errorf("the families' task definitions run %d distinct images, want %d", len(images), len(families))
	}
	if got := env[contract.EnvTaskDefinition]; !jsonEq(got, ref(s.id(s.g.TaskDefinitions[families[0]]))) {
		t.Errorf("effects' %s = %v, want the first family's (%s)", contract.EnvTaskDefinition, got, families[0])
	}
	sts := s.statements(s.id(s.g.Roles[contract.FnEffects]))
	for _, family := range families {
		if !allows(sts, "ecs:RunTask", ref(s.id(s.g.TaskDefinitions[family]))) {
			t.Errorf("effects cannot run the %s task definition", family)
		}
	}

	// The cloud assembly's asset manifest: what cdk deploy builds.
	out := *awscdk.Stage_Of(s.g.Stack).Outdir()
	manifests, _ := filepath.Glob(filepath.Join(out, "*.assets.json"))
	var targets []string
	for _, m := range manifests {
		raw, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		var am struct {
			DockerImages map[string]struct {
				Source struct {
					DockerFile        string   `json:"dockerFile"`
					DockerBuildTarget string   `json:"dockerBuildTarget"`
					DockerOutputs     []string `json:"dockerOutputs"`
					Platform          string   `json:"platform"`
				} `json:"source"`
			} `json:"dockerImages"`
		}
		if err := json.Unmarshal(raw, &am); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		for _, img := range am.DockerImages {
			src := img.Source
			targets = append(targets, src.DockerBuildTarget)
			if src.DockerFile != "worker/Dockerfile" || src.Platform != "linux/arm64" ||
				!slices.Equal(src.DockerOutputs, []string{stack.WorkerImageOutput}) {
				t.Errorf("image asset %+v, want worker/Dockerfile for linux/arm64 with outputs [%s]", src, stack.WorkerImageOutput)
			}
		}
	}
	slices.Sort(targets)
	if strings.Join(targets, ",") != "worker-claude,worker-codex" {
		t.Errorf("image assets of targets %v (manifests %v), want worker-claude and worker-codex", targets, manifests)
	}
}

// TestOneFamilyParkingOff: a deployment of one family has one worker task
// definition, which is also the default; parkAfter 0 sets no park after.
func TestOneFamilyParkingOff(t *testing.T) {
	s, err := synth(map[string]any{
		"house": "kitchen_2", "repository": "https://git.example.com/house.git",
		"agentFamilies": "codex", "parkAfter": "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.g.TaskDefinitions) != 1 || s.g.TaskDefinition != s.g.TaskDefinitions["codex"] {
		t.Fatalf("task definitions %v, default %v: want codex's alone", s.g.TaskDefinitions, s.g.TaskDefinition)
	}
	_, env, _ := s.containerOf(t, s.id(s.g.TaskDefinition))
	if v, ok := env[contract.EnvParkAfter]; ok {
		t.Errorf("%s = %v with parkAfter 0, want it unset", contract.EnvParkAfter, v)
	}
}
