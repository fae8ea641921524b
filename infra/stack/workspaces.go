package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsefs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
)

// addWorkspaces makes the EFS file system of the house's git object cache
// (docs/git.md, "The object cache"): one bare mirror of the house
// repository that every worker task clones through, so a launch fetches
// only what the house got since the last one. Worktrees live on each
// task's own storage (addWorkers; docs/snapshots.md); the cache stays on
// EFS because its work there is a few large files read and written
// whole (packs), where EFS's per-operation latency costs little
// (docs/BENCHMARKS.md), and a cache per task would start empty. Mount
// targets sit in the workers' subnets behind a security group that
// admits NFS from the workers' security group only. Every mount goes
// through one access point rooted at /git-cache, created root's with
// mode 0700: only the harness, root in its container, enters it; an
// agent, under a uid of its own, cannot even look in (the clone it gets
// holds its own copy of the objects). The task role may mount, write and
// be root only through that access point. The file system keeps its
// logical id and is retained on teardown: a stack deployed before
// worktrees moved to the tasks' storage holds them there, below
// /workspaces (docs/deploy.md, "Upgrading").
func (g *Galley) addWorkspaces() {
	g.WorkspacesSG = awsec2.NewSecurityGroup(g.Stack, jsii.String("WorkspacesSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              g.Vpc,
		Description:      jsii.String("galley workspaces file system: NFS from the worker tasks only"),
		AllowAllOutbound: jsii.Bool(false),
	})
	// The file system's policy grants nothing: only identity policies do
	// (the task role's, below), so a client without IAM gets nothing, not
	// even a read-only mount. It bounds what they may grant: nothing
	// without TLS, and root only through an access point. The grant of
	// root to the task role through *this* access point cannot live here:
	// the access point's ARN exists only once the file system does, and a
	// policy naming it would make the two resources depend on each other.
	// EFS enforces only aws:SecureTransport, aws:SourceIp and its own keys
	// on a client's access, so no statement may rest on another key.
	policy := awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{
		Statements: &[]awsiam.PolicyStatement{
			awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Sid:        jsii.String("DenyWithoutTLS"),
				Effect:     awsiam.Effect_DENY,
				Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
				Actions:    jsii.Strings("elasticfilesystem:*"),
				Conditions: &map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
			}),
			awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Sid:        jsii.String("DenyRootOutsideAccessPoints"),
				Effect:     awsiam.Effect_DENY,
				Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
				Actions:    jsii.Strings("elasticfilesystem:ClientRootAccess"),
				Conditions: &map[string]any{"Null": map[string]any{"elasticfilesystem:AccessPointArn": "true"}},
			}),
		},
	})
	g.Workspaces = awsefs.NewFileSystem(g.Stack, jsii.String("Workspaces"), &awsefs.FileSystemProps{
		Vpc:           g.Vpc,
		VpcSubnets:    g.WorkerSubnets,
		SecurityGroup: g.WorkspacesSG,
		Encrypted:     jsii.Bool(true),
		// Worktrees idle for two weeks move to Infrequent Access (about a
		// twentieth of the price), and come back on their first read.
		LifecyclePolicy:             awsefs.LifecyclePolicy_AFTER_14_DAYS,
		OutOfInfrequentAccessPolicy: awsefs.OutOfInfrequentAccessPolicy_AFTER_1_ACCESS,
		PerformanceMode:             awsefs.PerformanceMode_GENERAL_PURPOSE,
		// Pay per byte moved: git's bursts need no provisioned throughput.
		ThroughputMode:   awsefs.ThroughputMode_ELASTIC,
		FileSystemPolicy: policy,
		// CDK's switch only decides whether CDK appends its own statement
		// (allow write and root to anyone through a mount target), which
		// would grant root beside the access point. Anonymous clients stay
		// shut out: the policy above allows nothing to anyone.
		AllowAnonymousAccess: jsii.Bool(true),
		RemovalPolicy:        awscdk.RemovalPolicy_RETAIN,
	})
	// The workers' security group allows NFS out to this one as well.
	g.Workspaces.Connections().AllowDefaultPortFrom(g.WorkerSG, jsii.String("NFS from galley worker tasks"))
	// No POSIX user: the harness is root (uid 0), the one user the
	// cache is for. Its root is root's, mode 0700: the cache's own check
	// (pkg/workspace, ownFolder) wants it owned by the harness's user and
	// writable by no one else.
	g.GitCacheAccessPoint = g.Workspaces.AddAccessPoint(jsii.String("GitCacheAccessPoint"), &awsefs.AccessPointOptions{
		Path:      jsii.String(GitCacheRoot),
		CreateAcl: &awsefs.Acl{OwnerUid: jsii.String("0"), OwnerGid: jsii.String("0"), Permissions: jsii.String(GitCacheRootMode)},
	})
	// Root through the access point: the cache is root's, which a
	// squashed root could not write.
	g.TaskRole.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid: jsii.String("MountGitCacheThroughAccessPoint"),
		Actions: jsii.Strings("elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite",
			"elasticfilesystem:ClientRootAccess"),
		Resources: &[]*string{g.Workspaces.FileSystemArn()},
		Conditions: &map[string]any{"StringEquals": map[string]any{
			"elasticfilesystem:AccessPointArn": g.GitCacheAccessPoint.AccessPointArn(),
		}},
	}))
}

// GitCacheRoot is the access point's root on the file system, and
// GitCacheRootMode its mode when EFS creates it (owned by 0:0): the
// harness's alone.
const (
	GitCacheRoot     = "/git-cache"
	GitCacheRootMode = "0700"
)
