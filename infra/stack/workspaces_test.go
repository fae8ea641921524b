package stack_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// resolved is how the template writes a token (an ARN, an ID).
func (s *synthed) resolved(v *string) any {
	var out any
	b, _ := json.Marshal(s.g.Stack.Resolve(v))
	_ = json.Unmarshal(b, &out)
	return out
}

func TestGitCacheFileSystem(t *testing.T) {
	s := deployment(t)
	check(t, "one file system", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::EFS::FileSystem"), jsii.Number(1)) })
	check(t, "one access point", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::EFS::AccessPoint"), jsii.Number(1)) })
	fsID := s.id(s.g.Workspaces)
	fs := s.resources("AWS::EFS::FileSystem")[fsID]
	p := props(fs)
	if p["Encrypted"] != true {
		t.Errorf("file system encrypted = %v, want true", p["Encrypted"])
	}
	// Retained on teardown and on replacement: it holds unpushed work.
	if fs["DeletionPolicy"] != "Retain" || fs["UpdateReplacePolicy"] != "Retain" {
		t.Errorf("deletion %v, replace %v, want Retain", fs["DeletionPolicy"], fs["UpdateReplacePolicy"])
	}
	var ia bool
	for _, lp := range list(p["LifecyclePolicies"]) {
		if v, _ := lp.(map[string]any)["TransitionToIA"].(string); strings.HasPrefix(v, "AFTER_") {
			ia = true
		}
	}
	if !ia {
		t.Errorf("lifecycle %v, want a transition to Infrequent Access", p["LifecyclePolicies"])
	}
	// The file system's own policy grants mounting to nobody: only the
	// task role's identity policy does.
	for _, st := range list(p["FileSystemPolicy"].(map[string]any)["Statement"]) {
		st := st.(map[string]any)
		for _, a := range list(st["Action"]) {
			if st["Effect"] == "Allow" && actionMatches(a.(string), "elasticfilesystem:ClientMount") {
				t.Errorf("the file system policy allows mounting: %v", st)
			}
		}
	}

	// The file system's policy allows nothing to anyone (a client without
	// IAM gets nothing): it denies access without TLS, and root except
	// through an access point. Root access is no longer denied to all: the
	// harness must be root through the access point (the task role's
	// grant, TestOnlyTheTaskRoleMountsWorkspaces).
	stmts := map[string]map[string]any{}
	for _, st := range list(p["FileSystemPolicy"].(map[string]any)["Statement"]) {
		st := st.(map[string]any)
		if st["Effect"] != "Deny" {
			t.Errorf("the file system policy allows %v: only identity policies may grant", st)
			continue
		}
		sid, _ := st["Sid"].(string)
		stmts[sid] = st
	}
	wantDenies := map[string]map[string]any{
		"DenyWithoutTLS": {"Effect": "Deny", "Principal": map[string]any{"AWS": "*"}, "Action": "elasticfilesystem:*",
			"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}}, "Sid": "DenyWithoutTLS"},
		"DenyRootOutsideAccessPoints": {"Effect": "Deny", "Principal": map[string]any{"AWS": "*"}, "Action": "elasticfilesystem:ClientRootAccess",
			"Condition": map[string]any{"Null": map[string]any{"elasticfilesystem:AccessPointArn": "true"}}, "Sid": "DenyRootOutsideAccessPoints"},
	}
	if !jsonEq(stmts, wantDenies) {
		t.Errorf("the file system policy's statements %v, want exactly %v", stmts, wantDenies)
	}
	// EFS enforces no other condition key on a client's access: a
	// statement resting on one would not hold (or would shut out all).
	enforced := map[string]bool{"aws:securetransport": true, "aws:sourceip": true,
		"elasticfilesystem:accesspointarn": true, "elasticfilesystem:accessedviamounttarget": true}
	for sid, st := range stmts {
		cond, _ := st["Condition"].(map[string]any)
		for _, byKey := range cond {
			for key := range byKey.(map[string]any) {
				if !enforced[strings.ToLower(key)] {
					t.Errorf("statement %s rests on %s, which EFS does not enforce on clients", sid, key)
				}
			}
		}
	}

	// Mount targets in every worker subnet, behind the workspaces group.
	mts := s.resources("AWS::EFS::MountTarget")
	workerSubnets := map[string]bool{}
	for _, sn := range *s.g.Vpc.IsolatedSubnets() {
		workerSubnets[s.id(sn)] = true
	}
	if len(mts) != len(workerSubnets) || len(workerSubnets) != 2 {
		t.Errorf("%d mount targets, want one per worker subnet (%d)", len(mts), len(workerSubnets))
	}
	for id, mt := range mts {
		sn, _ := props(mt)["SubnetId"].(map[string]any)["Ref"].(string)
		if !workerSubnets[sn] {
			t.Errorf("mount target %s in subnet %v, not a worker subnet", id, props(mt)["SubnetId"])
		}
	}
	sgRef := map[string]any{"Fn::GetAtt": []any{s.id(s.g.WorkspacesSG), "GroupId"}}
	workerSG := map[string]any{"Fn::GetAtt": []any{s.id(s.g.WorkerSG), "GroupId"}}
	for id, mt := range mts {
		if !jsonEq(props(mt)["FileSystemId"], ref(fsID)) || !jsonEq(props(mt)["SecurityGroups"], []any{sgRef}) {
			t.Errorf("mount target %s: %v", id, props(mt))
		}
	}
	// NFS in from the worker tasks' group only.
	if in := props(s.resources("AWS::EC2::SecurityGroup")[s.id(s.g.WorkspacesSG)])["SecurityGroupIngress"]; in != nil {
		t.Errorf("the workspaces group has inline ingress %v", in)
	}
	var ingress []map[string]any
	for _, r := range s.resources("AWS::EC2::SecurityGroupIngress") {
		if jsonEq(props(r)["GroupId"], sgRef) {
			ingress = append(ingress, props(r))
		}
	}
	if len(ingress) != 1 || !jsonEq(ingress[0]["SourceSecurityGroupId"], workerSG) ||
		ingress[0]["FromPort"] != 2049.0 || ingress[0]["ToPort"] != 2049.0 || ingress[0]["IpProtocol"] != "tcp" {
		t.Errorf("ingress to the workspaces group %v, want NFS (tcp 2049) from the worker group only", ingress)
	}

	// The operator finds it after a teardown by the output.
	out, _ := s.json["Outputs"].(map[string]any)["WorkspacesFileSystemId"].(map[string]any)
	if !jsonEq(out["Value"], ref(fsID)) {
		t.Errorf("WorkspacesFileSystemId output %v, want the file system's id", out)
	}

	ap := props(s.resources("AWS::EFS::AccessPoint")[s.id(s.g.GitCacheAccessPoint)])
	if !jsonEq(ap["FileSystemId"], ref(fsID)) {
		t.Errorf("access point on %v", ap["FileSystemId"])
	}
	// No POSIX user: the harness works as root, the cache's one user.
	if u, ok := ap["PosixUser"]; ok {
		t.Errorf("access point forces user %v, want none", u)
	}
	// The root, made by EFS on first use, is root's alone: no agent looks
	// into the cache, and the harness's own check of the folder (owned
	// by it, writable by no one else) holds. Not /workspaces, where a
	// stack deployed before keeps its worktrees.
	wantRoot := map[string]any{"Path": "/git-cache", "CreationInfo": map[string]any{
		"OwnerUid": "0", "OwnerGid": "0", "Permissions": "0700"}}
	if !jsonEq(ap["RootDirectory"], wantRoot) {
		t.Errorf("access point root %v, want %v", ap["RootDirectory"], wantRoot)
	}
	check(t, "access point", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::EFS::AccessPoint"), map[string]any{
			"PosixUser":     assertions.Match_Absent(),
			"RootDirectory": assertions.Match_ObjectEquals(&wantRoot),
		})
	})
}

