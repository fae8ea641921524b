package stack_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// TestSnapshotsBucket: the bucket of the worktree snapshots is private,
// TLS only, refuses a put without SSE-S3, keeps no versions, expires old
// snapshots and aborts unfinished uploads, is retained; the worker task
// gets its name; the task role alone may get, put and delete below the
// house's prefix (and list it), through the S3 gateway endpoint, which
// allows the same to that role alone.
func TestSnapshotsBucket(t *testing.T) {
	s := deployment(t)
	check(t, "one bucket", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::S3::Bucket"), jsii.Number(1)) })
	id := s.id(s.g.Snapshots)
	b := s.resources("AWS::S3::Bucket")[id]
	p := props(b)
	if b["DeletionPolicy"] != "Retain" || b["UpdateReplacePolicy"] != "Retain" {
		t.Errorf("deletion %v, replace %v, want Retain", b["DeletionPolicy"], b["UpdateReplacePolicy"])
	}
	wantBlock := map[string]any{"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true}
	if !jsonEq(p["PublicAccessBlockConfiguration"], wantBlock) {
		t.Errorf("public access block %v, want all four", p["PublicAccessBlockConfiguration"])
	}
	if v, ok := p["VersioningConfiguration"]; ok && !jsonEq(v, map[string]any{"Status": "Suspended"}) {
		t.Errorf("versioning %v, want none", v)
	}
	var expires, aborts bool
	for _, r := range list(p["LifecycleConfiguration"].(map[string]any)["Rules"]) {
		r := r.(map[string]any)
		if r["Status"] != "Enabled" {
			continue
		}
		expires = expires || jsonEq(r["ExpirationInDays"], stack.SnapshotExpiryDays)
		abort, _ := r["AbortIncompleteMultipartUpload"].(map[string]any)
		aborts = aborts || jsonEq(abort["DaysAfterInitiation"], 1)
	}
	if !expires || !aborts {
		t.Errorf("lifecycle %v, want snapshots expired after %d days and unfinished uploads aborted after 1", p["LifecycleConfiguration"], stack.SnapshotExpiryDays)
	}

	// The bucket's policy: TLS only, and no put without SSE-S3.
	var policy map[string]any
	for _, bp := range s.resources("AWS::S3::BucketPolicy") {
		if jsonEq(props(bp)["Bucket"], ref(id)) {
			policy = props(bp)["PolicyDocument"].(map[string]any)
		}
	}
	if policy == nil {
		t.Fatal("the bucket has no policy")
	}
	var tls, noSSE, otherSSE bool
	for _, st := range list(policy["Statement"]) {
		st := st.(map[string]any)
		if st["Effect"] != "Deny" {
			t.Errorf("the bucket's policy allows: %v", st)
			continue
		}
		c, _ := st["Condition"].(map[string]any)
		switch {
		case jsonEq(c, map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}}) && st["Action"] == "s3:*":
			tls = true
		case jsonEq(c, map[string]any{"Null": map[string]any{"s3:x-amz-server-side-encryption": "true"}}) && st["Action"] == "s3:PutObject":
			noSSE = true
		case jsonEq(c, map[string]any{"StringNotEqualsIfExists": map[string]any{"s3:x-amz-server-side-encryption": "AES256"}}) && st["Action"] == "s3:PutObject":
			otherSSE = true
		}
	}
	if !tls || !noSSE || !otherSSE {
		t.Errorf("bucket policy %v: TLS only %v, no put without SSE %v, no other SSE %v; want all", policy, tls, noSSE, otherSSE)
	}

	// The task's environment names the bucket.
	_, env, _ := s.containerOf(t, s.id(s.g.TaskDefinition))
	if !jsonEq(env[contract.EnvSnapshotBucket], ref(id)) {
		t.Errorf("%s = %v, want the bucket's name", contract.EnvSnapshotBucket, env[contract.EnvSnapshotBucket])
	}
	// So do the functions that delete there (a release the worktree's
	// snapshot, a settle of a parked worker its session archive:
	// effects, operator, reconciler), and no other function's.
	deleters := []string{contract.FnEffects, contract.FnOperator, contract.FnReconciler}
	for _, fn := range contract.FunctionNames {
		fenv := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[fn])])["Environment"].(map[string]any)["Variables"].(map[string]any)
		v, ok := fenv[contract.EnvSnapshotBucket]
		if want := slices.Contains(deleters, fn); ok != want || (want && !jsonEq(v, ref(id))) {
			t.Errorf("%s: %s = %v (set %v), want the bucket's name on %v alone", fn, contract.EnvSnapshotBucket, v, ok, deleters)
		}
	}

	// Only the worker task role reaches the bucket, and only its house's
	// prefix; and the functions that delete there, only that.
	arn := getArn(id)
	houseObjects := map[string]any{"Fn::Join": []any{"", []any{arn, "/" + s.g.Config.House + "/*"}}}
	wantList := map[string]any{"StringLike": map[string]any{"s3:prefix": s.g.Config.House + "/*"}}
	for roleID, role := range s.resources("AWS::IAM::Role") {
		if len(list(props(role)["ManagedPolicyArns"])) > 0 {
			continue // CDK's custom resource providers: logs only (TestSecretsReadOnlyByTheirUsers)
		}
		var objects, listing bool
		for _, st := range s.statements(roleID) {
			onBucket := slices.ContainsFunc(st.Resources, func(r any) bool {
				return strings.Contains(mustJSON(r), `"`+id+`"`)
			})
			if !onBucket {
				continue
			}
			if slices.ContainsFunc(deleters, func(fn string) bool { return roleID == s.id(s.g.Roles[fn]) }) &&
				jsonEq(st.Actions, []string{"s3:DeleteObject"}) &&
				jsonEq(st.Resources, []any{houseObjects}) && st.Conditions == nil {
				continue
			}
			if roleID != s.id(s.g.TaskRole) {
				t.Errorf("role %s has %v on the snapshots", roleID, st.Actions)
				continue
			}
			switch {
			case jsonEq(st.Actions, slices.Sorted(slices.Values(stack.SnapshotObjectActions))) && jsonEq(st.Resources, []any{houseObjects}) && st.Conditions == nil:
				objects = true
			case jsonEq(st.Actions, []string{stack.SnapshotListAction}) && jsonEq(st.Resources, []any{arn}) && jsonEq(st.Conditions, wantList):
				listing = true
			default:
				t.Errorf("task role: %+v on the snapshots", st)
			}
		}
		if roleID == s.id(s.g.TaskRole) && (!objects || !listing) {
			t.Errorf("task role: objects %v list %v, want both, below %s/ only", objects, listing, s.g.Config.House)
		}
	}
	ep := s.resources("AWS::EC2::VPCEndpoint")[s.id(s.g.S3Endpoint)]
	got := endpointPolicy(t, ep)
	taskRole := map[string]any{"AWS": getArn(s.id(s.g.TaskRole))}
	if st := got["KeepTheHousesSnapshots"]; st == nil || !jsonEq(st["Principal"], taskRole) || !jsonEq(st["Resource"], houseObjects) {
		t.Errorf("S3 endpoint: %v, want the task role's object actions below the house's prefix", st)
	}
	if st := got["ListTheHousesSnapshots"]; st == nil || !jsonEq(st["Principal"], taskRole) || !jsonEq(st["Condition"], wantList) {
		t.Errorf("S3 endpoint: %v, want the task role's listing of the house's prefix", st)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
