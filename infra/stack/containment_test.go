package stack_test

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// dockerDefaults are the capabilities a container holds unless dropped
// (moby, oci/caps/defaults.go), written out here so that a change to the
// stack's own list does not pass unnoticed.
var dockerDefaults = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// harnessCapabilities are what the harness needs to run the agent under a
// uid of its own (harness.UIDCapabilities; pkg/harness's
// TestUIDConfinementWithTheContainersCapabilities reads workertask.go's
// WorkerCapabilities, checks they are the harness's and runs the uid
// confinement with exactly those; docs/security.md).
var harnessCapabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}

// TestWorkerKeepsOnlyTheHarnessCapabilities: the worker container drops
// every one of Docker's defaults but CHOWN, DAC_OVERRIDE, FOWNER, KILL,
// SETUID and SETGID, by name, and adds none (Fargate could add only
// SYS_PTRACE).
func TestWorkerKeepsOnlyTheHarnessCapabilities(t *testing.T) {
	s := deployment(t)
	var wantDrop []any
	for _, c := range dockerDefaults {
		if !slices.Contains(harnessCapabilities, c) {
			wantDrop = append(wantDrop, c)
		}
	}
	if len(wantDrop) != len(dockerDefaults)-len(harnessCapabilities) {
		t.Fatalf("the harness's capabilities are not all Docker defaults: %v", harnessCapabilities)
	}
	check(t, "capabilities", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ECS::TaskDefinition"), map[string]any{
			"ContainerDefinitions": []any{assertions.Match_ObjectLike(&map[string]any{
				"Name": contract.WorkerContainer,
				"LinuxParameters": assertions.Match_ObjectEquals(&map[string]any{
					"InitProcessEnabled": true,
					"Capabilities":       assertions.Match_ObjectEquals(&map[string]any{"Drop": wantDrop}),
				}),
			})},
		})
	})

	// The exported lists say the same.
	var kept, dropped []string
	for _, c := range stack.WorkerCapabilities {
		kept = append(kept, string(c))
	}
	for _, c := range stack.WorkerDroppedCapabilities() {
		dropped = append(dropped, string(c))
	}
	sort.Strings(kept)
	if !slices.Equal(kept, harnessCapabilities) {
		t.Errorf("WorkerCapabilities %v, want %v", kept, harnessCapabilities)
	}
	all := append(slices.Clone(kept), dropped...)
	sort.Strings(all)
	if !slices.Equal(all, dockerDefaults) {
		t.Errorf("kept %v and dropped %v, want together exactly Docker's defaults %v", kept, dropped, dockerDefaults)
	}
}

// TestRouteThrottles: kitchn's routes keep the stage's default throttle
// (50/100 each), the unauthenticated credential exchange has its own tight
// one, the workers' greedy route its own, the /v1/ catch-all (which
// kitchn never calls) a tight one and the operator console's login the
// tightest (1/5), so that none of them spends kitchn's
// budget. The stage is made after the routes it names, which API
// Gateway requires.
func TestRouteThrottles(t *testing.T) {
	s := deployment(t)
	stages := s.resources("AWS::ApiGatewayV2::Stage")
	if len(stages) != 1 {
		t.Fatalf("%d stages, want 1", len(stages))
	}
	var stage map[string]any
	for _, st := range stages {
		stage = st
	}
	p := props(stage)
	wantDefault := map[string]any{"ThrottlingRateLimit": 50.0, "ThrottlingBurstLimit": 100.0}
	if !jsonEq(p["DefaultRouteSettings"], wantDefault) {
		t.Errorf("default route settings %v, want %v", p["DefaultRouteSettings"], wantDefault)
	}
	wantRoutes := map[string]any{
		stack.CredentialRouteKey:       map[string]any{"ThrottlingRateLimit": 5.0, "ThrottlingBurstLimit": 10.0},
		stack.WorkerRouteKey:           map[string]any{"ThrottlingRateLimit": 50.0, "ThrottlingBurstLimit": 100.0},
		stack.CatchAllRouteKey:         map[string]any{"ThrottlingRateLimit": 5.0, "ThrottlingBurstLimit": 10.0},
		stack.OperatorRouteKey:         map[string]any{"ThrottlingRateLimit": 10.0, "ThrottlingBurstLimit": 20.0},
		stack.OperatorRedirectRouteKey: map[string]any{"ThrottlingRateLimit": 10.0, "ThrottlingBurstLimit": 20.0},
		stack.OperatorLoginRouteKey:    map[string]any{"ThrottlingRateLimit": 1.0, "ThrottlingBurstLimit": 5.0},
	}
	if !jsonEq(p["RouteSettings"], wantRoutes) {
		t.Errorf("route settings %v, want %v", p["RouteSettings"], wantRoutes)
	}
	check(t, "stage", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), map[string]any{
			"RouteSettings": assertions.Match_ObjectEquals(&wantRoutes),
		})
	})
	// Every route a setting names is one of the API's, and kitchn's are
	// not among them.
	routeIDs := map[string]string{}
	for id, r := range s.resources("AWS::ApiGatewayV2::Route") {
		routeIDs[props(r)["RouteKey"].(string)] = id
	}
	deps := map[string]bool{}
	for _, d := range list(stage["DependsOn"]) {
		deps[d.(string)] = true
	}
	for key := range wantRoutes {
		id, ok := routeIDs[key]
		if !ok {
			t.Errorf("route settings name %q, which the API has not", key)
			continue
		}
		if !deps[id] {
			t.Errorf("the stage does not depend on route %s (%s): API Gateway refuses settings for a route not yet made", key, id)
		}
	}
	for _, r := range stack.Routes {
		if strings.HasPrefix(r.Path, "/v1/") && r.Key() != stack.CatchAllRouteKey && wantRoutes[r.Key()] != nil {
			t.Errorf("kitchn's route %s has a throttle of its own", r.Key())
		}
	}
}

