package lambdaapp_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/lambdaapp"
)

func baseEnv() map[string]string {
	return map[string]string{
		"GALLEY_TABLE": "galley-h", "GALLEY_HOUSE": "h", "GALLEY_BACKEND": "galley", "GALLEY_QUEUE_PREFIX": "galley-h-",
		"GALLEY_TOKEN_SECRET_ARN":  "arn:aws:secretsmanager:us-east-1:1:secret:t",
		"GALLEY_WORKER_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:1:secret:w",
		"GALLEY_CLUSTER":           "arn:aws:ecs:us-east-1:1:cluster/c", "GALLEY_TASK_DEFINITION": "arn:td",
		"GALLEY_SUBNETS": "subnet-a, subnet-b", "GALLEY_WORKER_ENDPOINT": "https://api.example",
		"GALLEY_REPOSITORY": "https://github.com/o/r.git",
	}
}

func TestConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fn      lambdaapp.Function
		mod     func(map[string]string)
		wantErr string // a substring; "" for success
		check   func(*testing.T, lambdaapp.Config)
	}{
		{name: "effects, defaults", fn: lambdaapp.Effects, check: func(t *testing.T, c lambdaapp.Config) {
			if c.AwaitCap != 25*time.Second || c.TokenCache != 5*time.Minute || c.Credential != "galley-token" ||
				c.WorkspaceRoot != "/workspace" || c.DefaultAgent != "script" || c.WorkerContainer != "worker" ||
				len(c.Subnets) != 2 || c.Subnets[1] != "subnet-b" {
				t.Errorf("%+v", c)
			}
		}},
		{name: "missing table names it", fn: lambdaapp.Reads, mod: func(m map[string]string) { delete(m, "GALLEY_TABLE") },
			wantErr: "GALLEY_TABLE"},
		{name: "kitchn's functions need the token", fn: lambdaapp.Mailbox,
			mod: func(m map[string]string) { delete(m, "GALLEY_TOKEN_SECRET_ARN") }, wantErr: "GALLEY_TOKEN_SECRET_ARN"},
		{name: "a token file stands in", fn: lambdaapp.Mailbox, mod: func(m map[string]string) {
			delete(m, "GALLEY_TOKEN_SECRET_ARN")
			m["GALLEY_TOKEN_FILE"] = "/tmp/token"
		}},
		{name: "worker API needs no token", fn: lambdaapp.WorkerAPI,
			mod: func(m map[string]string) { delete(m, "GALLEY_TOKEN_SECRET_ARN") }},
		{name: "worker API needs the worker secret", fn: lambdaapp.WorkerAPI,
			mod: func(m map[string]string) { delete(m, "GALLEY_WORKER_SECRET_ARN") }, wantErr: "GALLEY_WORKER_SECRET_ARN"},
		{name: "the operator function needs the operator token", fn: lambdaapp.Operator,
			wantErr: "GALLEY_OPERATOR_TOKEN_SECRET_ARN"},
		{name: "the operator token's secret, and no other", fn: lambdaapp.Operator, mod: func(m map[string]string) {
			delete(m, "GALLEY_TOKEN_SECRET_ARN")
			delete(m, "GALLEY_WORKER_SECRET_ARN")
			m["GALLEY_OPERATOR_TOKEN_SECRET_ARN"] = "arn:aws:secretsmanager:us-east-1:1:secret:o"
		}, check: func(t *testing.T, c lambdaapp.Config) {
			if c.OperatorTokenSecretArn != "arn:aws:secretsmanager:us-east-1:1:secret:o" {
				t.Errorf("%+v", c)
			}
		}},
		{name: "reads needs no worker secret", fn: lambdaapp.Reads,
			mod: func(m map[string]string) { delete(m, "GALLEY_WORKER_SECRET_ARN") }},
		{name: "effects needs ECS", fn: lambdaapp.Effects,
			mod:     func(m map[string]string) { delete(m, "GALLEY_CLUSTER"); delete(m, "GALLEY_SUBNETS") },
			wantErr: "GALLEY_CLUSTER, GALLEY_SUBNETS"},
		{name: "mailbox needs no ECS", fn: lambdaapp.Mailbox,
			mod: func(m map[string]string) { delete(m, "GALLEY_CLUSTER"); delete(m, "GALLEY_REPOSITORY") }},
		{name: "await cap", fn: lambdaapp.Mailbox, mod: func(m map[string]string) { m["GALLEY_AWAIT_CAP_MS"] = "1500" },
			check: func(t *testing.T, c lambdaapp.Config) {
				if c.AwaitCap != 1500*time.Millisecond {
					t.Errorf("await cap %v", c.AwaitCap)
				}
			}},
		{name: "bad await cap", fn: lambdaapp.Mailbox, mod: func(m map[string]string) { m["GALLEY_AWAIT_CAP_MS"] = "soon" },
			wantErr: "GALLEY_AWAIT_CAP_MS"},
		{name: "families give the default agent", fn: lambdaapp.Effects,
			mod: func(m map[string]string) { m["GALLEY_AGENT_FAMILIES"] = "codex,claude" },
			check: func(t *testing.T, c lambdaapp.Config) {
				if c.DefaultAgent != "codex" || len(c.Families) != 2 {
					t.Errorf("%+v", c)
				}
			}},
		{name: "each family's own task definition", fn: lambdaapp.Effects, mod: func(m map[string]string) {
			m["GALLEY_AGENT_FAMILIES"] = "claude,codex"
			m["GALLEY_TASK_DEFINITION_CLAUDE"] = "arn:td-claude"
			m["GALLEY_TASK_DEFINITION_CODEX"] = "arn:td-codex"
			m["GALLEY_TASK_DEFINITION_SCRIPT"] = "arn:td-not-a-family"
		}, check: func(t *testing.T, c lambdaapp.Config) {
			want := map[string]string{"claude": "arn:td-claude", "codex": "arn:td-codex"}
			if c.TaskDefinition != "arn:td" || !maps.Equal(c.TaskDefinitions, want) {
				t.Errorf("task definitions %q and %v, want arn:td and %v", c.TaskDefinition, c.TaskDefinitions, want)
			}
		}},
		{name: "unknown family", fn: lambdaapp.Effects, mod: func(m map[string]string) { m["GALLEY_AGENT_FAMILIES"] = "gpt" },
			wantErr: "unknown agent family"},
		{name: "token cache", fn: lambdaapp.Reads, mod: func(m map[string]string) { m["GALLEY_TOKEN_CACHE_SECONDS"] = "60" },
			check: func(t *testing.T, c lambdaapp.Config) {
				if c.TokenCache != time.Minute {
					t.Errorf("token cache %v", c.TokenCache)
				}
			}},
		{name: "public IP", fn: lambdaapp.Effects, mod: func(m map[string]string) { m["GALLEY_ASSIGN_PUBLIC_IP"] = "ENABLED" },
			check: func(t *testing.T, c lambdaapp.Config) {
				if !c.AssignPublicIP {
					t.Error("public IP not assigned")
				}
			}},
		{name: "queue idle age, default", fn: lambdaapp.Reconciler, check: func(t *testing.T, c lambdaapp.Config) {
			if c.QueueIdle != 24*time.Hour {
				t.Errorf("queue idle %v", c.QueueIdle)
			}
		}},
		{name: "queue idle age", fn: lambdaapp.Reconciler, mod: func(m map[string]string) { m["GALLEY_QUEUE_IDLE_HOURS"] = "48" },
			check: func(t *testing.T, c lambdaapp.Config) {
				if c.QueueIdle != 48*time.Hour {
					t.Errorf("queue idle %v", c.QueueIdle)
				}
			}},
		// Under twice the doorbell's hourly touch a sweep could take a
		// queue in use.
		{name: "queue idle age too short", fn: lambdaapp.Reconciler, mod: func(m map[string]string) { m["GALLEY_QUEUE_IDLE_HOURS"] = "1" },
			wantErr: "GALLEY_QUEUE_IDLE_HOURS"},
		{name: "queue idle age too long", fn: lambdaapp.Reconciler, mod: func(m map[string]string) { m["GALLEY_QUEUE_IDLE_HOURS"] = "9000" },
			wantErr: "GALLEY_QUEUE_IDLE_HOURS"},
		{name: "queue idle age not a number", fn: lambdaapp.Reconciler, mod: func(m map[string]string) { m["GALLEY_QUEUE_IDLE_HOURS"] = "1.5" },
			wantErr: "GALLEY_QUEUE_IDLE_HOURS"},
		// The worktrees live on the worker task's own storage, at
		// GALLEY_WORKSPACE.
		{name: "workspace root", fn: lambdaapp.Effects, mod: func(m map[string]string) {
			m["GALLEY_WORKSPACE"] = "/scratch"
		}, check: func(t *testing.T, c lambdaapp.Config) {
			if c.WorkspaceRoot != "/scratch" {
				t.Errorf("workspace root %q, want /scratch", c.WorkspaceRoot)
			}
		}},
		{name: "unknown function", fn: "cron", wantErr: "unknown function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := baseEnv()
			if tc.mod != nil {
				tc.mod(env)
			}
			c, err := lambdaapp.ConfigFromEnv(tc.fn, func(k string) string { return env[k] })
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err %v, want one naming %q", err, tc.wantErr)
			}
			if err == nil && tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}
