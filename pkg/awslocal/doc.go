// Package awslocal runs galley the way it runs on AWS, on one machine: the
// five Lambda functions (functions/) each under the Lambda Runtime
// Interface Emulator behind a local API Gateway (local/gateway), DynamoDB
// Local and fauxqs for DynamoDB and SQS (scripts/standins.sh, or any
// endpoints already set, such as LocalStack's), and the ECS stand-in
// (local/ecsstandin) running each worker task as local processes and
// sending its task state changes to the reconciler function. It is
// `galley serve --stack aws-local` (ServeAWSLocal), and what the
// conformance suite runs against in TestConformanceAWSLocal.
package awslocal
