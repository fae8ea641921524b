package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// outcome classifies a failed call by what it says about the write.
type outcome int

const (
	// notApplied: DynamoDB refused the request before applying it
	// (throttling, an ongoing transaction on the item). Safe to report as
	// a definite failure.
	notApplied outcome = iota
	// unknown: the request may have been applied (timeout, reset, 5xx,
	// cancelled context, anything unrecognised).
	unknown
	// invalid: the request can never succeed as sent (validation, missing
	// table, item too large).
	invalid
)

// Error codes DynamoDB answers when it did not apply a request.
var notAppliedCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"RequestLimitExceeded":                   true,
	"LimitExceededException":                 true,
	"TransactionConflictException":           true,
	"ReplicatedWriteConflictException":       true,
	// A failed condition and a cancelled transaction are answers too:
	// nothing was applied.
	"ConditionalCheckFailedException": true,
	"TransactionCanceledException":    true,
}

var invalidCodes = map[string]bool{
	"ValidationException":                      true,
	"ResourceNotFoundException":                true,
	"SerializationException":                   true,
	"ItemCollectionSizeLimitExceededException": true,
	"AccessDeniedException":                    true,
	"UnrecognizedClientException":              true,
	"IdempotentParameterMismatchException":     true,
}

func classify(err error) outcome {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return unknown
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		code := api.ErrorCode()
		switch {
		case notAppliedCodes[code]:
			return notApplied
		case invalidCodes[code]:
			return invalid
		}
	}
	return unknown
}

// reasonCodes returns the cancellation reason codes of a cancelled
// transaction, "" where the item had none.
func reasonCodes(err error) (*types.TransactionCanceledException, []string) {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil, nil
	}
	codes := make([]string, len(tce.CancellationReasons))
	for i, r := range tce.CancellationReasons {
		if r.Code != nil && *r.Code != "None" {
			codes[i] = *r.Code
		}
	}
	return tce, codes
}

// mapErr turns a failed call into a galley error. uncertain says that an
// earlier try of the same write may have been applied.
func mapErr(op galleyerr.Op, err error, uncertain bool) error {
	var api smithy.APIError
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	switch {
	case code == "ValidationException" && isTooLarge(api):
		return galleyerr.E(op, galleyerr.TooLarge, "the record exceeds DynamoDB's item size limit", err)
	case uncertain:
		return galleyerr.E(op, galleyerr.Unavailable, "DynamoDB did not answer; the write may or may not have happened", err)
	}
	switch classify(err) {
	case notApplied:
		return galleyerr.E(op, galleyerr.Unavailable, "DynamoDB refused the request for now; nothing was written", err)
	case invalid:
		return galleyerr.E(op, galleyerr.Other, fmt.Sprintf("DynamoDB rejected the request (%s)", code), err)
	}
	return galleyerr.E(op, galleyerr.Unavailable, "DynamoDB did not answer", err)
}

func isTooLarge(api smithy.APIError) bool {
	m := api.ErrorMessage()
	return strings.Contains(strings.ToLower(m), "item size")
}
