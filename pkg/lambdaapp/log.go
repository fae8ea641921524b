package lambdaapp

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// NewLogger returns JSON structured logs (what the functions' JSON log
// format expects) on w at level, each line naming the function and the
// Lambda request id of the invocation it belongs to.
//
// The request id comes from the record's context when the caller logged
// with one, and otherwise from the invocation in progress: a Lambda
// instance runs one invocation at a time unless the runtime says
// otherwise (AWS_LAMBDA_MAX_CONCURRENCY), so a line logged without a
// context (the service logs that way) still belongs to it.
func NewLogger(w io.Writer, fn Function, level string) *slog.Logger {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})
	return slog.New(&requestIDHandler{Handler: h.WithAttrs([]slog.Attr{slog.String("function", string(fn))})})
}

// current is the request id of the invocation in progress, when the
// instance runs one at a time.
var current atomic.Value // string

// setCurrent records the invocation in progress; it returns a function
// that clears it.
func setCurrent(ctx context.Context) func() {
	if lambdacontext.MaxConcurrency() != 1 {
		return func() {}
	}
	id := ""
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		id = lc.AwsRequestID
	}
	current.Store(id)
	return func() { current.Store("") }
}

// RequestID returns the Lambda request id of ctx, or of the invocation in
// progress.
func RequestID(ctx context.Context) string {
	if ctx != nil {
		if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
			return lc.AwsRequestID
		}
	}
	if lambdacontext.MaxConcurrency() == 1 {
		if id, _ := current.Load().(string); id != "" {
			return id
		}
	}
	return ""
}

type requestIDHandler struct{ slog.Handler }

func (h *requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("requestId", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h *requestIDHandler) WithGroup(name string) slog.Handler {
	return &requestIDHandler{h.Handler.WithGroup(name)}
}
