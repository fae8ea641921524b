package stack_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// TestCatchAllAuthenticatesFirst: every /v1/ request none of kitchn's routes
// takes reaches the reads function through the catch-all ANY /v1/{proxy+}
// (API Gateway would otherwise answer 404 itself, before any token is
// checked): through the reads function's one integration, with no gateway
// authorizer and an invoke permission of its own, and the reads role reads
// the bearer token it authenticates with. The catch-all shadows no route:
// every other route is a full path, which API Gateway prefers to a greedy
// one, and the only other greedy route (the workers') is outside /v1/.
// The workers' routes are as they were.
func TestCatchAllAuthenticatesFirst(t *testing.T) {
	s := deployment(t)
	check(t, "catch-all route", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), map[string]any{
			"RouteKey":          stack.CatchAllRouteKey,
			"AuthorizationType": "NONE",
			"Target":            assertions.Match_AnyValue(),
		})
	})
	target := map[string]any{}
	for _, r := range s.resources("AWS::ApiGatewayV2::Route") {
		target[props(r)["RouteKey"].(string)] = props(r)["Target"]
	}
	if target[stack.CatchAllRouteKey] == nil || !jsonEq(target[stack.CatchAllRouteKey], target["GET /v1/descriptor"]) {
		t.Errorf("catch-all targets %v, the descriptor %v: want the reads function's one integration",
			target[stack.CatchAllRouteKey], target["GET /v1/descriptor"])
	}
	if i := slices.IndexFunc(stack.Routes, func(r stack.Route) bool { return r.Key() == stack.CatchAllRouteKey }); i < 0 ||
		stack.Routes[i].Function != contract.FnReads {
		t.Errorf("stack.Routes has no catch-all served by %s", contract.FnReads)
	}

	// API Gateway may invoke the reads function for any method under /v1/.
	reads := s.id(s.g.Functions[contract.FnReads])
	check(t, "catch-all invoke permission", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), map[string]any{
			"Action":       "lambda:InvokeFunction",
			"FunctionName": getArn(reads),
			"Principal":    "apigateway.amazonaws.com",
			"SourceArn": assertions.Match_ObjectLike(&map[string]any{
				"Fn::Join": assertions.Match_ArrayWith(&[]any{
					assertions.Match_ArrayWith(&[]any{assertions.Match_StringLikeRegexp(jsii.String(`/\*/\*/v1/\{proxy\+\}$`))}),
				}),
			}),
		})
	})

	// The reads role reads kitchn's token: the catch-all is authenticated
	// like the function's own routes.
	if !allows(s.statements(s.id(s.g.Roles[contract.FnReads])), "secretsmanager:GetSecretValue", ref(s.id(s.g.TokenSecret))) {
		t.Error("the reads role cannot read the bearer token it authenticates the catch-all with")
	}

	// No route is shadowed: the catch-all is the only greedy /v1/ route,
	// and every other /v1/ route is a full path with its own method.
	var workers []string
	for _, r := range stack.Routes {
		switch {
		case r.Key() == stack.CatchAllRouteKey:
		case strings.HasPrefix(r.Path, "/v1/"):
			if strings.Contains(r.Path, "{") || r.Method == "ANY" {
				t.Errorf("kitchn's route %s is not a full path with its own method: the catch-all could take its requests", r.Key())
			}
		case strings.HasPrefix(r.Path, "/worker/v1/"):
			workers = append(workers, r.Key()+" "+r.Function)
		case r.Path == "/operator" || strings.HasPrefix(r.Path, "/operator/"):
			// The operator's routes: outside /v1/, so the catch-all never
			// takes them, and served by the operator function alone.
			if r.Function != contract.FnOperator {
				t.Errorf("operator route %s is served by %s", r.Key(), r.Function)
			}
		default:
			t.Errorf("route %s is neither kitchn's nor the workers'", r.Key())
		}
	}
	slices.Sort(workers)
	want := []string{stack.CredentialRouteKey + " " + contract.FnWorkerAPI, stack.WorkerRouteKey + " " + contract.FnWorkerAPI}
	if !slices.Equal(workers, want) {
		t.Errorf("worker routes %v, want %v", workers, want)
	}
}
