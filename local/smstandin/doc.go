// Package smstandin is a stand-in for AWS Secrets Manager on one machine:
// an http.Handler speaking Secrets Manager's awsJson1_1 protocol
// (X-Amz-Target "secretsmanager.<Op>"), so that the real AWS SDK for Go v2
// client, pointed at it with BaseEndpoint or AWS_ENDPOINT_URL_SECRETS_MANAGER,
// reads the stack's secrets the way the deployed functions and the ECS task
// execution role read them: by name, full ARN or partial ARN, by version id
// or staging label (AWSCURRENT, AWSPREVIOUS).
//
// It serves CreateSecret, GetSecretValue, PutSecretValue, DescribeSecret,
// ListSecrets, UpdateSecretVersionStage, DeleteSecret and GetRandomPassword.
// The stack rotates no secret (the operator rotates by put-secret-value,
// docs/deploy.md), so no rotation call (RotateSecret, CancelRotateSecret) is
// served; nor are replication, resource policies, tags after creation,
// RestoreSecret or BatchGetSecretValue: a call the stand-in does not serve is
// refused, never faked.
//
// It is at least as strict as the service: ARNs carry the six random
// characters AWS appends to a name; names, lengths and sizes (65,536 bytes
// of secret) are validated; a request with no SigV4 Authorization header is
// refused (the IAM gate in front of it verifies signatures); a secret
// scheduled for deletion refuses its value; errors carry AWS's codes and
// messages as HTTP 400 {"__type", "message"}. Values never appear in a log
// line, an error or a request record. The protocol's kernel (routing,
// errors, request record, fault queue) is local/awswire, which the ECS
// stand-in shares.
//
// The local stack also drives it in process: Create (or CreateGenerated, for
// a template's GenerateSecretString), Put, ARN and Resolve (which turns a
// secret id into its ARN, for the IAM gate), and Seed, which puts the values
// the operator names (NAME=file:PATH, NAME=env:VARIABLE) as new AWSCURRENT
// versions. Secrets live in memory.
package smstandin
