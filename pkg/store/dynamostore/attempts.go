package dynamostore

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// attempts counts the requests the SDK sent for one call, its own retries
// included. The SDK resends a request that got a 500 or a reset connection,
// so a call answered by a second attempt may have been applied by the
// first: a failed condition then proves nothing about this call's write.
type attempts struct{ n atomic.Int32 }

// sent reports whether the SDK sent the call more than once.
func (a *attempts) resent() bool { return a.n.Load() > 1 }

// option adds the counter to one call, after the SDK's retry step, so that
// it runs once per attempt. A stack without that step (a test's fake
// client) counts once per call.
func (a *attempts) option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			mw := middleware.FinalizeMiddlewareFunc("galleyAttempts", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				a.n.Add(1)
				return next.HandleFinalize(ctx, in)
			})
			if err := st.Finalize.Insert(mw, "Retry", middleware.After); err != nil {
				return st.Finalize.Add(mw, middleware.After)
			}
			return nil
		})
	}
}
