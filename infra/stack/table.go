package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/jsii-runtime-go"
)

// addTable makes the one table every record lives in.
func (g *Galley) addTable() {
	str := func(name string) *awsdynamodb.Attribute {
		return &awsdynamodb.Attribute{Name: jsii.String(name), Type: awsdynamodb.AttributeType_STRING}
	}
	g.Table = awsdynamodb.NewTable(g.Stack, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey:        str("pk"),
		SortKey:             str("sk"),
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String("expires"),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
		DeletionProtection: jsii.Bool(true),
		RemovalPolicy:      awscdk.RemovalPolicy_RETAIN,
	})
	g.Table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String("gsi1"),
		PartitionKey:   str("gsi1pk"),
		SortKey:        str("gsi1sk"),
		ProjectionType: awsdynamodb.ProjectionType_ALL,
	})
}
