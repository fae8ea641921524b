package ecsstandin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"
)

// SecretsGetter reads a secret's value: *secretsmanager.Client.
type SecretsGetter interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput,
		optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// SecretsSource returns a Secrets Manager client acting as the execution
// role executionRoleArn, as the ECS agent assumes it to read a task's
// secrets: a secret the role may not read then fails the task's start.
type SecretsSource func(ctx context.Context, executionRoleArn string) (SecretsGetter, error)

// WithSecrets sets how the stand-in reads the secrets of a task
// definition's containers. Without it a task with secrets fails to start.
func WithSecrets(src SecretsSource) Option { return func(s *Server) { s.secrets = src } }

// secretRef is a container secret's valueFrom: a Secrets Manager secret
// ARN, then optionally a JSON key, a version stage and a version ID.
type secretRef struct {
	secretID, jsonKey, versionStage, versionID string
}

// parseSecretRef reads valueFrom. Anything but a Secrets Manager ARN is an
// SSM parameter (ARN or name), which the stand-in cannot resolve.
func parseSecretRef(valueFrom string) (secretRef, error) {
	if !strings.HasPrefix(valueFrom, smArnPrefix) {
		return secretRef{}, fmt.Errorf("valueFrom %q names an SSM Parameter Store parameter, which the ECS stand-in does not resolve: use a Secrets Manager secret ARN", valueFrom)
	}
	// arn:aws:secretsmanager:region:account:secret:name[:json-key[:version-stage[:version-id]]]
	parts := strings.Split(valueFrom, ":")
	if len(parts) < 7 || len(parts) > 10 || parts[5] != "secret" || parts[6] == "" {
		return secretRef{}, fmt.Errorf("valueFrom %q is not a Secrets Manager secret ARN", valueFrom)
	}
	r := secretRef{secretID: strings.Join(parts[:7], ":")}
	extra := append(parts[7:], "", "", "")
	r.jsonKey, r.versionStage, r.versionID = extra[0], extra[1], extra[2]
	return r, nil
}

// resolveSecrets reads every secret of c as the execution role, or
// returns the stoppedReason Fargate gives when it cannot.
func (s *Server) resolveSecrets(ctx context.Context, executionRole string, secrets []Secret) (map[string]string, string) {
	if len(secrets) == 0 {
		return nil, ""
	}
	const prefix = "ResourceInitializationError: unable to pull secrets or registry auth: execution resource retrieval failed: unable to retrieve secret from asm: service call has been retried 1 time(s): "
	if s.secrets == nil {
		return nil, prefix + "the ECS stand-in has no Secrets Manager (WithSecrets)"
	}
	client, err := s.secrets(ctx, executionRole)
	if err != nil {
		return nil, prefix + "cannot act as the execution role " + executionRole + ": " + err.Error()
	}
	out := map[string]string{}
	for _, sec := range secrets {
		ref, err := parseSecretRef(sec.ValueFrom)
		if err != nil {
			return nil, prefix + err.Error()
		}
		in := &secretsmanager.GetSecretValueInput{SecretId: aws.String(ref.secretID)}
		if ref.versionStage != "" {
			in.VersionStage = aws.String(ref.versionStage)
		}
		if ref.versionID != "" {
			in.VersionId = aws.String(ref.versionID)
		}
		res, err := client.GetSecretValue(ctx, in)
		if err != nil {
			return nil, prefix + "failed to fetch secret " + ref.secretID + " from secrets manager: " + describeErr(err)
		}
		if res.SecretString == nil {
			return nil, prefix + "secret " + ref.secretID + " holds no string value"
		}
		v := *res.SecretString
		if ref.jsonKey != "" {
			var m map[string]any
			if json.Unmarshal([]byte(v), &m) != nil {
				return nil, prefix + "secret " + ref.secretID + " is not a JSON object, so it has no key " + ref.jsonKey
			}
			kv, ok := m[ref.jsonKey].(string)
			if !ok {
				return nil, prefix + "secret " + ref.secretID + " has no string key " + ref.jsonKey
			}
			v = kv
		}
		out[sec.Name] = v
	}
	return out, ""
}

// describeErr writes an SDK error as the agent's log does: the service's
// code and message, the status and the request ID. Secrets Manager never
// puts a secret's value in an error.
func describeErr(err error) string {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return err.Error()
	}
	msg := ae.ErrorCode() + ": " + ae.ErrorMessage()
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		msg += fmt.Sprintf(" status code: %d, request id: %s", re.HTTPStatusCode(), re.ServiceRequestID())
	}
	return msg
}