// TestCredentialRouteOfItsOwn: the bootstrap-code exchange has an exact
// route, which API Gateway prefers to the greedy one, served by the same
// function through the same integration.
func TestCredentialRouteOfItsOwn(t *testing.T) {
	s := deployment(t)
	target := map[string]any{}
	for _, r := range s.resources("AWS::ApiGatewayV2::Route") {
		target[props(r)["RouteKey"].(string)] = props(r)["Target"]
	}
	cred, greedy := target[stack.CredentialRouteKey], target[stack.WorkerRouteKey]
	if cred == nil || greedy == nil {
		t.Fatalf("routes %v, want both %s and %s", target, stack.CredentialRouteKey, stack.WorkerRouteKey)
	}
	if !jsonEq(cred, greedy) {
		t.Errorf("credential route targets %v, the worker route %v: want one integration", cred, greedy)
	}
	var keys []string
	for _, r := range stack.Routes {
		keys = append(keys, r.Key())
	}
	if !slices.Contains(keys, stack.CredentialRouteKey) || !slices.Contains(keys, stack.WorkerRouteKey) {
		t.Errorf("stack.Routes %v, want both worker routes", keys)
	}
}

// TestOperatorLoginRouteOfItsOwn: the console's login has an exact route,
// which API Gateway prefers to the operator's greedy route, served by the
// operator function through the same integration, so the operator routes
// behave as before; only its throttle is its own.
func TestOperatorLoginRouteOfItsOwn(t *testing.T) {
	s := deployment(t)
	target := map[string]any{}
	for _, r := range s.resources("AWS::ApiGatewayV2::Route") {
		target[props(r)["RouteKey"].(string)] = props(r)["Target"]
	}
	login, greedy := target[stack.OperatorLoginRouteKey], target[stack.OperatorRouteKey]
	if login == nil || greedy == nil {
		t.Fatalf("routes %v, want both %s and %s", target, stack.OperatorLoginRouteKey, stack.OperatorRouteKey)
	}
	if !jsonEq(login, greedy) || !jsonEq(login, target[stack.OperatorRedirectRouteKey]) {
		t.Errorf("login route targets %v, the operator routes %v and %v: want the operator function's one integration",
			login, greedy, target[stack.OperatorRedirectRouteKey])
	}
	i := slices.IndexFunc(stack.Routes, func(r stack.Route) bool { return r.Key() == stack.OperatorLoginRouteKey })
	if i < 0 || stack.Routes[i].Function != contract.FnOperator {
		t.Fatalf("stack.Routes has no %s served by %s", stack.OperatorLoginRouteKey, contract.FnOperator)
	}
	// Its bucket is the tightest of all: a guesser gets fewer tries than
	// any other caller.
	for key, th := range s.g.Config.RouteThrottles() {
		if key != stack.OperatorLoginRouteKey && (th.Rate < stack.OperatorLoginThrottle.Rate || th.Burst < stack.OperatorLoginThrottle.Burst) {
			t.Errorf("route %s throttle %+v is tighter than the login's %+v", key, th, stack.OperatorLoginThrottle)
		}
	}
}
