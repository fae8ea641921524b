package ecsrt

import (
	"context"
	"errors"
	"strconv"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// class is what an ECS error means for a RunTask attempt.
type class int

const (
	classRefused   class = iota // a definite refusal: nothing was launched, a retry will not help
	classThrottled              // rejected before it was processed: nothing launched, a retry may help
	classCapacity               // no capacity to place the task: nothing launched
	classUncertain              // a server fault or a lost answer: a task may exist
	classConverged              // the clientToken already names a task
)

type classified struct {
	class      class
	msg        string
	arn        string // for classConverged
	retryAfter int    // seconds, when the answer said
}

// throttleCodes are the error codes AWS answers a throttled call with.
var throttleCodes = map[string]bool{
	"ThrottlingException": true, "Throttling": true, "ThrottledException": true,
	"RequestThrottledException": true, "TooManyRequestsException": true,
	"RequestLimitExceeded": true, "RequestThrottled": true, "SlowDown": true,
}

// classify reads an error of a RunTask call.
func classify(err error) classified {
	c := classified{msg: err.Error()}
	var conflict *types.ConflictException
	if errors.As(err, &conflict) && len(conflict.ResourceIds) > 0 {
		c.class, c.arn = classConverged, conflict.ResourceIds[0]
		return c
	}
	var re *awshttp.ResponseError
	status := 0
	if errors.As(err, &re) && re.Response != nil {
		status = re.Response.StatusCode
		if s, perr := strconv.Atoi(re.Response.Header.Get("Retry-After")); perr == nil && s > 0 {
			c.retryAfter = s
		}
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		// No answer, or one that could not be read: the request may have
		// been applied. (A context ended before sending is as uncertain to
		// the caller, who cannot tell the two apart.)
		c.class = classUncertain
		return c
	}
	code, msg := ae.ErrorCode(), ae.ErrorMessage()
	c.msg = code + ": " + msg
	switch {
	case throttleCodes[code]:
		c.class = classThrottled
	case code == "LimitExceededException" || capacityMessage(msg):
		c.class = classCapacity
	case throttledMessage(msg):
		// EC2 throttling ECS met while it set the task's network up,
		// passed on inside another code: "InvalidParameterException: Error
		// retrieving security group information for [sg-…]: Request limit
		// exceeded. (ErrorCode: RequestLimitExceeded)".
		c.class = classThrottled
	case code == "ServerException" || ae.ErrorFault() == smithy.FaultServer || status >= 500:
		c.class = classUncertain
	default:
		c.class = classRefused
	}
	return c
}

// capacityFailure reports whether a RunTask failure reason says the task
// could not be placed for want of capacity.
func capacityFailure(reason string) bool {
	return strings.HasPrefix(reason, "RESOURCE:") || reason == "AGENT" || capacityMessage(reason)
}

// capacityPhrases are how ECS words a shortage of Fargate capacity, or an
// account quota reached, in a failure reason or an error message: "You've
// reached the limit on the number of vCPUs you can run concurrently" (the
// Fargate vCPU quota, which a fresh account meets first), "The requested
// CPU configuration is above your limit".
var capacityPhrases = []string{
	"capacity is unavailable", "capacity unavailable", "insufficient capacity",
	"not enough capacity", "no capacity", "out of capacity",
	"reached the limit on the number of", "above your limit",
}

// throttlePhrases are how a throttled call is worded inside an error of
// another code.
var throttlePhrases = []string{
	"request limit exceeded", "requestlimitexceeded", "rate exceeded", "throttl", "too many requests",
}

func throttledMessage(s string) bool {
	s = strings.ToLower(s)
	for _, p := range throttlePhrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// quotaMessage reports a capacity answer that is the account's quota: it
// lasts until the quota is raised, so the hint is to wait long.
func quotaMessage(s string) bool {
	s = strings.ToLower(s)
	return strings.Contains(s, "reached the limit on the number of") || strings.Contains(s, "above your limit")
}

// quotaRetryAfter is the retry hint of a quota refusal, in seconds.
const quotaRetryAfter = 300

func capacityMessage(s string) bool {
	s = strings.ToLower(s)
	for _, p := range capacityPhrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// taskNotFound reports whether StopTask found no such task.
func taskNotFound(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "ResourceNotFoundException":
		return true
	case "InvalidParameterException", "ClientException":
		m := strings.ToLower(ae.ErrorMessage())
		return strings.Contains(m, "not found") || strings.Contains(m, "missing")
	}
	return false
}

// apiError gives an error of a call other than RunTask its kind: transient
// (throttled, a server fault, no answer) is Unavailable, the rest Other.
func apiError(call string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return galleyerr.E(galleyerr.Unavailable, call, err)
	}
	switch c := classify(err); c.class {
	case classThrottled, classUncertain:
		return galleyerr.E(galleyerr.Unavailable, call+": "+c.msg)
	default:
		return galleyerr.E(galleyerr.Other, call+": "+c.msg)
	}
}

func rateLimited(msg string, retryAfter int) error {
	return &galleyerr.Error{Kind: galleyerr.RateLimited, Msg: msg, RetryAfterSeconds: retryAfter}
}

// wrap names op on err, keeping its kind and retry hint where galleyerr
// looks for them.
func wrap(op galleyerr.Op, err error) error {
	var e *galleyerr.Error
	if errors.As(err, &e) && e.Op == "" {
		e.Op = string(op)
		return e
	}
	return galleyerr.E(op, err)
}

func wrapNil(op galleyerr.Op, err error) error {
	if err == nil {
		return nil
	}
	return wrap(op, err)
}
