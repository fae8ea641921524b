package awslocal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/local/cfntemplate"
	"github.com/galley-run/galley/local/s3standin"
)

// The local account and region every ARN of the stack names (the ECS and
// Secrets Manager stand-ins use the same).
const (
	localRegion    = "us-east-1"
	localAccount   = "000000000000"
	localPartition = "aws"
)

// deployment "deploys" a template onto the local stand-ins the way
// CloudFormation deploys it onto AWS: resources in dependency order, each
// created through the service's own API where a stand-in runs one (tables,
// secrets, queues, clusters, task definitions), every other resource given
// the physical id and attributes AWS would give it. It implements
// cfntemplate.Deployment, so later resources' properties resolve against
// earlier ones' real names.
type deployment struct {
	t         *cfntemplate.Template
	r         *cfntemplate.Resolver
	stack     string
	apiURL    string // the local gateway's base URL: an HTTP API's ApiEndpoint
	phys      map[string]string
	attrs     map[string]map[string]any
	props     map[string]map[string]any // resolved properties, by logical id
	ddb       *dynamodb.Client
	sqs       *sqs.Client
	secrets   *secretsmanager.Client
	ecs       *ecs.Client
	createdBy map[string]string // logical id → what created it, for errors
	// salt makes generated names unique to one deployment (its data
	// folder), as CloudFormation's random suffixes do: two stacks of one
	// template on the same DynamoDB Local get tables of their own.
	salt string
	// substitute replaces literal values the template holds that name
	// something outside this machine (the house repository's URL).
	substitute map[string]string
	// origins replaces the origin (scheme and host) of URLs the template
	// holds that name a service outside AWS (Config.WorkerServices).
	origins map[string]string

	// s3 makes the template's buckets (nil: none kept, in a test of the
	// deployment alone).
	s3 *s3standin.Server
}

func newDeployment(t *cfntemplate.Template, stack, apiURL string) *deployment {
	d := &deployment{t: t, stack: stack, apiURL: apiURL, phys: map[string]string{},
		attrs: map[string]map[string]any{}, props: map[string]map[string]any{}, createdBy: map[string]string{}}
	d.r = &cfntemplate.Resolver{T: t, Deploy: d, Region: localRegion, AccountID: localAccount,
		Partition: localPartition, StackName: stack, URLSuffix: "amazonaws.com",
		StackID: fmt.Sprintf("arn:aws:cloudformation:%s:%s:stack/%s/%s", localRegion, localAccount, stack, shortHash(stack, 32))}
	return d
}

// Ref implements cfntemplate.Deployment.
func (d *deployment) Ref(id string) (string, error) {
	if v, ok := d.phys[id]; ok {
		return v, nil
	}
	return "", fmt.Errorf("%s (%s) is not deployed", id, d.t.Resources[id].Type)
}

// GetAtt implements cfntemplate.Deployment.
func (d *deployment) GetAtt(id, attr string) (any, error) {
	if v, ok := d.attrs[id][attr]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("%s (%s) has no attribute %s in the local stack", id, d.t.Resources[id].Type, attr)
}

func shortHash(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}

// name is the physical name CloudFormation would generate for a resource
// without an explicit one ("<stack>-<logical id>-<suffix>"), kept within
// max characters and stable across restarts.
func (d *deployment) name(id string, max int) string {
	n := d.stack + "-" + id
	suffix := "-" + strings.ToUpper(shortHash(d.salt+"/"+d.stack+"/"+id, 12))
	if len(n)+len(suffix) > max {
		n = n[:max-len(suffix)]
	}
	return n + suffix
}

func (d *deployment) arn(service, resource string) string {
	return fmt.Sprintf("arn:%s:%s:%s:%s:%s", localPartition, service, localRegion, localAccount, resource)
}

