package dynamostore

import (
	"context"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// NewClientFromEnv builds a DynamoDB client the way every AWS SDK does, from
// the standard variables and files: AWS_REGION, the credential chain, and
// AWS_ENDPOINT_URL_DYNAMODB (or AWS_ENDPOINT_URL) for a stand-in such as
// DynamoDB Local or LocalStack. With an endpoint set, response checksum
// validation is off: DynamoDB Local answers errors without the checksum the
// SDK expects and the SDK would log a warning for each. opts apply after
// (a test's or a fault run's HTTP transport).
func NewClientFromEnv(ctx context.Context, opts ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, galleyerr.E(galleyerr.Op("dynamostore.NewClientFromEnv"), galleyerr.Other, err)
	}
	local := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		if local {
			o.DisableValidateResponseChecksum = true
		}
	}}, opts...)...), nil
}

// Open is the one call a server makes: a client from the environment, the
// table created when missing, and the store on it.
func Open(ctx context.Context, table string, opts ...Option) (*Store, error) {
	c, err := NewClientFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	s := New(c, table, opts...)
	if err := s.EnsureTable(ctx); err != nil {
		return nil, err
	}
	return s, nil
}
