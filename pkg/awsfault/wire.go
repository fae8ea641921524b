package awsfault

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Transport is an http.RoundTripper that injects Faults' faults into the
// requests of an AWS JSON service (DynamoDB, SQS) on their way to Base, below
// the SDK: what it answers is what the SDK's retryer sees, so a 500 or a
// reset after an applied write is sent again by the SDK itself, as AWS's
// clients do. It knows a request's operation by its X-Amz-Target header;
// other requests pass untouched. Faults it applies: Throttle (AWS's
// throttling error, nothing forwarded), ServerError and Reset (forwarded,
// then a 500 or a reset connection), TxConflict (DynamoDB's plain writes
// refused with TransactionConflictException, nothing forwarded). The
// decorators' faults (Timeout, ...) pass.
type Transport struct {
	Base   http.RoundTripper // nil: http.DefaultTransport
	Faults *Injector
	// Between, when set, runs after a ServerError's or Reset's request was
	// applied and before its failure is answered (and so before the SDK's
	// resend): another client's write landing in that gap.
	Between func(op string)
	n       atomic.Int64 // throttles answered, to alternate DynamoDB's two codes
}

// Services by X-Amz-Target prefix.
const (
	wireDynamo = "DynamoDB_20120810."
	wireSQS    = "AmazonSQS."
)

// wireOp splits an X-Amz-Target into its service prefix and operation.
func wireOp(r *http.Request) (svc, op string) {
	t := r.Header.Get("X-Amz-Target")
	for _, p := range []string{wireDynamo, wireSQS} {
		if strings.HasPrefix(t, p) {
			return p, strings.TrimPrefix(t, p)
		}
	}
	return "", ""
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	svc, op := wireOp(r)
	if svc == "" {
		return t.base().RoundTrip(r)
	}
	f := t.Faults.decide(op, func(f Fault) bool {
		switch f {
		case Throttle, ServerError, Reset:
			return true
		case TxConflict:
			return svc == wireDynamo && (op == "PutItem" || op == "UpdateItem" || op == "DeleteItem")
		}
		return false
	})
	switch f {
	case Throttle:
		closeBody(r)
		if svc == wireSQS {
			return wireError(r, sqsThrottled), nil
		}
		if t.n.Add(1)%2 == 0 {
			return wireError(r, dynamoThrottling), nil
		}
		return wireError(r, dynamoProvisioned), nil
	case TxConflict:
		closeBody(r)
		return wireError(r, dynamoTxConflict), nil
	case ServerError, Reset:
		t.Faults.countCall(op)
		resp, err := t.base().RoundTrip(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if t.Between != nil {
			t.Between(op)
		}
		if f == Reset {
			return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
		}
		if svc == wireSQS {
			return wireError(r, sqsInternal), nil
		}
		return wireError(r, dynamoInternal), nil
	}
	t.Faults.countCall(op)
	return t.base().RoundTrip(r)
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

// WireError is one error answer of an AWS JSON service, as the service
// writes it (docs/aws-local.md cites each).
type WireError struct {
	Status int
	Type   string // __type
	// QueryCode, for SQS (awsJson1_0 with awsQueryCompatible), is the
	// x-amzn-query-error header: the legacy code and its fault, which the
	// SDK reports as ErrorCode().
	QueryCode string
	Message   string
}

var (
	dynamoProvisioned = WireError{400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException", "",
		"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."}
	dynamoThrottling = WireError{400, "com.amazon.coral.availability#ThrottlingException", "",
		"Rate of requests exceeds the allowed throughput."}
	dynamoTxConflict = WireError{400, "com.amazonaws.dynamodb.v20120810#TransactionConflictException", "",
		"Transaction is ongoing for the item"}
	dynamoInternal = WireError{500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "",
		"Internal server error"}
	sqsThrottled = WireError{400, "com.amazonaws.sqs#RequestThrottled", "RequestThrottled;Sender",
		"Rate exceeded"}
	sqsInternal = WireError{500, "com.amazonaws.sqs#InternalError", "InternalError;Receiver",
		"We encountered an internal error. Please try again."}
)

// wireError is e as the answer to r.
func wireError(r *http.Request, e WireError) *http.Response {
	b, _ := json.Marshal(map[string]string{"__type": e.Type, "message": e.Message})
	return jsonResponse(r, e.Status, b, e.QueryCode)
}

func jsonResponse(r *http.Request, status int, body []byte, queryCode string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amzn-RequestId", fmt.Sprintf("awsfault-%d", reqIDs.Add(1)))
	if queryCode != "" {
		h.Set("X-Amzn-Query-Error", queryCode)
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r,
	}
}

var reqIDs atomic.Int64