// deploy creates every resource.
func (d *deployment) deploy(ctx context.Context) error {
	order, err := d.t.Order()
	if err != nil {
		return err
	}
	for _, id := range order {
		res := d.t.Resources[id]
		if res.Condition != "" {
			ok, err := d.r.Condition(res.Condition)
			if err != nil {
				return fmt.Errorf("resource %s: condition %s: %w", id, res.Condition, err)
			}
			if !ok {
				continue // CloudFormation does not create it either
			}
		}
		if d.skipped(id) {
			continue
		}
		if res.Type == "Custom::S3PrefixList" {
			// Its provider is not run (skipped): it gets its id alone.
			if err := d.create(ctx, id, res.Type, nil); err != nil {
				return err
			}
			continue
		}
		props, err := d.r.Properties(id)
		if err != nil {
			return err
		}
		props = substitute(props, d.substitute, d.origins).(map[string]any)
		d.props[id] = props
		if err := d.create(ctx, id, res.Type, props); err != nil {
			return fmt.Errorf("deploy %s (%s): %w", id, res.Type, err)
		}
	}
	return nil
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// create gives one resource its physical id and attributes, creating it
// on its stand-in where one runs.
func (d *deployment) create(ctx context.Context, id, typ string, p map[string]any) error {
	set := func(ref string, attrs map[string]any) {
		d.phys[id] = ref
		d.attrs[id] = attrs
	}
	switch typ {
	case "AWS::DynamoDB::Table":
		name := str(p, "TableName")
		if name == "" {
			name = d.name(id, 255)
		}
		if err := d.createTable(ctx, name, p); err != nil {
			return err
		}
		arn := d.arn("dynamodb", "table/"+name)
		set(name, map[string]any{"Arn": arn, "StreamArn": arn + "/stream/local"})
	case "AWS::SecretsManager::Secret":
		arn, err := d.createSecret(ctx, id, p)
		if err != nil {
			return err
		}
		set(arn, map[string]any{"Id": arn})
	case "AWS::SQS::Queue":
		name := str(p, "QueueName")
		if name == "" {
			name = d.name(id, 80)
		}
		url, err := d.createQueue(ctx, name, p)
		if err != nil {
			return err
		}
		set(url, map[string]any{"Arn": d.arn("sqs", name), "QueueName": name, "QueueUrl": url})
	case "AWS::ECS::Cluster":
		name := str(p, "ClusterName")
		if name == "" {
			name = d.name(id, 255)
		}
		out, err := d.ecs.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(name)})
		if err != nil {
			return err
		}
		set(name, map[string]any{"Arn": aws.ToString(out.Cluster.ClusterArn)})
	case "AWS::ECS::TaskDefinition":
		in := &ecs.RegisterTaskDefinitionInput{}
		if err := viaJSON(p, in); err != nil {
			return err
		}
		if in.Family == nil {
			in.Family = aws.String(d.name(id, 255))
		}
		out, err := d.ecs.RegisterTaskDefinition(ctx, in)
		if err != nil {
			return err
		}
		arn := aws.ToString(out.TaskDefinition.TaskDefinitionArn)
		set(arn, map[string]any{"TaskDefinitionArn": arn})
	case "AWS::IAM::Role":
		name := str(p, "RoleName")
		if name == "" {
			name = d.name(id, 64)
		}
		arn := fmt.Sprintf("arn:%s:iam::%s:role/%s", localPartition, localAccount, strings.TrimPrefix(str(p, "Path")+name, "/"))
		set(name, map[string]any{"Arn": arn, "RoleId": "AROA" + strings.ToUpper(shortHash(arn, 17))})
	case "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy":
		name := str(p, "PolicyName")
		if name == "" {
			name = d.name(id, 128)
		}
		set(name, map[string]any{"PolicyArn": fmt.Sprintf("arn:%s:iam::%s:policy/%s", localPartition, localAccount, name)})
	case "AWS::Lambda::Function":
		name := str(p, "FunctionName")
		if name == "" {
			name = d.name(id, 64)
		}
		set(name, map[string]any{"Arn": d.arn("lambda", "function:"+name)})
	case "AWS::ApiGatewayV2::Api":
		set("local"+shortHash(id, 6), map[string]any{"ApiEndpoint": d.apiURL, "ApiId": "local" + shortHash(id, 6)})
	case "AWS::Logs::LogGroup":
		name := str(p, "LogGroupName")
		if name == "" {
			name = d.name(id, 512)
		}
		set(name, map[string]any{"Arn": d.arn("logs", "log-group:"+name+":*")})
	case "AWS::Events::Rule":
		name := str(p, "Name")
		if name == "" {
			name = d.name(id, 64)
		}
		set(name, map[string]any{"Arn": d.arn("events", "rule/"+name)})
	case "AWS::CloudWatch::Alarm":
		name := str(p, "AlarmName")
		if name == "" {
			name = d.name(id, 255)
		}
		set(name, map[string]any{"Arn": d.arn("cloudwatch", "alarm:"+name)})
	case "AWS::EC2::VPC":
		vpc := "vpc-" + shortHash(id, 17)
		set(vpc, map[string]any{"CidrBlock": str(p, "CidrBlock"), "DefaultSecurityGroup": "sg-" + shortHash(id+"/default", 17),
			"DefaultNetworkAcl": "acl-" + shortHash(id, 17), "VpcId": vpc})
	case "AWS::EC2::Subnet":
		sn := "subnet-" + shortHash(id, 17)
		set(sn, map[string]any{"SubnetId": sn, "AvailabilityZone": str(p, "AvailabilityZone")})
	case "AWS::EC2::SecurityGroup":
		sg := "sg-" + shortHash(id, 17)
		set(sg, map[string]any{"GroupId": sg, "VpcId": str(p, "VpcId")})
	case "AWS::EFS::FileSystem":
		fs := efsID(id)
		set(fs, map[string]any{"FileSystemId": fs, "Arn": d.arn("elasticfilesystem", "file-system/"+fs)})
	case "AWS::EFS::AccessPoint":
		ap := "fsap-" + shortHash(id, 17)
		set(ap, map[string]any{"AccessPointId": ap, "Arn": d.arn("elasticfilesystem", "access-point/"+ap)})
	case "AWS::S3::Bucket":
		// The worktree snapshots' bucket, made in the S3 stand-in (behind
		// the S3 gate, as strict as the bucket's policy: docs/aws-local.md).
		name := str(p, "BucketName")
		if name == "" {
			name = strings.ToLower(d.name(id, 63)) // S3's names are lower case
		}
		if d.s3 != nil {
			if err := d.s3.CreateBucket(name); err != nil {
				return fmt.Errorf("bucket %s: %w", id, err)
			}
		}
		set(name, map[string]any{"Arn": fmt.Sprintf("arn:%s:s3:::%s", localPartition, name),
			"DomainName": name + ".s3.amazonaws.com", "RegionalDomainName": name + ".s3." + localRegion + ".amazonaws.com"})
	case "AWS::ECS::Service":
		// Its task is not run by the ECS stand-in: the one service of the
		// stack, the egress proxy, runs in this process (egress.go).
		name := str(p, "ServiceName")
		if name == "" {
			name = d.name(id, 255)
		}
		arn := d.arn("ecs", "service/"+str(p, "Cluster")+"/"+name)
		set(arn, map[string]any{"Name": name, "ServiceArn": arn})
	case "AWS::ServiceDiscovery::PrivateDnsNamespace":
		ns := "ns-" + shortHash(id, 16)
		set(ns, map[string]any{"Id": ns, "Arn": d.arn("servicediscovery", "namespace/"+ns), "HostedZoneId": "Z" + strings.ToUpper(shortHash(id, 20))})
	case "AWS::ServiceDiscovery::Service":
		sv := "srv-" + shortHash(id, 16)
		set(sv, map[string]any{"Id": sv, "Arn": d.arn("servicediscovery", "service/"+sv), "Name": str(p, "Name")})
	case "AWS::Route53Resolver::FirewallDomainList", "AWS::Route53Resolver::FirewallRuleGroup":
		// No local effect: a worker container here has no resolver at all.
		rid := "rslvr-fw-" + shortHash(id, 17)
		set(rid, map[string]any{"Id": rid, "Arn": d.arn("route53resolver", "firewall/"+rid)})
	case "Custom::S3PrefixList":
		// The custom resource looks up S3's managed prefix list in the
		// region; the local stack runs no provider, and the id only names
		// the worker security group's rule (no local effect).
		set("pl-"+shortHash(id, 17), map[string]any{"PrefixListId": "pl-" + shortHash(id, 17)})
	default:
		// Everything else (routes, integrations, stages, permissions,
		// alarms' actions, flow logs, …) is read by the stack's own code
		// from the template, or has no local effect: it gets an id.
		set(id+"-"+shortHash(d.stack+"/"+id, 8), map[string]any{})
	}
	d.createdBy[id] = typ
	return nil
}

