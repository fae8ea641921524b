// Package awslocal runs galley the way it runs on AWS, on one machine: the
// six Lambda functions (functions/) each under the Lambda Runtime
// Interface Emulator behind a local API Gateway (local/gateway), DynamoDB
// Local and fauxqs for DynamoDB and SQS (scripts/standins.sh, or any
// endpoints already set, such as LocalStack's), and the ECS stand-in
// (local/ecsstandin) running each worker task as a container of the worker
// image with its task definition applied (local/container), or as host
// programs where no container runtime is, and sending its task state
// changes to the reconciler function. It drives the stand-ins beside it in
// local/, which is why it lives here and not under pkg/.
//
// Files: stack.go holds the Config and the Stack, start.go Start, the
// phases that start the stack from a template, deploy.go and model.go
// deploy its resources, config.go holds the defaults, principals.go the
// IAM principals and TLS, gitforge.go the git host, functions.go the
// emulators, workerimage.go the worker tasks' image, containers.go the
// container network, serve.go `galley-dev serve --stack aws-local` and
// Close, accessors.go what tests read. It is what `galley-dev serve --stack
// aws-local` runs (ServeAWSLocal; make run-aws-local), and what the
// conformance suite runs against in TestConformanceAWSLocal.
package awslocal