func TestGitCacheVolumeAndMount(t *testing.T) {
	s := deployment(t)
	td := props(s.resources("AWS::ECS::TaskDefinition")[s.id(s.g.TaskDefinition)])
	vols := list(td["Volumes"])
	if len(vols) != 1 {
		t.Fatalf("volumes %v, want the workspaces volume", vols)
	}
	vol := vols[0].(map[string]any)
	want := map[string]any{
		"FilesystemId":      ref(s.id(s.g.Workspaces)),
		"TransitEncryption": "ENABLED",
		"AuthorizationConfig": map[string]any{
			"AccessPointId": ref(s.id(s.g.GitCacheAccessPoint)),
			"IAM":           "ENABLED",
		},
	}
	if !jsonEq(vol["EFSVolumeConfiguration"], want) {
		t.Errorf("volume %v, want EFS %v", vol["EFSVolumeConfiguration"], want)
	}
	c := td["ContainerDefinitions"].([]any)[0].(map[string]any)
	wantMount := []any{map[string]any{"ContainerPath": contract.GitCacheMount, "ReadOnly": false, "SourceVolume": vol["Name"]}}
	if !jsonEq(c["MountPoints"], wantMount) {
		t.Errorf("mount points %v, want %v", c["MountPoints"], wantMount)
	}
	env := map[string]any{}
	for _, e := range c["Environment"].([]any) {
		e := e.(map[string]any)
		env[e["Name"].(string)] = e["Value"]
	}
	// The cache is the mount; the worktrees are on the task's own
	// storage, and the harness keeps their snapshots.
	if env[contract.EnvGitCache] != contract.GitCacheMount {
		t.Errorf("container %s = %v, want %s", contract.EnvGitCache, env[contract.EnvGitCache], contract.GitCacheMount)
	}
	if env[contract.EnvWorkspace] != contract.DefaultWorkspace {
		t.Errorf("container %s = %v, want %s", contract.EnvWorkspace, env[contract.EnvWorkspace], contract.DefaultWorkspace)
	}
	if td["EphemeralStorage"] == nil || !jsonEq(td["EphemeralStorage"], map[string]any{"SizeInGiB": float64(stack.DefaultWorkerEphemeralStorageGiB)}) {
		t.Errorf("ephemeral storage %v, want %d GiB", td["EphemeralStorage"], stack.DefaultWorkerEphemeralStorageGiB)
	}
}