// skipped reports whether a resource belongs to a custom resource: the
// provider function that CloudFormation calls to create it, its role and
// the custom resource itself. The local stack runs no custom resource
// providers (they manage AWS-only things, such as the VPC's default
// security group); a resource that refers to one fails to resolve.
func (d *deployment) skipped(id string) bool {
	res := d.t.Resources[id]
	if res.Type == "Custom::S3PrefixList" {
		return false // an id with no local effect (create)
	}
	if strings.HasPrefix(res.Type, "Custom::") || res.Type == "AWS::CloudFormation::CustomResource" {
		return true
	}
	path, _ := res.Metadata["aws:cdk:path"].(string)
	return strings.Contains(path, "CustomResourceProvider/")
}

// viaJSON fills an SDK input from CloudFormation properties, whose names
// are the API's in PascalCase (encoding/json matches them without regard
// to case).
func viaJSON(props map[string]any, in any) error {
	b, err := json.Marshal(props)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, in)
}

func (d *deployment) createTable(ctx context.Context, name string, p map[string]any) error {
	in := &dynamodb.CreateTableInput{}
	keep := map[string]any{}
	for _, k := range []string{"KeySchema", "AttributeDefinitions", "BillingMode", "GlobalSecondaryIndexes",
		"LocalSecondaryIndexes", "ProvisionedThroughput"} {
		if v, ok := p[k]; ok {
			keep[k] = v
		}
	}
	if err := viaJSON(keep, in); err != nil {
		return err
	}
	in.TableName = aws.String(name)
	if _, err := d.ddb.CreateTable(ctx, in); err != nil {
		var inUse *ddbtypes.ResourceInUseException
		if !errors.As(err, &inUse) {
			return err
		}
	}
	if ttl, ok := p["TimeToLiveSpecification"].(map[string]any); ok && ttl["Enabled"] == true {
		_, err := d.ddb.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String(name),
			TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{Enabled: aws.Bool(true),
				AttributeName: aws.String(str(ttl, "AttributeName"))}})
		if err != nil && !strings.Contains(err.Error(), "already enabled") {
			return fmt.Errorf("time to live: %w", err)
		}
	}
	return nil
}

