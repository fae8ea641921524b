package awslocal_test

import (
	"fmt"
	"testing"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
)

// Issue 20: a fresh account, whose Fargate vCPU quota is zero, through the
// whole stack. Every launch answers definitely (not-applied, rate-limited,
// with a retry hint), and no refused launch counts against maxWorkers
// afterwards: launches beyond the template's maxWorkers still meet the
// quota, never the cap, and the inventory lists no worker.
func TestFreshAccountVCPUQuotaZeroAWSLocal(t *testing.T) {
	t.Parallel()
	s, token := startStack(t, func(c *awslocal.Config) { c.ECS = append(c.ECS, ecsstandin.WithVCPUQuota(0)) })
	env := s.FunctionEnv(lambdaapp.Effects)
	var maxWorkers int
	if _, err := fmt.Sscan(env[contract.EnvMaxWorkers], &maxWorkers); err != nil || maxWorkers < 1 {
		t.Fatalf("the template's maxWorkers %q: %v", env[contract.EnvMaxWorkers], err)
	}
	for i := range maxWorkers + 2 {
		launch := fmt.Sprintf(`{"run":"run-fresh","request":{"house":%q,"backend":"galley","credential":"galley-token",`+
			`"task":"t-1","attempt":1,"key":"k-fresh-%d","effect":{"executor":"worker","effect":`+
			`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"b"}}}}`,
			env[contract.EnvHouse], i)
		var out struct {
			Status            string
			Reason            string
			RetryAfterSeconds int
		}
		kitchnCall(t, s, token, contract.RouteEffects, launch, &out)
		if out.Status != "not-applied" || out.Reason != "rate-limited" || out.RetryAfterSeconds < 60 {
			t.Fatalf("launch %d: %+v, want not-applied rate-limited with the quota's long retry hint", i, out)
		}
	}
	if n := len(s.ECS().Tasks()); n != 0 {
		t.Errorf("%d tasks on a zero quota", n)
	}
	quota := 0
	for _, r := range s.ECS().Requests(ecsstandin.OpRunTask) {
		if r.Status == 200 {
			quota++
		}
	}
	if quota < maxWorkers+2 {
		t.Errorf("%d RunTask calls met the quota, want every launch's (%d): the cap refused some", quota, maxWorkers+2)
	}
	var inv protocol.Inventory
	kitchnCall(t, s, token, contract.RouteInventory, "", &inv)
	for _, r := range inv.Resources {
		if r.Resource.Kind == protocol.KindWorker {
			t.Errorf("the inventory lists worker %s (%s)", r.Resource.Handle, r.Liveness)
		}
	}
}