// efsStatements returns every statement of every identity policy of the
// role (inline, attached) that names an elasticfilesystem action, and the
// managed policies it has.
func (s *synthed) efsStatements(roleID string) (sts []statement, managed []any) {
	add := func(doc map[string]any) {
		for _, st := range list(doc["Statement"]) {
			st := st.(map[string]any)
			x := statement{Effect: st["Effect"].(string), Resources: list(st["Resource"])}
			x.Conditions, _ = st["Condition"].(map[string]any)
			for _, a := range list(st["Action"]) {
				x.Actions = append(x.Actions, a.(string))
			}
			for _, a := range x.Actions {
				if actionMatches(a, "elasticfilesystem:ClientMount") || strings.HasPrefix(strings.ToLower(a), "elasticfilesystem:") {
					sts = append(sts, x)
					break
				}
			}
		}
	}
	for _, p := range s.resources("AWS::IAM::Policy") {
		for _, r := range list(props(p)["Roles"]) {
			if jsonEq(r, ref(roleID)) {
				add(props(p)["PolicyDocument"].(map[string]any))
			}
		}
	}
	role := s.resources("AWS::IAM::Role")[roleID]
	for _, p := range list(props(role)["Policies"]) {
		add(p.(map[string]any)["PolicyDocument"].(map[string]any))
	}
	return sts, list(props(role)["ManagedPolicyArns"])
}

func TestOnlyTheTaskRoleMountsTheGitCache(t *testing.T) {
	s := deployment(t)
	taskRole := s.id(s.g.TaskRole)
	sts, _ := s.efsStatements(taskRole)
	if len(sts) != 1 {
		t.Fatalf("task role: %d statements on EFS, want 1: %+v", len(sts), sts)
	}
	st := sts[0]
	// Root too (the cache is root's), and all three only through the
	// access point.
	want := []string{"elasticfilesystem:ClientMount", "elasticfilesystem:ClientRootAccess", "elasticfilesystem:ClientWrite"}
	if st.Effect != "Allow" || !jsonEq(st.Actions, want) {
		t.Errorf("task role may %s %v, want Allow %v only", st.Effect, st.Actions, want)
	}
	if !jsonEq(st.Resources, []any{s.resolved(s.g.Workspaces.FileSystemArn())}) {
		t.Errorf("task role mounts %v, want only the workspaces file system", st.Resources)
	}
	wantCond := map[string]any{"StringEquals": map[string]any{
		"elasticfilesystem:AccessPointArn": s.resolved(s.g.GitCacheAccessPoint.AccessPointArn()),
	}}
	if !jsonEq(st.Conditions, wantCond) {
		t.Errorf("task role condition %v, want only through the access point %v", st.Conditions, wantCond)
	}
	for id := range s.resources("AWS::IAM::Role") {
		if id == taskRole {
			continue
		}
		sts, managed := s.efsStatements(id)
		if len(sts) > 0 {
			t.Errorf("role %s has EFS permissions: %+v", id, sts)
		}
		for _, m := range managed {
			if raw, _ := json.Marshal(m); strings.Contains(strings.ToLower(string(raw)), "elasticfilesystem") {
				t.Errorf("role %s has managed policy %s", id, raw)
			}
		}
	}
}
