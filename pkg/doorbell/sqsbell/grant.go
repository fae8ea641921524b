package sqsbell

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/workerapi"
)

// STSAPI is the part of the STS client a Granter uses.
type STSAPI interface {
	AssumeRole(context.Context, *sts.AssumeRoleInput, ...func(*sts.Options)) (*sts.AssumeRoleOutput, error)
}

// Granter lets a worker's harness receive the rings of one topic itself,
// so that an idle worker waits on SQS and holds no Lambda invocation open.
// A grant is the topic's queue and credentials of the wake role (a role
// whose own policy allows receiving from and deleting in the deployment's
// doorbell queues) assumed with a session policy naming that one queue:
// AWS allows a session only what both the role's policies and the session
// policy allow, so a harness cannot receive another worker's rings even
// though every grant is of the same role.
type Granter struct {
	bell     *Bell
	sts      STSAPI
	role     string // the wake role's ARN
	region   string
	duration time.Duration
}

var _ service.WakeGranter = (*Granter)(nil)

// GrantDuration is how long a grant's credentials last: one hour, the most
// AWS allows a session assumed by another role's session (role chaining,
// as a Lambda function's is). The harness renews a grant before it ends.
const GrantDuration = time.Hour

// WakeActions are what a grant allows on its queue, and all a harness
// needs: a long-poll receive, and deleting the rings it received.
var WakeActions = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"}

// NewGranter grants receives on b's queues by assuming roleARN (in
// region, the queues' region) through client.
func NewGranter(b *Bell, client STSAPI, roleARN, region string) (*Granter, error) {
	if _, _, err := arnAccount(roleARN); err != nil {
		return nil, err
	}
	if region == "" {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "sqsbell: a wake grant needs the queues' region")
	}
	return &Granter{bell: b, sts: client, role: roleARN, region: region, duration: GrantDuration}, nil
}

// GrantWake creates topic's queue if needed and returns it with session
// credentials that may receive from it alone. session (the worker's
// handle) names the session, so the gate's and CloudTrail's records say
// whose receive it was.
func (g *Granter) GrantWake(ctx context.Context, topic, session string) (workerapi.WakeGrant, error) {
	const op = galleyerr.Op("sqsbell.GrantWake")
	url, err := g.bell.queue(ctx, topic)
	if err == nil {
		// Every grant touches the queue, from this process's cache too: a
		// worker asks for one about hourly while it lives, so its queue's
		// last use never ages towards the sweep; and a queue swept under a
		// cached URL is found missing and made again.
		if err = g.bell.touch(ctx, url, true); isMissing(err) {
			url, err = g.bell.queue(ctx, topic)
		} else {
			err = nil // tagged at its next grant or listen
		}
	}
	if err != nil {
		msg := "the wake queue could not be created"
		if isDeletedRecently(err) {
			msg = "the wake queue was deleted less than a minute ago; SQS allows its name again after 60 seconds"
		}
		return workerapi.WakeGrant{}, galleyerr.E(op, galleyerr.Unavailable, msg, err)
	}
	policy, err := g.sessionPolicy(g.bell.QueueName(topic))
	if err != nil {
		return workerapi.WakeGrant{}, galleyerr.E(op, err)
	}
	out, err := g.sts.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn:         aws.String(g.role),
		RoleSessionName: aws.String(sessionName(session)),
		Policy:          aws.String(policy),
		DurationSeconds: aws.Int32(int32(g.duration / time.Second)),
	})
	if err != nil {
		return workerapi.WakeGrant{}, galleyerr.E(op, galleyerr.Unavailable, "the wake role could not be assumed", err)
	}
	c := out.Credentials
	if c == nil || c.AccessKeyId == nil || c.SecretAccessKey == nil || c.SessionToken == nil || c.Expiration == nil {
		return workerapi.WakeGrant{}, galleyerr.Errorf(galleyerr.Unavailable, "STS answered no credentials")
	}
	return workerapi.WakeGrant{
		Kind: workerapi.WakeSQS,
		SQS: &workerapi.SQSWake{QueueURL: url, Region: g.region, AccessKeyID: *c.AccessKeyId,
			SecretAccessKey: *c.SecretAccessKey, SessionToken: *c.SessionToken},
		Expires: *c.Expiration,
	}, nil
}

// sessionPolicy allows WakeActions on the one queue.
func (g *Granter) sessionPolicy(queue string) (string, error) {
	partition, account, _ := arnAccount(g.role)
	doc := map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Effect":   "Allow",
			"Action":   WakeActions,
			"Resource": "arn:" + partition + ":sqs:" + g.region + ":" + account + ":" + queue,
		}},
	}
	b, err := json.Marshal(doc)
	return string(b), err
}

// arnAccount reads the partition and account of an IAM role ARN
// (arn:<partition>:iam::<account>:role/<name>).
func arnAccount(roleARN string) (partition, account string, err error) {
	p := strings.SplitN(roleARN, ":", 6)
	if len(p) != 6 || p[0] != "arn" || p[2] != "iam" || p[4] == "" || !strings.HasPrefix(p[5], "role/") {
		return "", "", galleyerr.Errorf(galleyerr.Invalid, "sqsbell: %q is not an IAM role ARN", roleARN)
	}
	return p[1], p[4], nil
}

// sessionName fits a handle to STS's RoleSessionName: 2 to 64 of
// [\w+=,.@-]. Handles already are; anything else is replaced.
func sessionName(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_+=,.@-", c) >= 0
		if !ok {
			b[i] = '-'
		}
	}
	s = string(b)
	if len(s) > 64 {
		s = s[:64]
	}
	for len(s) < 2 {
		s += "-"
	}
	return s
}
