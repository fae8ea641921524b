package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// LintRegions are the regions `make lint-template` checks the synthesized
// templates against (cfn-lint --regions): us-east-1, the region
// docs/deploy.md names (its prices and the AWS CLI's default), and two
// more of the usual ones, whose resource schemas differ from it.
var LintRegions = []string{"us-east-1", "us-west-2", "eu-west-1"}

// lintSuppressions are the cfn-lint findings accepted on every resource of
// a type, each with its reason; cfn-lint reads them from the resource's
// Metadata (cfn-lint.config.ignore_checks).
var lintSuppressions = map[string]map[string]string{
	"AWS::Lambda::Function": {
		// CDK's Function (and its custom-resource provider) depends on its
		// role explicitly as well as through Fn::GetAtt, so that the
		// role's policy exists before the function: the explicit
		// DependsOn is redundant for the role, never wrong.
		"W3005": "CDK writes DependsOn on the execution role beside the GetAtt that already orders it",
	},
	"AWS::ApiGatewayV2::ApiMapping": {
		// With a custom domain, CDK's stage mapping depends on the domain
		// name explicitly as well as through its Ref.
		"W3005": "CDK writes DependsOn on the domain name beside the Ref that already orders it",
	},
}

// addLintSuppressions puts lintSuppressions into the Metadata of every
// matching resource of the stack, CDK's own included.
func (g *Galley) addLintSuppressions() {
	for _, c := range *g.Stack.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		if !*awscdk.CfnResource_IsCfnResource(c) {
			continue
		}
		r := c.(awscdk.CfnResource)
		checks := lintSuppressions[*r.CfnResourceType()]
		if len(checks) == 0 {
			continue
		}
		ids := sortedKeys(checks)
		r.AddMetadata(jsii.String("cfn-lint"), map[string]any{"config": map[string]any{"ignore_checks": ids}})
	}
}
