package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/jsii-runtime-go"
)

// SnapshotExpiryDays is how long a worktree's snapshot is kept after its
// last save: a worktree no worker has used for that long loses what it
// held beyond its pushed commits, which stay on its branch.
const SnapshotExpiryDays = 30

// Actions the worker task role has on its house's snapshots: get, put
// (multipart included), delete, abort a failed multipart upload
// (snapshot.S3Store aborts it), and list, only below the house's prefix,
// so that a missing snapshot is S3's 404 and not a 403 the harness could
// not tell from a refusal.
var (
	SnapshotObjectActions = []string{"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"}
	SnapshotListAction    = "s3:ListBucket"
)

// addSnapshots makes the bucket the harness keeps each worktree's
// snapshot in (docs/snapshots.md) when the worktree lives on the task's
// own storage: private, TLS only, every object put with server-side
// encryption (the policy refuses a put without it), no versions (a
// snapshot replaces the last whole, and an older one is of no use),
// snapshots expired SnapshotExpiryDays after their last save and
// unfinished multipart uploads aborted after a day. The worker task role
// may read, write and delete below the house's prefix only (snapshot.Key's
// first segment is the house, which Validate keeps to letters, digits, -
// and _, so it is its own escape), through the S3 gateway endpoint, whose
// policy allows the same. Retained on teardown: it holds work not yet
// pushed.
func (g *Galley) addSnapshots() {
	g.Snapshots = awss3.NewBucket(g.Stack, jsii.String("Snapshots"), &awss3.BucketProps{
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		Versioned:         jsii.Bool(false),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id:                                  jsii.String("ExpireOldSnapshots"),
			Expiration:                          awscdk.Duration_Days(jsii.Number(SnapshotExpiryDays)),
			AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
		}},
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
	objects := g.Snapshots.ArnForObjects(jsii.String("*"))
	// snapshot.S3Store puts every object, and starts every multipart
	// upload, with x-amz-server-side-encryption: AES256.
	for _, st := range []*awsiam.PolicyStatementProps{{
		Sid:        jsii.String("DenyPutsWithoutEncryption"),
		Conditions: &map[string]any{"Null": map[string]any{"s3:x-amz-server-side-encryption": "true"}},
	}, {
		Sid:        jsii.String("DenyPutsWithOtherEncryption"),
		Conditions: &map[string]any{"StringNotEqualsIfExists": map[string]any{"s3:x-amz-server-side-encryption": "AES256"}},
	}} {
		st.Effect = awsiam.Effect_DENY
		st.Principals = &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()}
		st.Actions = jsii.Strings("s3:PutObject")
		st.Resources = &[]*string{objects}
		g.Snapshots.AddToResourcePolicy(awsiam.NewPolicyStatement(st))
	}
	for _, st := range g.snapshotStatements(nil) {
		g.TaskRole.AddToPolicy(st)
	}

	suppress(g.Snapshots, "AwsSolutions-S1",
		"Server access logs would need a second bucket for a bucket only the worker task role reaches, through "+
			"the VPC's S3 gateway endpoint; the VPC flow logs record the workers' traffic to S3.")
	suppress(g.TaskRole, "AwsSolutions-IAM5",
		"Snapshots are named by worktree at run time (snapshot.Key: house/worktree/name); the pattern confines "+
			"the task role to this house's prefix of the snapshot bucket.",
		regex(g.nagSnapshots()))
}

// nagSnapshots is the house's prefix of the snapshot bucket as cdk-nag
// reports a wildcard resource (IAM5).
func (g *Galley) nagSnapshots() string {
	return `/^Resource::<Snapshots[A-Za-z0-9]+\.Arn>\/` + g.Config.House + `\/\*$/g`
}

// snapshotStatements allow the object actions below the house's prefix
// and listing it: for the task role's own policy (principals nil), and for
// the S3 gateway endpoint's, naming the task role.
func (g *Galley) snapshotStatements(principals []awsiam.IPrincipal) []awsiam.PolicyStatement {
	objects := &awsiam.PolicyStatementProps{
		Sid:       jsii.String("KeepTheHousesSnapshots"),
		Actions:   jsii.Strings(SnapshotObjectActions...),
		Resources: &[]*string{g.Snapshots.ArnForObjects(jsii.String(g.Config.House + "/*"))},
	}
	list := &awsiam.PolicyStatementProps{
		Sid:        jsii.String("ListTheHousesSnapshots"),
		Actions:    jsii.Strings(SnapshotListAction),
		Resources:  &[]*string{g.Snapshots.BucketArn()},
		Conditions: &map[string]any{"StringLike": map[string]any{"s3:prefix": g.Config.House + "/*"}},
	}
	var out []awsiam.PolicyStatement
	for _, p := range []*awsiam.PolicyStatementProps{objects, list} {
		if principals != nil {
			p.Principals = &principals
		}
		out = append(out, awsiam.NewPolicyStatement(p))
	}
	return out
}