func (d *deployment) createQueue(ctx context.Context, name string, p map[string]any) (string, error) {
	attrs := map[string]string{}
	for _, k := range []string{"MessageRetentionPeriod", "VisibilityTimeout", "DelaySeconds", "MaximumMessageSize",
		"ReceiveMessageWaitTimeSeconds"} {
		if v, ok := p[k]; ok {
			s, _ := scalarString(v)
			attrs[k] = s
		}
	}
	out, err := d.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return fmt.Sprint(x), true
	case bool:
		return fmt.Sprint(x), true
	}
	return "", false
}

// createSecret creates a secret as CloudFormation does: with the given
// SecretString, or one generated by Secrets Manager's GetRandomPassword
// (GenerateSecretString; CloudFormation generates one for a secret that
// names neither).
func (d *deployment) createSecret(ctx context.Context, id string, p map[string]any) (string, error) {
	name := str(p, "Name")
	if name == "" {
		name = d.name(id, 512)
	}
	value, hasValue := p["SecretString"].(string)
	if !hasValue {
		gen, _ := p["GenerateSecretString"].(map[string]any)
		in := &secretsmanager.GetRandomPasswordInput{}
		if err := viaJSON(gen, in); err != nil {
			return "", err
		}
		out, err := d.secrets.GetRandomPassword(ctx, in)
		if err != nil {
			return "", fmt.Errorf("generate the secret value: %w", err)
		}
		value = aws.ToString(out.RandomPassword)
		if tpl, key := str(gen, "SecretStringTemplate"), str(gen, "GenerateStringKey"); tpl != "" && key != "" {
			var obj map[string]any
			if err := json.Unmarshal([]byte(tpl), &obj); err != nil {
				return "", fmt.Errorf("SecretStringTemplate: %w", err)
			}
			obj[key] = value
			b, _ := json.Marshal(obj)
			value = string(b)
		}
	}
	in := &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)}
	if desc := str(p, "Description"); desc != "" {
		in.Description = aws.String(desc)
	}
	out, err := d.secrets.CreateSecret(ctx, in)
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ARN), nil
}

// substitute replaces every string value equal to a key of subs, and the
// origin of every URL whose origin is a key of origins (the value is that
// origin, or it goes on with a "/").
func substitute(v any, subs, origins map[string]string) any {
	switch x := v.(type) {
	case string:
		if r, ok := subs[x]; ok {
			return r
		}
		for from, to := range origins {
			if rest, ok := strings.CutPrefix(x, from); ok && (rest == "" || rest[0] == '/') {
				return to + rest
			}
		}
	case map[string]any:
		for k, e := range x {
			x[k] = substitute(e, subs, origins)
		}
	case []any:
		for i, e := range x {
			x[i] = substitute(e, subs, origins)
		}
	}
	return v
}

// efsID is the id of the template's EFS file system id: known before the
// deployment, so the ECS stand-in can be told where each file system's
// folder is when it starts.
func efsID(logicalID string) string { return "fs-" + shortHash(logicalID, 17) }
